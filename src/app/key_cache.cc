#include "app/key_cache.h"

namespace ps {

void KeyCache::Keep(int sender, const SArray<Key>& keys) {
  const size_t size = keys.size() * sizeof(Key);
  if (keys.empty() || size > max_bytes_) return;
  const KeySignature sig = SignKeys(keys);
  const Id id{sender, sig.low, sig.high, sig.count};
  MutexLock lock(&mu_);
  auto it = sets_.find(id);
  if (it != sets_.end()) {
    lru_.splice(lru_.begin(), lru_, it->second.age);
    return;
  }
  while (bytes_ + size > max_bytes_ && !lru_.empty()) {
    auto old = sets_.find(lru_.back());
    bytes_ -= old->second.keys.size() * sizeof(Key);
    sets_.erase(old);
    lru_.pop_back();
  }
  Entry e;
  e.keys.CopyFrom(keys.data(), keys.size());
  lru_.push_front(id);
  e.age = lru_.begin();
  sets_.emplace(id, std::move(e));
  bytes_ += size;
}

SArray<Key> KeyCache::Find(int sender, const KeySignature& sig) {
  const Id id{sender, sig.low, sig.high, sig.count};
  MutexLock lock(&mu_);
  auto it = sets_.find(id);
  if (it == sets_.end()) return SArray<Key>();
  lru_.splice(lru_.begin(), lru_, it->second.age);
  return it->second.keys;
}

size_t KeyCache::bytes() const {
  MutexLock lock(&mu_);
  return bytes_;
}

size_t KeyCache::sets() const {
  MutexLock lock(&mu_);
  return sets_.size();
}

KeyCacheHints::Send KeyCacheHints::Decide(int server, const KeySignature& sig) {
  MutexLock lock(&mu_);
  Server& s = servers_[server];
  if (s.off) return Send::kKeys;
  if (s.sets.size() >= kMaxSetsPerServer) s.sets.clear();
  uint8_t& state = s.sets[sig.low];
  if (state == 2) return Send::kSigned;
  ++state;
  return state == 1 ? Send::kKeys : Send::kKeep;
}

void KeyCacheHints::Refused(int server, const KeySignature& sig) {
  MutexLock lock(&mu_);
  Server& s = servers_[server];
  if (!s.off) s.sets[sig.low] = 2;
}

void KeyCacheHints::Disable(int server) {
  MutexLock lock(&mu_);
  Server& s = servers_[server];
  s.off = true;
  s.sets.clear();
}

}  // namespace ps
