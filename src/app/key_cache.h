// Key caching (docs/protocol.md, "Key caching"): the parameter-server
// paper's answer to a worker that sends the same keys again and again. A
// sparse push's message to a server is two thirds keys (8 bytes a key
// against 4 of value); a worker that repeats a key set sends the server a
// 24-byte signature of it instead (app/kv_frames.h, KeySignature).
//
// The worker decides (KeyCacheHints): the first time it sends a key set to
// a server it sends the keys as they are; the second time it sends them
// asking the server to keep them; from then on the signature. A key set
// sent once (the usual case when every batch has new IDs) costs the
// worker a hash and the server nothing.
//
// The server keeps (KeyCache), within a byte budget, least recently used
// first out. A signature it does not hold (evicted, or the server restarted
// or took the part over) is refused with kKeyCacheUnknown and the worker
// sends the part again with its keys: never a wrong key. Both are
// thread-safe.
#ifndef PS_APP_KEY_CACHE_H_
#define PS_APP_KEY_CACHE_H_

#include <cstddef>
#include <cstdint>
#include <list>
#include <unordered_map>

#include "app/kv_frames.h"
#include "ps/sarray.h"
#include "util/mutex.h"

namespace ps {

// Fewer keys than this go as they are: their signature saves too little.
constexpr size_t kMinSignedKeys = 16;

// A server's kept key sets, by sender and signature.
class KeyCache {
 public:
  // At most `max_bytes` of keys kept (0: none).
  explicit KeyCache(size_t max_bytes) : max_bytes_(max_bytes) {}

  // Keeps a copy of `keys` (what `sender` asked to keep) under their
  // signature, dropping the least recently used sets beyond the budget. A
  // set larger than the budget is not kept.
  void Keep(int sender, const SArray<Key>& keys);

  // The keys kept for `sender` under `sig`, or an empty array. The array
  // shares the kept copy: the caller must not write to it.
  SArray<Key> Find(int sender, const KeySignature& sig);

  size_t bytes() const;
  size_t sets() const;
  size_t max_bytes() const { return max_bytes_; }

 private:
  struct Id {
    int sender;
    uint64_t low, high, count;
    bool operator==(const Id& o) const {
      return sender == o.sender && low == o.low && high == o.high &&
             count == o.count;
    }
  };
  struct IdHash {
    size_t operator()(const Id& id) const {
      return static_cast<size_t>(id.low ^ (uint64_t(id.sender) << 40));
    }
  };
  struct Entry {
    SArray<Key> keys;
    std::list<Id>::iterator age;  // Its place in lru_.
  };

  const size_t max_bytes_;
  mutable Mutex mu_;
  std::unordered_map<Id, Entry, IdHash> sets_ GUARDED_BY(mu_);
  std::list<Id> lru_ GUARDED_BY(mu_);  // Most recently used first.
  size_t bytes_ GUARDED_BY(mu_) = 0;
};

// A worker's record of the key sets it sent each server: seen once, or
// asked to be kept. Bounded: a server's record is cleared when it passes
// kMaxSetsPerServer sets.
class KeyCacheHints {
 public:
  enum class Send { kKeys, kKeep, kSigned };
  static constexpr size_t kMaxSetsPerServer = 1 << 16;

  // How to send key set `sig` to server `server` now, and records it.
  Send Decide(int server, const KeySignature& sig);
  // The server refused `sig` as unknown: the part goes again with its keys,
  // asking to keep them, and the set counts as kept.
  void Refused(int server, const KeySignature& sig);
  // The server keeps no keys: to it, keys go as they are from now on.
  void Disable(int server);

 private:
  struct Server {
    bool off = false;
    // By the signature's low half: 1 seen once, 2 asked to keep. (Two sets
    // that share a low half cost a refusal, never a wrong key: the server
    // checks the whole signature.)
    std::unordered_map<uint64_t, uint8_t> sets;
  };
  Mutex mu_;
  std::unordered_map<int, Server> servers_ GUARDED_BY(mu_);
};

}  // namespace ps

#endif  // PS_APP_KEY_CACHE_H_
