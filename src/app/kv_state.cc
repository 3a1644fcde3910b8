// The chunk format in which KVServerDefaultHandle's state is copied to
// another server (ps/internal/kv_core.h).

#include <cstring>
#include <string>
#include <vector>

#include "ps/internal/kv_core.h"
#include "util/coding.h"

namespace ps {
namespace internal {
namespace {

constexpr uint32_t kMagic = 0x31534d45;  // "EMS1"
constexpr size_t kHeaderBytes = 16;      // magic, value size, key count

}  // namespace

void StoreChunkWriter::Add(Key key, const void* values, uint32_t count) {
  keys_.push_back(key);
  counts_.push_back(count);
  values_.append(static_cast<const char*>(values), count * value_bytes_);
}

size_t StoreChunkWriter::bytes() const {
  return kHeaderBytes + keys_.size() * 12 + values_.size();
}

std::string StoreChunkWriter::Finish() {
  std::string out(bytes(), '\0');
  char* p = &out[0];
  EncodeFixed32(p, kMagic);
  EncodeFixed32(p + 4, static_cast<uint32_t>(value_bytes_));
  EncodeFixed64(p + 8, keys_.size());
  p += kHeaderBytes;
  for (Key k : keys_) {
    EncodeFixed64(p, k);
    p += 8;
  }
  for (uint32_t c : counts_) {
    EncodeFixed32(p, c);
    p += 4;
  }
  if (!values_.empty()) std::memcpy(p, values_.data(), values_.size());
  keys_.clear();
  counts_.clear();
  values_.clear();
  return out;
}

Status ParseStoreChunk(const char* data, size_t size, size_t value_bytes,
                       std::vector<Key>* keys, std::vector<uint32_t>* counts,
                       const char** values) {
  if (size < kHeaderBytes || DecodeFixed32(data) != kMagic) {
    return Status::Corruption("a state chunk of " + std::to_string(size) +
                              " bytes without its header");
  }
  if (DecodeFixed32(data + 4) != value_bytes) {
    return Status::Corruption("a state chunk of " +
                              std::to_string(DecodeFixed32(data + 4)) +
                              "-byte values for a server of " +
                              std::to_string(value_bytes) + "-byte values");
  }
  const uint64_t n = DecodeFixed64(data + 8);
  if (n > (size - kHeaderBytes) / 12) {
    return Status::Corruption("a state chunk claims " + std::to_string(n) +
                              " keys in " + std::to_string(size) + " bytes");
  }
  const char* p = data + kHeaderBytes;
  keys->resize(n);
  counts->resize(n);
  for (uint64_t i = 0; i < n; ++i) (*keys)[i] = DecodeFixed64(p + 8 * i);
  p += 8 * n;
  uint64_t total = 0;
  for (uint64_t i = 0; i < n; ++i) {
    (*counts)[i] = DecodeFixed32(p + 4 * i);
    total += (*counts)[i];
  }
  p += 4 * n;
  const size_t rest = size - (p - data);
  if (value_bytes == 0 || total != rest / value_bytes ||
      rest % value_bytes != 0) {
    return Status::Corruption("a state chunk's counts add up to " +
                              std::to_string(total) + " values, it carries " +
                              std::to_string(rest) + " bytes");
  }
  *values = p;
  return Status::OK();
}

}  // namespace internal
}  // namespace ps
