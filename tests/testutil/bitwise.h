// Bitwise comparison of float results: what the tests that promise a run
// "bitwise equal to the undisturbed one" check with.
#ifndef PS_TESTUTIL_BITWISE_H_
#define PS_TESTUTIL_BITWISE_H_

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

namespace ps {

// Expects `got` to hold exactly the bits of `want` (so 0.0 and -0.0
// differ, and a NaN equals the same NaN); `what` names them in the
// failure, with how many differ and the first that does.
inline void ExpectBitwiseEqual(const std::vector<float>& got,
                               const std::vector<float>& want,
                               const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  size_t wrong = 0;
  size_t first = got.size();
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::memcmp(&got[i], &want[i], sizeof(float)) != 0) {
      ++wrong;
      if (first == got.size()) first = i;
    }
  }
  EXPECT_EQ(wrong, 0u) << what << ": " << wrong << " of " << got.size()
                       << " values differ from the undisturbed run's, e.g. "
                       << "value " << first << ": " << (wrong ? got[first] : 0)
                       << " instead of " << (wrong ? want[first] : 0);
}

}  // namespace ps

#endif  // PS_TESTUTIL_BITWISE_H_
