#include "node/consistency_config.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include "node/options.h"

namespace ps {
namespace {

TEST(ConsistencyConfigTest, ParsesTheThreeModes) {
  auto asp = ConsistencyConfig::Parse("asp");
  ASSERT_TRUE(asp.ok());
  EXPECT_EQ(asp->mode, ConsistencyConfig::Mode::kAsp);
  EXPECT_EQ(asp->staleness, ConsistencyConfig::kUnbounded);
  auto bsp = ConsistencyConfig::Parse("bsp");
  ASSERT_TRUE(bsp.ok());
  EXPECT_EQ(bsp->mode, ConsistencyConfig::Mode::kBsp);
  EXPECT_EQ(bsp->staleness, 0);
  auto ssp = ConsistencyConfig::Parse("ssp:3");
  ASSERT_TRUE(ssp.ok());
  EXPECT_EQ(ssp->mode, ConsistencyConfig::Mode::kSsp);
  EXPECT_EQ(ssp->staleness, 3);
  EXPECT_EQ(ssp->ToString(), "ssp:3");
  auto paren = ConsistencyConfig::Parse("ssp(0)");
  ASSERT_TRUE(paren.ok());
  EXPECT_EQ(paren->staleness, 0);
}

TEST(ConsistencyConfigTest, RefusesBadSpecsWithAReason) {
  struct Case {
    const char* spec;
    const char* says;
  } cases[] = {
      {"", "expected asp, ssp or bsp"}, {"BSP", "expected asp, ssp or bsp"},
      {"ssp", "needs a staleness"},     {"ssp:", "not an integer"},
      {"ssp:x", "not an integer"},      {"ssp:2x", "not an integer"},
      {"ssp:-1", "out of range"},       {"ssp:99999999999", "out of range"},
      {"bsp:1", "applies only to ssp"}, {"asp:0", "applies only to ssp"},
      {"ssp(2", "missing ')'"},
  };
  for (const Case& c : cases) {
    auto r = ConsistencyConfig::Parse(c.spec);
    ASSERT_FALSE(r.ok()) << c.spec;
    EXPECT_EQ(r.status().code(), Status::Code::kInvalidArgument);
    EXPECT_NE(r.status().message().find(c.says), std::string::npos)
        << c.spec << ": " << r.status();
  }
}

class ConsistencyEnvTest : public ::testing::Test {
 protected:
  void SetUp() override {
    setenv("DMLC_ROLE", "server", 1);
    setenv("DMLC_PS_ROOT_URI", "127.0.0.1", 1);
    setenv("DMLC_PS_ROOT_PORT", "9000", 1);
    setenv("DMLC_NUM_SERVER", "1", 1);
    setenv("DMLC_NUM_WORKER", "1", 1);
    unsetenv("EMBER_CONSISTENCY");
    unsetenv("EMBER_STALENESS");
  }
  void TearDown() override {
    unsetenv("EMBER_CONSISTENCY");
    unsetenv("EMBER_STALENESS");
  }
};

TEST_F(ConsistencyEnvTest, DefaultIsAsp) {
  auto o = Options::FromEnvironment();
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->consistency.mode, ConsistencyConfig::Mode::kAsp);
}

TEST_F(ConsistencyEnvTest, ReadsModeAndStaleness) {
  setenv("EMBER_CONSISTENCY", "ssp", 1);
  setenv("EMBER_STALENESS", "2", 1);
  auto o = Options::FromEnvironment();
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->consistency.ToString(), "ssp:2");
  setenv("EMBER_CONSISTENCY", "ssp:4", 1);
  unsetenv("EMBER_STALENESS");
  o = Options::FromEnvironment();
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->consistency.ToString(), "ssp:4");
  setenv("EMBER_CONSISTENCY", "bsp", 1);
  o = Options::FromEnvironment();
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->consistency.mode, ConsistencyConfig::Mode::kBsp);
}

TEST_F(ConsistencyEnvTest, BadValuesNameTheVariable) {
  setenv("EMBER_CONSISTENCY", "strict", 1);
  auto o = Options::FromEnvironment();
  ASSERT_FALSE(o.ok());
  EXPECT_NE(o.status().message().find("EMBER_CONSISTENCY=strict"),
            std::string::npos)
      << o.status();
  setenv("EMBER_CONSISTENCY", "ssp", 1);
  o = Options::FromEnvironment();
  ASSERT_FALSE(o.ok());
  EXPECT_NE(o.status().message().find("needs a staleness"), std::string::npos);
  setenv("EMBER_STALENESS", "-3", 1);
  o = Options::FromEnvironment();
  ASSERT_FALSE(o.ok());
  EXPECT_NE(o.status().message().find("EMBER_STALENESS=-3"), std::string::npos)
      << o.status();
  setenv("EMBER_CONSISTENCY", "asp", 1);
  setenv("EMBER_STALENESS", "1", 1);
  o = Options::FromEnvironment();
  ASSERT_FALSE(o.ok());
  EXPECT_NE(o.status().message().find("applies only to ssp"),
            std::string::npos);
}

}  // namespace
}  // namespace ps
