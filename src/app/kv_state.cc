// The chunk format in which KVServerDefaultHandle's state is copied to
// another server (ps/internal/kv_core.h).

#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "ps/internal/kv_core.h"
#include "util/coding.h"

namespace ps {
namespace internal {
namespace {

constexpr uint32_t kMagic = 0x31534d45;  // "EMS1"
constexpr size_t kHeaderBytes = 16;      // magic, value size, key count
constexpr size_t kRecordBytes = 12;      // a key and its value count

}  // namespace

StoreChunkWriter::StoreChunkWriter(size_t value_bytes, size_t reserve_bytes)
    : value_bytes_(value_bytes), reserve_(reserve_bytes) {}

void StoreChunkWriter::Add(Key key, const void* values, uint32_t count) {
  if (out_.empty()) {
    out_.reserve(reserve_);
    out_.resize(kHeaderBytes);
  }
  const size_t at = out_.size();
  const size_t n = static_cast<size_t>(count) * value_bytes_;
  out_.resize(at + kRecordBytes + n);
  EncodeFixed64(&out_[at], key);
  EncodeFixed32(&out_[at + 8], count);
  if (n > 0) std::memcpy(&out_[at + kRecordBytes], values, n);
  ++keys_;
}

std::string StoreChunkWriter::Finish() {
  if (out_.empty()) out_.resize(kHeaderBytes);
  EncodeFixed32(&out_[0], kMagic);
  EncodeFixed32(&out_[4], static_cast<uint32_t>(value_bytes_));
  EncodeFixed64(&out_[8], keys_);
  keys_ = 0;
  std::string done;
  done.swap(out_);
  return done;
}

Status ForEachStoreChunkKey(const char* data, size_t size, size_t value_bytes,
                            const std::function<void(Key key, uint32_t count,
                                                     const char* values)>& fn) {
  if (size < kHeaderBytes || DecodeFixed32(data) != kMagic) {
    return Status::Corruption("a state chunk of " + std::to_string(size) +
                              " bytes without its header");
  }
  if (value_bytes == 0 || DecodeFixed32(data + 4) != value_bytes) {
    return Status::Corruption("a state chunk of " +
                              std::to_string(DecodeFixed32(data + 4)) +
                              "-byte values for a server of " +
                              std::to_string(value_bytes) + "-byte values");
  }
  const uint64_t n = DecodeFixed64(data + 8);
  // Validate every record before handing out any.
  size_t at = kHeaderBytes;
  for (uint64_t i = 0; i < n; ++i) {
    if (size - at < kRecordBytes) {
      return Status::Corruption("a state chunk cut short at key " +
                                std::to_string(i) + " of " + std::to_string(n));
    }
    const uint64_t bytes = DecodeFixed32(data + at + 8) * uint64_t{value_bytes};
    if (bytes > size - at - kRecordBytes) {
      return Status::Corruption("a state chunk's key " + std::to_string(i) +
                                " claims more values than it carries");
    }
    at += kRecordBytes + bytes;
  }
  if (at != size) {
    return Status::Corruption("a state chunk with " +
                              std::to_string(size - at) + " bytes beyond its " +
                              std::to_string(n) + " keys");
  }
  for (at = kHeaderBytes; at < size;) {
    const uint32_t count = DecodeFixed32(data + at + 8);
    fn(DecodeFixed64(data + at), count, data + at + kRecordBytes);
    at += kRecordBytes + count * value_bytes;
  }
  return Status::OK();
}

}  // namespace internal
}  // namespace ps
