#include "util/secret.h"

#include <gtest/gtest.h>

#include <set>

namespace ps {
namespace {

TEST(SecretTest, KeysHaveTheAskedSizeAndDoNotRepeat) {
  std::set<std::string> seen;
  for (int i = 0; i < 100; ++i) {
    StatusOr<std::string> key = NewSecret();
    ASSERT_TRUE(key.ok()) << key.status();
    EXPECT_EQ(key.value().size(), kSecretBytes);
    EXPECT_TRUE(seen.insert(key.value()).second) << "a key came twice";
  }
  StatusOr<std::string> big = NewSecret(1000);
  ASSERT_TRUE(big.ok()) << big.status();
  EXPECT_EQ(big.value().size(), 1000u);
}

TEST(SecretTest, EqualOnlyForTheSameNonEmptyBytes) {
  const std::string key("0123456789abcdef");
  EXPECT_TRUE(SecretsEqual(key, std::string("0123456789abcdef")));
  EXPECT_FALSE(SecretsEqual(key, "0123456789abcdeF"));  // Last byte.
  EXPECT_FALSE(SecretsEqual(key, "x123456789abcdef"));  // First byte.
  EXPECT_FALSE(SecretsEqual(key, "0123456789abcde"));   // Shorter.
  EXPECT_FALSE(SecretsEqual(key, key + "0"));           // Longer.
  EXPECT_FALSE(SecretsEqual(key, ""));
  EXPECT_FALSE(SecretsEqual("", ""));  // An empty key proves nothing.
  EXPECT_TRUE(SecretsEqual(std::string("\0\0", 2), std::string("\0\0", 2)));
}

}  // namespace
}  // namespace ps
