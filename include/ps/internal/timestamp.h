// Request timestamps: 64-bit inside Ember, an int at ps-lite's API.
//
// A customer numbers its requests with a 64-bit sequence that never wraps
// (RequestTracker); the wire, the server's dedup table and the worker's
// done_below carry it whole. ps-lite's API hands out and takes back an int
// (KVWorker::Push/Pull returns it, Wait takes it, KVMeta::timestamp and
// SimpleData::timestamp hold it): that int is the sequence's low 31 bits.
// The way back is unambiguous for every request among the newest 2^31 of
// its customer: an API timestamp means the newest request issued (or, on
// the answering side, received from that customer) with those low bits. So
// at most 2^31 requests of one customer may be outstanding at once (waited
// for, or answered by a server's handle); none is in practice.
//
// Negative timestamps are a server's own (local requests of replication,
// docs/replication.md); they are within the int range and pass unchanged.
// Not part of the stable API.
#ifndef PS_INTERNAL_TIMESTAMP_H_
#define PS_INTERNAL_TIMESTAMP_H_

#include <cstdint>

namespace ps {

// The low 31 bits of a request's timestamp: the API's int.
constexpr int64_t kApiTimestampMask = (int64_t{1} << 31) - 1;

// The API's int for 64-bit timestamp `timestamp` (a negative one, which is
// a server's local timestamp within the int range, unchanged).
inline int ApiTimestamp(int64_t timestamp) {
  return timestamp < 0 ? static_cast<int>(timestamp)
                       : static_cast<int>(timestamp & kApiTimestampMask);
}

// The newest 64-bit timestamp at or below `newest` whose API int is `api`:
// the request an API timestamp names, given the newest request issued (or
// received). -1 if there is none (`api` negative, or above `newest` when
// `newest` is below 2^31).
inline int64_t ResolveApiTimestamp(int api, int64_t newest) {
  if (api < 0 || newest < 0) return -1;
  const int64_t back = ((newest & kApiTimestampMask) - api) & kApiTimestampMask;
  const int64_t ts = newest - back;
  return ts < 0 ? -1 : ts;
}

}  // namespace ps

#endif  // PS_INTERNAL_TIMESTAMP_H_
