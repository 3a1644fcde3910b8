#include "ctr/png.h"

#include <glog/logging.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>

namespace ctr {
namespace {

// The reflected CRC-32 polynomial x^32 + x^26 + ... + 1.
constexpr uint32_t kCrcPolynomial = 0xedb88320u;

std::array<uint32_t, 256> MakeCrcTable() {
  std::array<uint32_t, 256> table{};
  for (uint32_t n = 0; n < 256; ++n) {
    uint32_t c = n;
    for (int k = 0; k < 8; ++k)
      c = (c & 1) ? kCrcPolynomial ^ (c >> 1) : c >> 1;
    table[n] = c;
  }
  return table;
}

void AppendBigEndian32(uint32_t v, std::string* out) {
  out->push_back(static_cast<char>(v >> 24));
  out->push_back(static_cast<char>(v >> 16));
  out->push_back(static_cast<char>(v >> 8));
  out->push_back(static_cast<char>(v));
}

// A chunk: length, type, data, CRC of type and data.
void AppendChunk(const char type[4], const std::string& data,
                 std::string* out) {
  AppendBigEndian32(static_cast<uint32_t>(data.size()), out);
  const size_t type_start = out->size();
  out->append(type, 4);
  out->append(data);
  AppendBigEndian32(
      Crc32(reinterpret_cast<const uint8_t*>(out->data()) + type_start,
            4 + data.size()),
      out);
}

}  // namespace

uint32_t Crc32(const uint8_t* data, size_t size, uint32_t crc) {
  static const std::array<uint32_t, 256> table = MakeCrcTable();
  uint32_t c = ~crc;
  for (size_t i = 0; i < size; ++i) c = table[(c ^ data[i]) & 0xff] ^ (c >> 8);
  return ~c;
}

uint32_t Adler32(const uint8_t* data, size_t size, uint32_t adler) {
  constexpr uint32_t kBase = 65521;  // the largest prime below 2^16.
  // 5552 bytes is the most that can be summed before a 32-bit b overflows.
  constexpr size_t kBlock = 5552;
  uint32_t a = adler & 0xffff;
  uint32_t b = adler >> 16;
  while (size > 0) {
    const size_t n = std::min(size, kBlock);
    for (size_t i = 0; i < n; ++i) {
      a += data[i];
      b += a;
    }
    a %= kBase;
    b %= kBase;
    data += n;
    size -= n;
  }
  return b << 16 | a;
}

std::string EncodePng(int width, int height, const std::string& rgb) {
  CHECK(width > 0 && height > 0 && width <= (1 << 24) && height <= (1 << 24))
      << width << "x" << height;
  const size_t row_bytes = static_cast<size_t>(width) * 3;
  CHECK_EQ(rgb.size(), row_bytes * static_cast<size_t>(height));

  // The filtered image: each row prefixed with filter type 0 (none).
  std::string raw;
  raw.reserve((row_bytes + 1) * static_cast<size_t>(height));
  for (int y = 0; y < height; ++y) {
    raw.push_back('\0');
    raw.append(rgb, static_cast<size_t>(y) * row_bytes, row_bytes);
  }

  // zlib: CMF 0x78 (deflate, 32K window) and FLG 0x01 (no dictionary,
  // fastest; 0x7801 is a multiple of 31 as the check requires), then stored
  // blocks of at most 65535 bytes, then the Adler-32 of the raw data.
  std::string zlib = {'\x78', '\x01'};
  constexpr size_t kMaxStored = 65535;
  size_t offset = 0;
  do {
    const size_t n = std::min(kMaxStored, raw.size() - offset);
    const bool final = offset + n == raw.size();
    // BFINAL in bit 0, BTYPE 00 (stored), then padding to the byte boundary.
    zlib.push_back(final ? '\x01' : '\x00');
    const uint16_t len = static_cast<uint16_t>(n);
    const uint16_t nlen = static_cast<uint16_t>(~len);
    zlib.push_back(static_cast<char>(len & 0xff));
    zlib.push_back(static_cast<char>(len >> 8));
    zlib.push_back(static_cast<char>(nlen & 0xff));
    zlib.push_back(static_cast<char>(nlen >> 8));
    zlib.append(raw, offset, n);
    offset += n;
  } while (offset < raw.size());
  AppendBigEndian32(
      Adler32(reinterpret_cast<const uint8_t*>(raw.data()), raw.size()), &zlib);

  std::string png = "\x89PNG\r\n\x1a\n";
  std::string header;
  AppendBigEndian32(static_cast<uint32_t>(width), &header);
  AppendBigEndian32(static_cast<uint32_t>(height), &header);
  // Bit depth 8, colour type 2 (RGB), deflate, adaptive filters, no
  // interlace.
  header.append({'\x08', '\x02', '\x00', '\x00', '\x00'});
  AppendChunk("IHDR", header, &png);
  AppendChunk("IDAT", zlib, &png);
  AppendChunk("IEND", std::string(), &png);
  return png;
}

ps::Status WriteFileAtomically(const std::string& path,
                               const std::string& contents) {
  const std::string temporary = path + ".tmp";
  std::FILE* file = std::fopen(temporary.c_str(), "wb");
  if (file == nullptr) {
    return ps::Status::Unavailable("cannot create " + temporary + ": " +
                                   std::strerror(errno));
  }
  const bool written =
      std::fwrite(contents.data(), 1, contents.size(), file) == contents.size();
  const int write_errno = errno;
  const bool closed = std::fclose(file) == 0;
  if (!written || !closed) {
    std::remove(temporary.c_str());
    return ps::Status::Unavailable(
        "cannot write " + temporary + ": " +
        std::strerror(written ? errno : write_errno));
  }
  if (std::rename(temporary.c_str(), path.c_str()) != 0) {
    const int rename_errno = errno;
    std::remove(temporary.c_str());
    return ps::Status::Unavailable("cannot rename " + temporary + " to " +
                                   path + ": " + std::strerror(rename_errno));
  }
  return ps::Status::OK();
}

}  // namespace ctr
