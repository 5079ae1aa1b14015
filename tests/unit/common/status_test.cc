#include "common/status.h"

#include <cerrno>
#include <cstring>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cairn {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

TEST(ErrnoStatusTest, EnoentIsNotFoundAndNamesTheCall) {
  absl::Status s = ErrnoStatus("open /proc/12/maps", ENOENT);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(s.message()), StartsWith("open /proc/12/maps: "));
  EXPECT_THAT(std::string(s.message()), HasSubstr(std::strerror(ENOENT)));
}

TEST(ErrnoStatusTest, EpermIsPermissionDenied) {
  absl::Status s = ErrnoStatus("ptrace(SEIZE) tid 7", EPERM);
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(s.message(), std::string("ptrace(SEIZE) tid 7: ") + std::strerror(EPERM));
}

TEST(ErrnoStatusTest, DefaultsToCurrentErrno) {
  errno = EACCES;
  absl::Status s = ErrnoStatus("open /root/x");
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(std::string(s.message()), HasSubstr(std::strerror(EACCES)));
}

TEST(ErrnoStatusTest, IsNeverOk) {
  // Even a bogus errno must not turn a failure into success.
  EXPECT_FALSE(ErrnoStatus("x", 0).ok());
  EXPECT_FALSE(ErrnoStatus("x", 4095).ok());
}

TEST(ErrnoToCodeTest, MapsCommonErrnos) {
  EXPECT_EQ(ErrnoToCode(ENOENT), absl::StatusCode::kNotFound);
  EXPECT_EQ(ErrnoToCode(ESRCH), absl::StatusCode::kNotFound);
  EXPECT_EQ(ErrnoToCode(EPERM), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(ErrnoToCode(EACCES), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(ErrnoToCode(EEXIST), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(ErrnoToCode(EBADF), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ErrnoToCode(ENOSPC), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(ErrnoToCode(ENOSYS), absl::StatusCode::kUnimplemented);
  EXPECT_EQ(ErrnoToCode(EINTR), absl::StatusCode::kUnavailable);
  EXPECT_EQ(ErrnoToCode(EXDEV), absl::StatusCode::kInternal);
}

TEST(AnnotateTest, PrefixesMessageAndKeepsCode) {
  absl::Status s = Annotate(absl::NotFoundError("gone"), "dump pid 5");
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(s.message(), "dump pid 5: gone");
}

TEST(AnnotateTest, OkPassesThrough) {
  EXPECT_TRUE(Annotate(absl::OkStatus(), "context").ok());
}

absl::Status FailIf(bool fail) {
  if (fail) return absl::DataLossError("boom");
  return absl::OkStatus();
}

absl::StatusOr<int> Half(int n) {
  if (n % 2 != 0) return absl::InvalidArgumentError("odd");
  return n / 2;
}

absl::Status Chain(bool fail, int* reached) {
  RETURN_IF_ERROR(FailIf(fail));
  *reached = 1;
  return absl::OkStatus();
}

absl::StatusOr<int> Quarter(int n) {
  ASSIGN_OR_RETURN(int h, Half(n));
  ASSIGN_OR_RETURN(int q, Half(h));
  return q;
}

TEST(StatusMacrosTest, ReturnIfErrorStopsOnFailure) {
  int reached = 0;
  EXPECT_EQ(Chain(true, &reached).code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(reached, 0);
  EXPECT_TRUE(Chain(false, &reached).ok());
  EXPECT_EQ(reached, 1);
}

TEST(StatusMacrosTest, AssignOrReturnUnwrapsOrPropagates) {
  absl::StatusOr<int> ok = Quarter(12);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(*ok, 3);
  EXPECT_EQ(Quarter(6).status().code(), absl::StatusCode::kInvalidArgument);  // 6 -> 3 -> odd
  EXPECT_EQ(Quarter(5).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace cairn
