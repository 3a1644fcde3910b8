#include "app/kv_frames.h"

#include <cstdint>
#include <string>

namespace ps {

void AddKVFrames(const RawKVs& kvs, Message* msg) {
  if (kvs.keys.empty()) return;
  msg->AddData(kvs.keys);
  msg->AddData(kvs.vals);
  if (!kvs.lens.empty()) msg->AddData(kvs.lens);
}

Status ParseKVFrames(const Message& msg, size_t value_bytes, RawKVs* kvs) {
  const auto& d = msg.data;
  if (d.empty()) {
    *kvs = RawKVs();
    return Status::OK();
  }
  if (d.size() != 2 && d.size() != 3) {
    return Status::Corruption("a key-value message has " +
                              std::to_string(d.size()) +
                              " data frames; expected 2 or 3");
  }
  if (msg.meta.value_bytes != 0 &&
      static_cast<size_t>(msg.meta.value_bytes) != value_bytes) {
    return Status::InvalidArgument(
        "the sender's values have " + std::to_string(msg.meta.value_bytes) +
        " bytes, this app's have " + std::to_string(value_bytes));
  }
  if (d[0].size() % sizeof(Key) != 0) {
    return Status::Corruption("key frame of " + std::to_string(d[0].size()) +
                              " bytes is not a whole number of keys");
  }
  if (d[1].size() % value_bytes != 0) {
    return Status::Corruption("value frame of " + std::to_string(d[1].size()) +
                              " bytes is not a whole number of " +
                              std::to_string(value_bytes) + "-byte values");
  }
  if (reinterpret_cast<uintptr_t>(d[0].data()) % alignof(Key) != 0) {
    return Status::Corruption("misaligned key frame");
  }
  const size_t n = d[0].size() / sizeof(Key);
  const size_t nvals = d[1].size() / value_bytes;
  if (n == 0 && nvals != 0) {
    return Status::Corruption("values without keys");
  }
  kvs->keys = SArray<Key>(d[0]);
  kvs->vals = d[1];
  kvs->lens = SArray<int>();
  if (d.size() == 3) {
    if (d[2].size() != n * sizeof(int) ||
        reinterpret_cast<uintptr_t>(d[2].data()) % alignof(int) != 0) {
      return Status::Corruption("length frame of " +
                                std::to_string(d[2].size()) + " bytes for " +
                                std::to_string(n) + " keys");
    }
    kvs->lens = SArray<int>(d[2]);
    size_t total = 0;
    for (int len : kvs->lens) {
      if (len < 0) return Status::Corruption("negative length");
      total += static_cast<size_t>(len);
    }
    // Only a pull request may carry lengths without values (it asks for
    // them); otherwise the lengths must account for every value.
    bool pull_request = msg.meta.request && !msg.meta.push;
    if (!(pull_request && nvals == 0) && total != nvals) {
      return Status::Corruption("lengths add up to " + std::to_string(total) +
                                " values, frame has " + std::to_string(nvals));
    }
  } else if (n > 0 && nvals % n != 0) {
    return Status::Corruption(std::to_string(nvals) +
                              " values do not divide evenly over " +
                              std::to_string(n) + " keys");
  }
  return Status::OK();
}

}  // namespace ps
