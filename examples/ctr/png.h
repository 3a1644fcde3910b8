// A minimal PNG encoder: 8-bit RGB, no interlacing, the image data in a zlib
// stream of stored (uncompressed) deflate blocks. Plus the two checksums PNG
// needs, CRC-32 and Adler-32, which tests use to check a file's chunks.
//
// Pure functions; thread-safe.
#ifndef EXAMPLES_CTR_PNG_H_
#define EXAMPLES_CTR_PNG_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "ps/status.h"

namespace ctr {

// CRC-32 (ISO-HDLC, as in PNG and zlib's crc32) of data[0, size), continuing
// from `crc` (the CRC of the bytes before; 0 to start).
uint32_t Crc32(const uint8_t* data, size_t size, uint32_t crc = 0);

// Adler-32 (as in zlib) of data[0, size), continuing from `adler` (1 to
// start).
uint32_t Adler32(const uint8_t* data, size_t size, uint32_t adler = 1);

// The PNG file for a width x height image whose pixels are `rgb`: rows top to
// bottom, 3 bytes (red, green, blue) per pixel. CHECKs that width and height
// are positive, at most 2^24, and that rgb holds width * height * 3 bytes.
std::string EncodePng(int width, int height, const std::string& rgb);

// Writes `contents` to `path` atomically: into path + ".tmp", then renamed
// over `path`, so readers never see a partial file. Unavailable on failure.
[[nodiscard]] ps::Status WriteFileAtomically(const std::string& path,
                                             const std::string& contents);

}  // namespace ctr

#endif  // EXAMPLES_CTR_PNG_H_
