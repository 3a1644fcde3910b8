#include "util/crc32c.h"

#include <glog/logging.h>

#include <cstring>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace ps {
namespace crc32c_internal {
namespace {

// The reflected Castagnoli polynomial.
constexpr uint32_t kPolynomial = 0x82F63B78u;

struct Tables {
  uint32_t t[8][256];
};

const Tables& SliceTables() {
  static const Tables tables = [] {
    Tables tb;
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (kPolynomial & (0u - (c & 1)));
      tb.t[0][i] = c;
    }
    // t[k][i] is the CRC of byte i followed by k zero bytes, which lets the
    // loop below fold eight bytes per step.
    for (uint32_t i = 0; i < 256; ++i) {
      for (int k = 1; k < 8; ++k) {
        uint32_t prev = tb.t[k - 1][i];
        tb.t[k][i] = (prev >> 8) ^ tb.t[0][prev & 0xff];
      }
    }
    return tb;
  }();
  return tables;
}

uint32_t LoadLe32(const unsigned char* p) {
  return static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 |
         static_cast<uint32_t>(p[2]) << 16 | static_cast<uint32_t>(p[3]) << 24;
}

}  // namespace

uint32_t Software(uint32_t crc, const void* data, size_t n) {
  const auto& t = SliceTables().t;
  const auto* p = static_cast<const unsigned char*>(data);
  uint32_t c = ~crc;
  while (n >= 8) {
    const uint32_t lo = LoadLe32(p) ^ c;
    const uint32_t hi = LoadLe32(p + 4);
    c = t[7][lo & 0xff] ^ t[6][(lo >> 8) & 0xff] ^ t[5][(lo >> 16) & 0xff] ^
        t[4][lo >> 24] ^ t[3][hi & 0xff] ^ t[2][(hi >> 8) & 0xff] ^
        t[1][(hi >> 16) & 0xff] ^ t[0][hi >> 24];
    p += 8;
    n -= 8;
  }
  while (n-- > 0) c = t[0][(c ^ *p++) & 0xff] ^ (c >> 8);
  return ~c;
}

#if defined(__x86_64__)

bool HardwareAvailable() { return __builtin_cpu_supports("sse4.2"); }

// Compiled for SSE4.2 whatever the build's target; called only when the CPU
// has it.
__attribute__((target("sse4.2"))) uint32_t Hardware(uint32_t crc,
                                                    const void* data,
                                                    size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint64_t c = ~crc;
  while (n >= 8) {
    uint64_t word;
    std::memcpy(&word, p, sizeof(word));  // x86 is little-endian
    c = _mm_crc32_u64(c, word);
    p += 8;
    n -= 8;
  }
  uint32_t c32 = static_cast<uint32_t>(c);
  while (n-- > 0) c32 = _mm_crc32_u8(c32, *p++);
  return ~c32;
}

#else

bool HardwareAvailable() { return false; }

uint32_t Hardware(uint32_t crc, const void* data, size_t n) {
  LOG(FATAL) << "no crc32 instruction on this CPU";  // a bug: see the header
  return Software(crc, data, n);
}

#endif

}  // namespace crc32c_internal

uint32_t Crc32c(uint32_t crc, const void* data, size_t n) {
  using Function = uint32_t (*)(uint32_t, const void*, size_t);
  static const Function function = crc32c_internal::HardwareAvailable()
                                       ? &crc32c_internal::Hardware
                                       : &crc32c_internal::Software;
  return function(crc, data, n);
}

}  // namespace ps
