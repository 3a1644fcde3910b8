#include "util/secret.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
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

// The run's key kept for a restarted scheduler: mode 0600, read back as
// written; a file others may read, or that holds no key, is refused.
TEST(SecretTest, KeyFilesRoundTripAndMustBePrivate) {
  char dir[] = "/tmp/ember-secret-test.XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string path = std::string(dir) + "/run.key";
  StatusOr<std::string> key = NewSecret();
  ASSERT_TRUE(key.ok());
  ASSERT_TRUE(WriteSecretFile(path, key.value()).ok());
  struct stat st;
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  StatusOr<std::string> read = ReadSecretFile(path);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read.value(), key.value());

  ASSERT_EQ(chmod(path.c_str(), 0640), 0);
  read = ReadSecretFile(path);
  EXPECT_EQ(read.status().code(), Status::Code::kInvalidArgument);
  EXPECT_NE(read.status().message().find("0600"), std::string::npos);
  ASSERT_EQ(chmod(path.c_str(), 0600), 0);
  for (const std::string& bad :
       {std::string("abc\n"), std::string(32, 'g'), std::string(34, 'a')}) {
    std::ofstream(path, std::ios::trunc) << bad;
    read = ReadSecretFile(path);
    EXPECT_EQ(read.status().code(), Status::Code::kInvalidArgument) << bad;
  }
  std::remove(path.c_str());
  read = ReadSecretFile(path);
  EXPECT_EQ(read.status().code(), Status::Code::kNotFound);
  EXPECT_NE(read.status().message().find(path), std::string::npos);
  rmdir(dir);
}

}  // namespace
}  // namespace ps
