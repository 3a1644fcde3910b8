#include "ps/status.h"

#include <gtest/gtest.h>

#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace ps {
namespace {

using Code = Status::Code;

TEST(StatusTest, DefaultIsOkWithEmptyMessage) {
  Status s;
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.code(), Code::kOk);
  EXPECT_EQ(s.message(), "");
  EXPECT_EQ(s.ToString(), "OK");
  EXPECT_TRUE(Status::OK().ok());
}

TEST(StatusTest, FactoriesSetCodeAndMessage) {
  struct Case {
    Status status;
    Code code;
    const char* name;
  };
  const std::vector<Case> cases = {
      {Status::InvalidArgument("m"), Code::kInvalidArgument, "InvalidArgument"},
      {Status::NotFound("m"), Code::kNotFound, "NotFound"},
      {Status::Unavailable("m"), Code::kUnavailable, "Unavailable"},
      {Status::DeadlineExceeded("m"), Code::kDeadlineExceeded,
       "DeadlineExceeded"},
      {Status::Aborted("m"), Code::kAborted, "Aborted"},
      {Status::Corruption("m"), Code::kCorruption, "Corruption"},
      {Status::Internal("m"), Code::kInternal, "Internal"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    EXPECT_FALSE(c.status.ok());
    EXPECT_EQ(c.status.code(), c.code);
    EXPECT_EQ(c.status.message(), "m");
    EXPECT_EQ(c.status.ToString(), std::string(c.name) + ": m");
    EXPECT_STREQ(Status::CodeName(c.code), c.name);
  }
}

TEST(StatusTest, CodesHaveStableWireValues) {
  // The numeric codes travel in message headers (Meta::status_code).
  EXPECT_EQ(static_cast<int>(Code::kOk), 0);
  EXPECT_EQ(static_cast<int>(Code::kInvalidArgument), 1);
  EXPECT_EQ(static_cast<int>(Code::kNotFound), 2);
  EXPECT_EQ(static_cast<int>(Code::kUnavailable), 3);
  EXPECT_EQ(static_cast<int>(Code::kDeadlineExceeded), 4);
  EXPECT_EQ(static_cast<int>(Code::kAborted), 5);
  EXPECT_EQ(static_cast<int>(Code::kCorruption), 6);
  EXPECT_EQ(static_cast<int>(Code::kInternal), 7);
}

TEST(StatusTest, CodeNameOfOkAndOfOutOfRangeCode) {
  EXPECT_STREQ(Status::CodeName(Code::kOk), "OK");
  EXPECT_STREQ(Status::CodeName(static_cast<Code>(42)), "Unknown");
}

TEST(StatusTest, ToStringOfOkIgnoresMessage) {
  Status s(Code::kOk, "ignored");
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.ToString(), "OK");
}

TEST(StatusTest, ConstructorTakesCodeAndMessage) {
  Status s(Code::kUnavailable, "server 9 died");
  EXPECT_EQ(s.code(), Code::kUnavailable);
  EXPECT_EQ(s.ToString(), "Unavailable: server 9 died");
}

TEST(StatusTest, StreamsAsToString) {
  std::ostringstream os;
  os << Status::Aborted("cluster gone") << " | " << Status::OK();
  EXPECT_EQ(os.str(), "Aborted: cluster gone | OK");
}

TEST(StatusTest, CopiesAreIndependentValues) {
  Status a = Status::Corruption("bad bytes");
  Status b = a;
  a = Status::OK();
  EXPECT_TRUE(a.ok());
  EXPECT_EQ(b.code(), Code::kCorruption);
  EXPECT_EQ(b.message(), "bad bytes");
}

TEST(StatusOrTest, HoldsValue) {
  StatusOr<int> v(7);
  ASSERT_TRUE(v.ok());
  EXPECT_TRUE(v.status().ok());
  EXPECT_EQ(v.value(), 7);
}

TEST(StatusOrTest, HoldsError) {
  StatusOr<int> v(Status::NotFound("no such key"));
  EXPECT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), Code::kNotFound);
  EXPECT_EQ(v.status().message(), "no such key");
}

TEST(StatusOrTest, ValueIsMutableThroughLvalue) {
  StatusOr<std::string> v(std::string("abc"));
  v.value() += "def";
  EXPECT_EQ(v.value(), "abcdef");
}

TEST(StatusOrTest, RvalueValueMovesOut) {
  StatusOr<std::unique_ptr<int>> v(std::make_unique<int>(5));
  std::unique_ptr<int> p = std::move(v).value();
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(*p, 5);
}

StatusOr<int> Half(int x) {
  if (x % 2 != 0) return Status::InvalidArgument("odd");
  return x / 2;
}

TEST(StatusOrTest, ConvertsImplicitlyFromReturnStatements) {
  EXPECT_EQ(Half(8).value(), 4);
  EXPECT_EQ(Half(3).status().code(), Code::kInvalidArgument);
}

TEST(StatusOrDeathTest, BuildingFromOkStatusDies) {
  EXPECT_DEATH({ StatusOr<int> v(Status::OK()); }, "without value");
}

TEST(StatusOrDeathTest, ValueOfErrorDies) {
  StatusOr<int> v(Status::Internal("boom"));
  EXPECT_DEATH({ (void)v.value(); }, "Internal: boom");
}

int g_calls = 0;

Status Step(Status result) {
  ++g_calls;
  return result;
}

Status TwoSteps(Status first, Status second) {
  PS_RETURN_IF_ERROR(Step(first));
  PS_RETURN_IF_ERROR(Step(second));
  return Status::Internal("reached the end");
}

TEST(ReturnIfErrorTest, ContinuesOnOk) {
  g_calls = 0;
  Status s = TwoSteps(Status::OK(), Status::OK());
  EXPECT_EQ(g_calls, 2);
  EXPECT_EQ(s.code(), Code::kInternal);
  EXPECT_EQ(s.message(), "reached the end");
}

TEST(ReturnIfErrorTest, ReturnsFirstErrorAndSkipsTheRest) {
  g_calls = 0;
  Status s = TwoSteps(Status::Unavailable("peer"), Status::OK());
  EXPECT_EQ(g_calls, 1);
  EXPECT_EQ(s.code(), Code::kUnavailable);
  EXPECT_EQ(s.message(), "peer");
}

TEST(ReturnIfErrorTest, ReturnsLaterError) {
  g_calls = 0;
  Status s = TwoSteps(Status::OK(), Status::Corruption("frame"));
  EXPECT_EQ(g_calls, 2);
  EXPECT_EQ(s.code(), Code::kCorruption);
}

TEST(ReturnIfErrorTest, EvaluatesExpressionOnce) {
  g_calls = 0;
  auto f = []() -> Status {
    PS_RETURN_IF_ERROR(Step(Status::OK()));
    return Status::OK();
  };
  EXPECT_TRUE(f().ok());
  EXPECT_EQ(g_calls, 1);
}

TEST(ReturnIfErrorTest, WorksAsSingleStatementInIfElse) {
  // The do/while(0) wrapper keeps the macro one statement.
  auto f = [](bool check) -> Status {
    if (check)
      PS_RETURN_IF_ERROR(Status::Aborted("checked"));
    else
      return Status::NotFound("unchecked");
    return Status::OK();
  };
  EXPECT_EQ(f(true).code(), Code::kAborted);
  EXPECT_EQ(f(false).code(), Code::kNotFound);
}

TEST(ReturnIfErrorTest, WorksInStatusOrFunctions) {
  auto f = [](Status s) -> StatusOr<int> {
    PS_RETURN_IF_ERROR(s);
    return 1;
  };
  EXPECT_EQ(f(Status::OK()).value(), 1);
  EXPECT_EQ(f(Status::Aborted("x")).status().code(), Code::kAborted);
}

}  // namespace
}  // namespace ps
