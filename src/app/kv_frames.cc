#include "app/kv_frames.h"

#include <cstdint>
#include <string>

namespace ps {

void AddKVFrames(const RawKVs& kvs, Message* msg, bool keys_as_requested) {
  if (kvs.keys.empty()) return;
  if (keys_as_requested) {
    msg->meta.keys_as_requested = true;
  } else {
    msg->AddData(kvs.keys);
  }
  msg->AddData(kvs.vals);
  if (!kvs.lens.empty()) msg->AddData(kvs.lens);
}

namespace {

// The sender's value size, where it gave one, is this app's.
Status CheckValueBytes(const Message& msg, size_t value_bytes) {
  if (msg.meta.value_bytes != 0 &&
      static_cast<size_t>(msg.meta.value_bytes) != value_bytes) {
    return Status::InvalidArgument(
        "the sender's values have " + std::to_string(msg.meta.value_bytes) +
        " bytes, this app's have " + std::to_string(value_bytes));
  }
  return Status::OK();
}

// Lengths of a frame: aligned, a whole number of ints, none negative; their
// sum in *total.
Status ParseLens(const SArray<char>& frame, SArray<int>* lens, size_t* total) {
  if (frame.size() % sizeof(int) != 0 ||
      reinterpret_cast<uintptr_t>(frame.data()) % alignof(int) != 0) {
    return Status::Corruption("length frame of " +
                              std::to_string(frame.size()) + " bytes");
  }
  *lens = SArray<int>(frame);
  *total = 0;
  for (int len : *lens) {
    if (len < 0) return Status::Corruption("negative length");
    *total += static_cast<size_t>(len);
  }
  return Status::OK();
}

// A keys_as_requested pull response: values, then lengths if any.
Status ParseAsRequested(const Message& msg, size_t value_bytes, RawKVs* kvs) {
  const auto& d = msg.data;
  if (msg.meta.request || !msg.meta.pull) {
    return Status::Corruption(
        "only a pull response may leave out its keys frame");
  }
  if (d.size() != 1 && d.size() != 2) {
    return Status::Corruption("a pull response without keys has " +
                              std::to_string(d.size()) +
                              " data frames; expected 1 or 2");
  }
  if (d[0].size() % value_bytes != 0) {
    return Status::Corruption("value frame of " + std::to_string(d[0].size()) +
                              " bytes is not a whole number of " +
                              std::to_string(value_bytes) + "-byte values");
  }
  *kvs = RawKVs();
  kvs->vals = d[0];
  if (d.size() == 2) {
    size_t total = 0;
    PS_RETURN_IF_ERROR(ParseLens(d[1], &kvs->lens, &total));
    if (total != d[0].size() / value_bytes) {
      return Status::Corruption("lengths add up to " + std::to_string(total) +
                                " values, frame has " +
                                std::to_string(d[0].size() / value_bytes));
    }
  }
  return Status::OK();
}

}  // namespace

Status CheckAsRequested(const RawKVs& kvs, size_t value_bytes) {
  const size_t n = kvs.keys.size();
  const size_t nvals = kvs.vals.size() / value_bytes;
  if (!kvs.lens.empty() ? kvs.lens.size() != n
                        : (n == 0 ? nvals != 0 : nvals % n != 0)) {
    return Status::Corruption(
        std::to_string(nvals) + " values" +
        (kvs.lens.empty()
             ? ""
             : " and " + std::to_string(kvs.lens.size()) + " lengths") +
        " do not fit the " + std::to_string(n) + " keys requested");
  }
  return Status::OK();
}

Status ParseKVFrames(const Message& msg, size_t value_bytes, RawKVs* kvs) {
  const auto& d = msg.data;
  if (msg.meta.keys_as_requested) {
    PS_RETURN_IF_ERROR(CheckValueBytes(msg, value_bytes));
    return ParseAsRequested(msg, value_bytes, kvs);
  }
  if (d.empty()) {
    *kvs = RawKVs();
    return Status::OK();
  }
  if (d.size() != 2 && d.size() != 3) {
    return Status::Corruption("a key-value message has " +
                              std::to_string(d.size()) +
                              " data frames; expected 2 or 3");
  }
  PS_RETURN_IF_ERROR(CheckValueBytes(msg, value_bytes));
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
    if (d[2].size() != n * sizeof(int)) {
      return Status::Corruption("length frame of " +
                                std::to_string(d[2].size()) + " bytes for " +
                                std::to_string(n) + " keys");
    }
    size_t total = 0;
    PS_RETURN_IF_ERROR(ParseLens(d[2], &kvs->lens, &total));
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
