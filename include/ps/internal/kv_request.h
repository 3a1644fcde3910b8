// The bytes of a key-value request as the library's engines and a server's
// request path see them (below the typed KVWorker/KVServer templates and
// the consistency controller that runs a server's requests). Not part of
// the stable API.
#ifndef PS_INTERNAL_KV_REQUEST_H_
#define PS_INTERNAL_KV_REQUEST_H_

#include <cstdint>

#include "ps/base.h"
#include "ps/internal/timestamp.h"
#include "ps/sarray.h"

namespace ps {

// One slice of a request, in bytes.
struct RawKVs {
  SArray<Key> keys;
  SArray<char> vals;
  SArray<int> lens;
};

// What a server's handle sees of one request, in bytes.
struct RawRequest {
  int cmd = 0;
  bool push = false;
  bool pull = false;
  int sender = 0;
  // The sender's 64-bit request number (ps/internal/timestamp.h); the
  // handle sees ApiTimestamp() of it.
  int64_t timestamp = 0;
  int customer_id = 0;
  int64_t clock = 0;  // the sender's clock (iterations it has finished)
  // A copy of another server's data (docs/replication.md): that server's
  // id; 0 for this server's own.
  int replica_of = 0;
  // Under replication the handle sees a local timestamp (negative); this
  // is the worker's (0 otherwise).
  int64_t origin_timestamp = 0;
  // A push a former owner handed over under bsp (docs/replication.md,
  // "Joining"): that server, whose part of the worker's request it was; the
  // push is known by (worker's request, handed_from). 0 otherwise.
  int handed_from = 0;
  // bsp: the push is committed, known to have reached every server its
  // request went to (docs/consistency.md, "A restart under bsp is exact"):
  // set by the consistency controller, and on a push another server
  // forwards as committed.
  bool committed = false;
  RawKVs kvs;
};

}  // namespace ps

#endif  // PS_INTERNAL_KV_REQUEST_H_
