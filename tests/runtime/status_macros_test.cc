#include "runtime/status_macros.h"

#include <memory>
#include <string>

#include "gtest/gtest.h"

namespace rp {
namespace {

absl::Status FailIf(bool fail) {
  return fail ? absl::InvalidArgumentError("bad field") : absl::OkStatus();
}
absl::StatusOr<std::unique_ptr<int>> MakeInt(bool fail) {
  if (fail) return absl::NotFoundError("no int");
  return std::make_unique<int>(7);
}

absl::Status UsesReturnIfError(bool fail, int* calls) {
  RP_RETURN_IF_ERROR(((*calls)++, FailIf(fail)));
  return absl::OkStatus();
}
absl::StatusOr<int> UsesAssignOrReturn(bool fail) {
  RP_ASSIGN_OR_RETURN(std::unique_ptr<int> v, MakeInt(fail));  // move-only value
  int out = 0;
  RP_ASSIGN_OR_RETURN(out, absl::StatusOr<int>(*v + 1));  // assignment to an existing lvalue
  return out;
}
absl::Status UsesCheck(int x) {
  RP_CHECK(x > 0) << "x=" << x;
  return absl::OkStatus();
}
absl::StatusOr<int> UsesCheckInStatusOr(int x) {
  RP_CHECK(x != 3);
  return x;
}

TEST(StatusMacros, ReturnIfErrorPropagatesAndEvaluatesOnce) {
  int calls = 0;
  EXPECT_TRUE(UsesReturnIfError(false, &calls).ok());
  const absl::Status s = UsesReturnIfError(true, &calls);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "bad field");
  EXPECT_EQ(calls, 2);
}

TEST(StatusMacros, AssignOrReturnMovesValueOrReturnsStatus) {
  EXPECT_EQ(UsesAssignOrReturn(false).value(), 8);
  EXPECT_EQ(UsesAssignOrReturn(true).status().code(), absl::StatusCode::kNotFound);
}

TEST(StatusMacros, CheckReturnsInternalErrorNamingTheCondition) {
  EXPECT_TRUE(UsesCheck(1).ok());
  const absl::Status s = UsesCheck(-2);
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_NE(s.message().find("x > 0"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("x=-2"), std::string::npos) << s.message();
  EXPECT_EQ(UsesCheckInStatusOr(3).status().code(), absl::StatusCode::kInternal);
  EXPECT_EQ(UsesCheckInStatusOr(4).value(), 4);
}

}  // namespace
}  // namespace rp
