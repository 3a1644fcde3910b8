// Splits a fuzz input into frames: each frame is a 2-byte little-endian
// length and that many bytes (the last frame takes what is left), so the
// fuzzer controls the header and every data frame separately.
#ifndef PS_TESTS_FUZZ_FUZZ_FRAMES_H_
#define PS_TESTS_FUZZ_FUZZ_FRAMES_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "ps/sarray.h"

namespace ps {
namespace fuzz {

inline std::vector<SArray<char>> SplitFrames(const uint8_t* data, size_t size) {
  constexpr size_t kMaxFrames = 8;
  std::vector<SArray<char>> frames;
  size_t at = 0;
  while (at < size && frames.size() < kMaxFrames) {
    size_t len = size - at;
    if (len >= 2 && frames.size() + 1 < kMaxFrames) {
      size_t announced = data[at] | (size_t{data[at + 1]} << 8);
      at += 2;
      len = std::min(announced, size - at);
    }
    SArray<char> frame;
    frame.CopyFrom(reinterpret_cast<const char*>(data + at), len);
    frames.push_back(frame);
    at += len;
  }
  return frames;
}

}  // namespace fuzz
}  // namespace ps

#endif  // PS_TESTS_FUZZ_FUZZ_FRAMES_H_
