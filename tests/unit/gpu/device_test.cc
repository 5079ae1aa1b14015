// The device side of a dump (engine/gpu/device.h) against a fake of the driver's checkpoint API
// that keeps each process's state as the driver documents it (RUNNING -> LOCKED ->
// CHECKPOINTED -> LOCKED -> RUNNING, anything else refused) and fails the calls a test names:
// every path out leaves every process RUNNING, or says which one it could not put back.
#include "engine/gpu/device.h"

#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/gpu/cuda_checkpoint.h"
#include "gtest/gtest.h"

namespace cairn::gpu {
namespace {

class FakeDriver : public CudaCheckpointApi {
 public:
  explicit FakeDriver(std::vector<pid_t> pids) {
    for (pid_t p : pids) state[p] = CudaState::kRunning;
  }
  absl::Status Lock(pid_t pid, unsigned timeout_ms) override {
    last_timeout = timeout_ms;
    return Step("lock", pid, CudaState::kRunning, CudaState::kLocked);
  }
  absl::Status Checkpoint(pid_t pid) override {
    return Step("checkpoint", pid, CudaState::kLocked, CudaState::kCheckpointed);
  }
  absl::Status Restore(pid_t pid, const std::vector<GpuPair>&) override {
    return Step("restore", pid, CudaState::kCheckpointed, CudaState::kLocked);
  }
  absl::Status Unlock(pid_t pid) override { return Step("unlock", pid, CudaState::kLocked, CudaState::kRunning); }
  absl::StatusOr<CudaState> State(pid_t pid) override { return state.at(pid); }
  absl::StatusOr<pid_t> RestoreThread(pid_t pid) override { return pid + 1; }

  std::map<pid_t, CudaState> state;
  std::set<std::pair<std::string, pid_t>> fail;  // calls that fail (the state stays)
  std::vector<std::string> calls;
  unsigned last_timeout = 0;

 private:
  absl::Status Step(const std::string& call, pid_t pid, CudaState from, CudaState to) {
    calls.push_back(absl::StrCat(call, " ", pid));
    if (fail.count({call, pid})) return absl::FailedPreconditionError(absl::StrCat(call, " of pid ", pid, ": refused"));
    if (state.at(pid) != from) {
      return absl::FailedPreconditionError(absl::StrCat(call, " of pid ", pid, " in state ",
                                                        CudaStateName(state.at(pid))));
    }
    state[pid] = to;
    return absl::OkStatus();
  }
};

bool AllRunning(const FakeDriver& d) {
  for (const auto& [pid, s] : d.state) {
    if (s != CudaState::kRunning) return false;
  }
  return true;
}

TEST(DeviceCheckpoint, LocksEveryProcessBeforeAnyIsCheckpointedAndResumesThemInReverse) {
  FakeDriver d({10, 11, 12});
  absl::StatusOr<DeviceCheckpoint> c = DeviceCheckpoint::Take(d, {10, 11, 12}, 5000);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(d.last_timeout, 5000u);
  for (pid_t p : {10, 11, 12}) EXPECT_EQ(d.state[p], CudaState::kCheckpointed) << p;
  ASSERT_TRUE(c->Resume().ok());
  EXPECT_TRUE(AllRunning(d));
  const std::vector<std::string> expected = {
      "lock 10",    "lock 11",   "lock 12",    "checkpoint 10", "checkpoint 11", "checkpoint 12",
      "restore 12", "unlock 12", "restore 11", "unlock 11",     "restore 10",    "unlock 10"};
  EXPECT_EQ(d.calls, expected);
}

TEST(DeviceCheckpoint, AFailedLockUnlocksTheOthersAndNamesTheProcess) {
  FakeDriver d({10, 11, 12});
  d.fail.insert({"lock", 11});
  absl::StatusOr<DeviceCheckpoint> c = DeviceCheckpoint::Take(d, {10, 11, 12}, 100);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("lock of pid 11"), absl::string_view::npos) << c.status();
  EXPECT_NE(c.status().message().find("put back to RUNNING"), absl::string_view::npos) << c.status();
  EXPECT_NE(c.status().message().find("within 100 ms"), absl::string_view::npos) << c.status();
  EXPECT_TRUE(AllRunning(d));
  EXPECT_EQ(d.calls, (std::vector<std::string>{"lock 10", "lock 11", "unlock 10"}));
}

TEST(DeviceCheckpoint, AFailedCheckpointRestoresTheCheckpointedAndUnlocksTheRest) {
  FakeDriver d({10, 11, 12});
  d.fail.insert({"checkpoint", 11});
  absl::StatusOr<DeviceCheckpoint> c = DeviceCheckpoint::Take(d, {10, 11, 12}, 0);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("checkpoint of pid 11"), absl::string_view::npos) << c.status();
  EXPECT_TRUE(AllRunning(d));
  const std::vector<std::string> expected = {"lock 10",    "lock 11",   "lock 12",   "checkpoint 10", "checkpoint 11",
                                             "restore 10", "unlock 10", "unlock 12", "unlock 11"};
  EXPECT_EQ(d.calls, expected);
}

TEST(DeviceCheckpoint, ARollbackThatFailsSaysWhichProcessIsLeftAndInWhatState) {
  FakeDriver d({10, 11});
  d.fail.insert({"checkpoint", 11});
  d.fail.insert({"restore", 10});
  absl::StatusOr<DeviceCheckpoint> c = DeviceCheckpoint::Take(d, {10, 11}, 0);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("not put back: pid 10 (driver state CHECKPOINTED)"), absl::string_view::npos)
      << c.status();
  EXPECT_EQ(d.state[11], CudaState::kRunning) << "the other process is still put back";
}

TEST(DeviceCheckpoint, DroppedWithoutResumeItResumesAndReleasedItLeavesThemForDead) {
  FakeDriver d({10, 11});
  {
    absl::StatusOr<DeviceCheckpoint> c = DeviceCheckpoint::Take(d, {10, 11}, 0);
    ASSERT_TRUE(c.ok()) << c.status();
  }
  EXPECT_TRUE(AllRunning(d)) << "a device checkpoint dropped on a path out left its processes checkpointed";
  absl::StatusOr<DeviceCheckpoint> c = DeviceCheckpoint::Take(d, {10, 11}, 0);
  ASSERT_TRUE(c.ok()) << c.status();
  size_t before = d.calls.size();
  c->Release();  // the dump killed them
  { DeviceCheckpoint gone = std::move(*c); }
  EXPECT_EQ(d.calls.size(), before) << "a released checkpoint touched its dead processes";
}

TEST(DeviceCheckpoint, ResumeTriesEveryProcessWhateverFails) {
  FakeDriver d({10, 11, 12});
  absl::StatusOr<DeviceCheckpoint> c = DeviceCheckpoint::Take(d, {10, 11, 12}, 0);
  ASSERT_TRUE(c.ok()) << c.status();
  d.fail.insert({"unlock", 11});
  absl::Status s = c->Resume();
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("pid 11 (driver state LOCKED)"), absl::string_view::npos) << s;
  EXPECT_EQ(d.state[10], CudaState::kRunning);
  EXPECT_EQ(d.state[12], CudaState::kRunning);
}

TEST(CudaDriver, WithoutTheLibraryLoadingSaysWhichLibraryIsMissing) {
  absl::StatusOr<std::unique_ptr<CudaCheckpointApi>> api = LoadDriverCheckpointApi("libcuda-not-here.so.1");
  ASSERT_FALSE(api.ok());
  EXPECT_EQ(api.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(api.status().message().find("libcuda-not-here.so.1"), absl::string_view::npos) << api.status();
}

TEST(CudaDriver, AProcessWithoutNvidiaDevicesHoldsNoCudaState) {
  EXPECT_FALSE(HoldsCudaState(::getpid()));
  EXPECT_FALSE(HoldsCudaState(999999999));
}

}  // namespace
}  // namespace cairn::gpu
