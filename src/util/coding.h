// Fixed-width little-endian encoding of integers and floats, for file
// formats (checkpoint headers and payloads) that must read the same on any
// host.
//
// Thread safety: pure functions.
#ifndef PS_UTIL_CODING_H_
#define PS_UTIL_CODING_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace ps {

constexpr bool kLittleEndianHost = __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__;

inline void EncodeFixed32(char* dst, uint32_t v) {
  for (int i = 0; i < 4; ++i) dst[i] = static_cast<char>((v >> (8 * i)) & 0xff);
}

inline void EncodeFixed64(char* dst, uint64_t v) {
  for (int i = 0; i < 8; ++i) dst[i] = static_cast<char>((v >> (8 * i)) & 0xff);
}

inline uint32_t DecodeFixed32(const char* src) {
  const auto* p = reinterpret_cast<const unsigned char*>(src);
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(p[i]) << (8 * i);
  return v;
}

inline uint64_t DecodeFixed64(const char* src) {
  const auto* p = reinterpret_cast<const unsigned char*>(src);
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

// Sets *out to the n floats at v, 4 little-endian bytes each. Bit patterns
// (NaN payloads, -0.0) are kept.
inline void EncodeFloats(const float* v, size_t n, std::string* out) {
  out->resize(n * sizeof(float));
  if (n == 0) return;
  if constexpr (kLittleEndianHost) {
    std::memcpy(&(*out)[0], v, n * sizeof(float));
  } else {
    for (size_t i = 0; i < n; ++i) {
      uint32_t bits;
      std::memcpy(&bits, v + i, sizeof(bits));
      EncodeFixed32(&(*out)[4 * i], bits);
    }
  }
}

// Appends the floats encoded in `in` by EncodeFloats to *out; a partial
// float at the end (in.size() % 4 bytes) is ignored, so callers check the
// size first.
inline void AppendFloats(const std::string& in, std::vector<float>* out) {
  const size_t n = in.size() / sizeof(float);
  const size_t old = out->size();
  out->resize(old + n);
  if (n == 0) return;
  if constexpr (kLittleEndianHost) {
    std::memcpy(out->data() + old, in.data(), n * sizeof(float));
  } else {
    for (size_t i = 0; i < n; ++i) {
      uint32_t bits = DecodeFixed32(in.data() + 4 * i);
      std::memcpy(out->data() + old + i, &bits, sizeof(bits));
    }
  }
}

}  // namespace ps

#endif  // PS_UTIL_CODING_H_
