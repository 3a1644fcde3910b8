// CRC32C (the Castagnoli polynomial, reflected, as in iSCSI, ext4 and
// leveldb): the checksum of checkpoint files.
//
// Debian has no C or C++ CRC32C library (Google's crc32c is not packaged),
// so it is computed here: with the SSE4.2 crc32 instruction where the CPU has
// it (chosen once, at the first call), else with slicing-by-8 tables. Both
// give the same values; crc32c_internal exposes each for tests.
//
// Thread safety: pure functions.
#ifndef PS_UTIL_CRC32C_H_
#define PS_UTIL_CRC32C_H_

#include <cstddef>
#include <cstdint>

namespace ps {

// Extends the CRC32C `crc` of some bytes with the `n` bytes at `data`;
// start with 0. Crc32c(0, "123456789", 9) == 0xE3069283, and
// Crc32c(Crc32c(0, a, n), b, m) is the CRC of a followed by b.
uint32_t Crc32c(uint32_t crc, const void* data, size_t n);

namespace crc32c_internal {

// The table implementation, on any CPU.
uint32_t Software(uint32_t crc, const void* data, size_t n);
// Whether this CPU has the crc32 instruction (x86-64 with SSE4.2).
bool HardwareAvailable();
// The instruction's implementation; only when HardwareAvailable().
uint32_t Hardware(uint32_t crc, const void* data, size_t n);

}  // namespace crc32c_internal
}  // namespace ps

#endif  // PS_UTIL_CRC32C_H_
