// Claims on network locks (engine/net/claim.h): a claimed table is never removed, an unclaimed
// one is, whoever claimed it before (a process that died lets go with it), and a claim made
// while a remover works waits for it and then holds.
#include "engine/net/claim.h"

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "testing/temp_dir.h"

namespace cairn::net {
namespace {

class ClaimTest : public ::testing::Test {
 protected:
  std::string Dir() const { return tmp_.path() + "/claims"; }
  bool FileThere(const std::string& table) const { return std::filesystem::exists(Dir() + "/" + table); }
  // Runs RemoveUnclaimed with a remover that counts its calls.
  absl::StatusOr<std::string> Remove(const std::string& table) {
    return RemoveUnclaimed(table, [&] { ++removes_; return absl::OkStatus(); }, Dir());
  }
  testing::TempDir tmp_;
  int removes_ = 0;
};

TEST_F(ClaimTest, AClaimedTableIsLeftAndItsClaimerNamed) {
  absl::StatusOr<LockClaim> claim = LockClaim::Take("cairn_lock_1a", Dir());
  // (A checkpoint id names a job, with dots and dashes.)
  ASSERT_TRUE(LockClaim::Take("cairn_lock_srv.1-20261207T044840201-from-node-a", Dir()).ok());
  ASSERT_TRUE(claim.ok()) << claim.status();
  EXPECT_TRUE(claim->held());
  EXPECT_EQ(claim->table(), "cairn_lock_1a");
  struct stat st {};
  ASSERT_EQ(::stat(Dir().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  absl::StatusOr<std::string> who = Remove("cairn_lock_1a");
  ASSERT_TRUE(who.ok()) << who.status();
  EXPECT_NE(who->find(absl::StrCat("pid ", ::getpid(), " (")), std::string::npos) << *who;
  EXPECT_EQ(removes_, 0);
}

TEST_F(ClaimTest, AReleasedTableIsRemovedWithItsFile) {
  absl::StatusOr<LockClaim> claim = LockClaim::Take("cairn_lock_2b", Dir());
  ASSERT_TRUE(claim.ok()) << claim.status();
  ASSERT_TRUE(FileThere("cairn_lock_2b"));
  claim->Release();
  EXPECT_FALSE(claim->held());
  EXPECT_FALSE(FileThere("cairn_lock_2b")) << "the last claim removes its file";
  absl::StatusOr<std::string> who = Remove("cairn_lock_2b");
  ASSERT_TRUE(who.ok()) << who.status();
  EXPECT_EQ(*who, "");
  EXPECT_EQ(removes_, 1);
  EXPECT_FALSE(FileThere("cairn_lock_2b"));
}

TEST_F(ClaimTest, CopiesShareOneClaimUntilTheLastGoes) {
  absl::StatusOr<LockClaim> claim = LockClaim::Take("cairn_lock_3c", Dir());
  ASSERT_TRUE(claim.ok()) << claim.status();
  LockClaim copy = *claim;
  claim->Release();
  ASSERT_TRUE(Remove("cairn_lock_3c").ok());
  EXPECT_EQ(removes_, 0) << "a copy still claims it";
  // A second, separate claim of the same process, then the copy goes: still claimed.
  absl::StatusOr<LockClaim> second = LockClaim::Take("cairn_lock_3c", Dir());
  ASSERT_TRUE(second.ok()) << second.status();
  copy.Release();
  ASSERT_TRUE(Remove("cairn_lock_3c").ok());
  EXPECT_EQ(removes_, 0) << "the second claim still holds";
  second->Release();
  ASSERT_TRUE(Remove("cairn_lock_3c").ok());
  EXPECT_EQ(removes_, 1);
}

TEST_F(ClaimTest, AClaimDiesWithItsProcess) {
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    absl::StatusOr<LockClaim> claim = LockClaim::Take("cairn_lock_4d", Dir());
    char c = claim.ok() ? 'y' : 'n';
    (void)!::write(ready[1], &c, 1);
    ::pause();
    ::_exit(0);
  }
  ::close(ready[1]);
  char c = 0;
  ASSERT_EQ(::read(ready[0], &c, 1), 1);
  ::close(ready[0]);
  ASSERT_EQ(c, 'y');
  absl::StatusOr<std::string> who = Remove("cairn_lock_4d");
  ASSERT_TRUE(who.ok()) << who.status();
  EXPECT_NE(who->find(absl::StrCat("pid ", child, " (")), std::string::npos) << *who;
  EXPECT_EQ(removes_, 0);
  ::kill(child, SIGKILL);
  ASSERT_EQ(::waitpid(child, nullptr, 0), child);
  who = Remove("cairn_lock_4d");
  ASSERT_TRUE(who.ok()) << who.status();
  EXPECT_EQ(*who, "") << "a dead claimer's claim is gone";
  EXPECT_EQ(removes_, 1);
}

TEST_F(ClaimTest, AClaimMadeWhileTheTableIsRemovedWaitsThenHolds) {
  std::atomic<bool> claimed{false};
  std::thread claimer;
  absl::StatusOr<LockClaim> late = absl::UnknownError("not yet");
  absl::StatusOr<std::string> who = RemoveUnclaimed(
      "cairn_lock_5e",
      [&] {
        claimer = std::thread([&] {
          late = LockClaim::Take("cairn_lock_5e", Dir());
          claimed = true;
        });
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        EXPECT_FALSE(claimed) << "a claim waits while the table is being removed";
        return absl::OkStatus();
      },
      Dir());
  claimer.join();
  ASSERT_TRUE(who.ok()) << who.status();
  EXPECT_EQ(*who, "");
  ASSERT_TRUE(late.ok()) << late.status();
  EXPECT_TRUE(FileThere("cairn_lock_5e")) << "the late claim made its file again";
  int removes = 0;
  who = RemoveUnclaimed("cairn_lock_5e", [&] { ++removes; return absl::OkStatus(); }, Dir());
  ASSERT_TRUE(who.ok()) << who.status();
  EXPECT_NE(*who, "") << "the late claim holds";
  EXPECT_EQ(removes, 0);
}

TEST_F(ClaimTest, AClaimWaitsForAStuckRemoverOnlySoLong) {
  absl::StatusOr<LockClaim> late = absl::UnknownError("not yet");
  absl::StatusOr<std::string> who = RemoveUnclaimed(
      "cairn_lock_5f",
      [&] {
        late = LockClaim::Take("cairn_lock_5f", Dir(), absl::Milliseconds(100));
        return absl::OkStatus();
      },
      Dir());
  ASSERT_TRUE(who.ok()) << who.status();
  EXPECT_EQ(late.status().code(), absl::StatusCode::kUnavailable) << late.status();
  EXPECT_NE(late.status().message().find(absl::StrCat("held by pid ", ::getpid())), absl::string_view::npos)
      << late.status();
}

TEST_F(ClaimTest, ARemoverErrorIsReturnedAndNothingClaimedIsLeftBehind) {
  absl::StatusOr<std::string> who =
      RemoveUnclaimed("cairn_lock_6f", [] { return absl::UnavailableError("nft failed"); }, Dir());
  EXPECT_EQ(who.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_FALSE(FileThere("cairn_lock_6f"));
}

TEST_F(ClaimTest, NamesThatCouldLeaveTheDirectoryAreRefused) {
  for (const char* bad : {"../etc", "a/b", "", "..", ".hidden", "a b"}) {
    absl::StatusOr<LockClaim> claim = LockClaim::Take(bad, Dir());
    EXPECT_EQ(claim.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_EQ(Remove(bad).status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_EQ(removes_, 0);
}

TEST_F(ClaimTest, ADirectoryOthersCanOpenIsRefused) {
  ASSERT_EQ(::mkdir(Dir().c_str(), 0755), 0);
  absl::StatusOr<LockClaim> claim = LockClaim::Take("cairn_lock_7a", Dir());
  EXPECT_EQ(claim.status().code(), absl::StatusCode::kFailedPrecondition) << claim.status();
  EXPECT_NE(claim.status().message().find("mode 0700"), absl::string_view::npos) << claim.status();
}

}  // namespace
}  // namespace cairn::net
