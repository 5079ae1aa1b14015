// cairn dump and restore of a process holding CUDA state, without a GPU: the NVIDIA driver is the
// fake of fake_libcuda.c (cairn loads it as libcuda.so.1 through LD_LIBRARY_PATH) and the process
// is fake_cuda_app, whose "device memory" lives behind a /dev/nvidia* file and is handed to its
// host memory and back by its driver thread, as the real driver's checkpoint API does. Each test
// checks the program's own view: it finishes (it was unlocked) with the checksum of an
// uninterrupted run (its device memory came back from the checkpoint).
#include <dirent.h>
#include <dlfcn.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "harness.h"

namespace cairn::testing {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr int kSteps = 300;
constexpr int kStepMs = 10;


// Whether `pid` has a /dev/nvidia* file open (what cairn takes for CUDA state).
bool HoldsDevice(pid_t pid) {
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/fd", ec)) {
    std::error_code lec;
    if (std::filesystem::read_symlink(e.path(), lec).string().rfind("/dev/nvidia", 0) == 0) return true;
  }
  return false;
}

class GpuFakeDriver : public ::testing::Test {
 protected:
  void SetUp() override {
    BecomeSubreaper();
    WriteFile(dir_ / "empty", "");
    journals_ = dir_ / "journals";
  }
  void TearDown() override {
    if (app_ > 0) KillAndWait(app_);
    std::string device = DevicePath();
    if (!device.empty()) std::filesystem::remove(device);
  }

  // The environment of a cairn that finds the fake driver (or none).
  std::vector<std::string> Env(bool driver = true, const std::string& fail = "") const {
    std::vector<std::string> env = {"CAIRN_JOURNAL_DIR=" + journals_};
    if (driver) env.push_back(std::string("LD_LIBRARY_PATH=") + FAKE_DRIVER_DIR);
    if (!fail.empty()) env.push_back("CAIRN_FAKE_CUDA_FAIL=" + fail);
    return env;
  }

  // The checksum line of a run nothing interrupts.
  std::string Uninterrupted() {
    std::string work = dir_ / "plain";
    std::filesystem::create_directories(work);
    CommandResult r = RunCommand({FAKE_CUDA_APP, work, std::to_string(kSteps), "0"}, work);
    EXPECT_TRUE(r.Exited(0)) << r.Describe();
    return r.out;
  }

  void StartApp() {
    app_ = SpawnProgram({FAKE_CUDA_APP, dir_.path(), std::to_string(kSteps), std::to_string(kStepMs)}, dir_ / "empty",
                        dir_ / "app.out", dir_ / "app.err");
    ASSERT_GT(app_, 0);
    WaitProgress(20);
  }

  // The fake device file of the app (fake_cuda.h).
  std::string DevicePath() const {
    std::string path = ReadFile(dir_ / "device");
    while (!path.empty() && path.back() == '\n') path.pop_back();
    return path;
  }

  int Progress() const { return std::atoi(ReadFile(dir_ / "progress").c_str()); }

  void WaitProgress(int at_least) {
    auto deadline = Clock::now() + 30s;
    while (Progress() < at_least) {
      ASSERT_TRUE(IsAlive(app_)) << "the app died: " << ReadFile(dir_ / "app.err");
      ASSERT_LT(Clock::now(), deadline) << "the app is stuck at step " << Progress();
      std::this_thread::sleep_for(10ms);
    }
  }

  // Starts `cairn dump` of the app into dir_/ckpt with `env` and waits until it stands at its
  // fault point after the device checkpoint (the driver holds the app's device state in host
  // memory); its pid in *dump. Its output goes to dir_/dump.err.
  void DumpPausedAfterTheDeviceCheckpoint(std::vector<std::string> env, pid_t* dump) {
    env.push_back("CAIRN_FAULT_PAUSE=device-checkpointed");
    *dump = SpawnProgram({CairnBinary(), "dump", "--pid", std::to_string(app_), "--dir", dir_ / "ckpt"},
                         dir_ / "empty", dir_ / "dump.out", dir_ / "dump.err", env);
    auto deadline = Clock::now() + 30s;
    while (ReadFile(dir_ / "dump.err").find("fault point device-checkpointed") == std::string::npos) {
      ASSERT_TRUE(IsAlive(*dump)) << ReadFile(dir_ / "dump.err");
      ASSERT_LT(Clock::now(), deadline);
      std::this_thread::sleep_for(5ms);
    }
  }

  // Waits for the app to finish; its output.
  std::string Finished() {
    Ending e = WaitGone(app_, 60s);
    EXPECT_TRUE(e.gone) << "the app did not finish: it stays at step " << Progress()
                        << " (its CUDA calls still locked?)";
    return ReadFile(dir_ / "app.out");
  }

  std::vector<std::string> Journals() const {
    std::vector<std::string> out;
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(journals_, ec)) out.push_back(e.path().filename());
    return out;
  }

  // Whether the test process would load a real libcuda.so.1 (a GPU machine): then "no driver"
  // cannot be staged by leaving LD_LIBRARY_PATH out.
  static bool RealDriverHere() {
    void* h = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (h != nullptr) ::dlclose(h);
    return h != nullptr;
  }

  TempDir dir_;
  std::string journals_;
  pid_t app_ = -1;
};

TEST_F(GpuFakeDriver, DumpKillRestoreBringsTheDeviceMemoryBack) {
  std::string expected = Uninterrupted();
  ASSERT_NE(expected.find("checksum"), std::string::npos) << expected;
  StartApp();
  std::string ckpt = dir_ / "ckpt";
  CommandResult d = RunCommand({CairnBinary(), "dump", "--pid", std::to_string(app_), "--dir", ckpt}, dir_.path(),
                               WithEnv(Env()));
  ASSERT_TRUE(d.Exited(0)) << d.Describe();
  EXPECT_NE(d.out.find("GPU: the device state of pid " + std::to_string(app_)), std::string::npos) << d.Describe();
  ASSERT_TRUE(WaitGone(app_, 10s).gone);
  int at = Progress();
  EXPECT_GT(at, 0);
  EXPECT_LT(at, kSteps);
  // Another "GPU": the device's memory is not what the process left there.
  ASSERT_EQ(DevicePath().rfind("/dev/nvidia-cairn-fake-", 0), 0u) << DevicePath();
  WriteFile(DevicePath(), std::string(1 << 20, '\0'));

  if (!RealDriverHere()) {
    CommandResult r = RunCommand({CairnBinary(), "restore", "--dir", ckpt, "--detach"}, dir_.path(),
                                 WithEnv(Env(/*driver=*/false)));
    EXPECT_TRUE(r.FailedCleanly()) << r.Describe();
    EXPECT_NE(r.err.find("nothing was restored"), std::string::npos) << r.Describe();
    EXPECT_NE(r.err.find("libcuda.so.1"), std::string::npos) << r.Describe();
    EXPECT_FALSE(IsAlive(app_)) << "a restore refused for want of a driver left the process";
  }
  // The driver refuses the device restore: nothing is left running.
  CommandResult refused = RunCommand({CairnBinary(), "restore", "--dir", ckpt, "--detach"}, dir_.path(),
                                     WithEnv(Env(true, "restore")));
  EXPECT_TRUE(refused.FailedCleanly()) << refused.Describe();
  EXPECT_NE(refused.err.find("cuCheckpointProcessRestore"), std::string::npos) << refused.Describe();
  EXPECT_NE(refused.err.find("CUDA_ERROR_NOT_SUPPORTED"), std::string::npos) << refused.Describe();
  EXPECT_TRUE(WaitGone(app_, 10s).gone) << "a failed device restore left the process running";

  CommandResult r = RunCommand({CairnBinary(), "restore", "--dir", ckpt, "--detach"}, dir_.path(), WithEnv(Env()));
  ASSERT_TRUE(r.Exited(0)) << r.Describe();
  EXPECT_EQ(Finished(), expected) << "the restored program's device memory differs from an uninterrupted run's";
}

// The dump records the GPU (NVML: the fake's GPU 0); a restore moves the device state onto
// another GPU of the same model (the driver's UUID pair), and refuses one that is not there, of
// another model, or a GPU the checkpoint never used, naming both.
TEST_F(GpuFakeDriver, ARestoreMovesTheDeviceStateOntoAnotherGpuOfTheSameModel) {
  std::string expected = Uninterrupted();
  StartApp();
  EXPECT_EQ(ReadFile(dir_ / "gpu"), "0\n");
  std::string ckpt = dir_ / "ckpt";
  CommandResult d = RunCommand({CairnBinary(), "dump", "--pid", std::to_string(app_), "--dir", ckpt}, dir_.path(),
                               WithEnv(Env()));
  ASSERT_TRUE(d.Exited(0)) << d.Describe();
  ASSERT_TRUE(WaitGone(app_, 10s).gone);
  CommandResult shown = RunCommand({CairnBinary(), "inspect", ckpt, "--json"}, dir_.path());
  EXPECT_NE(shown.out.find("GPU-00000000-0000-0000-0000-000000000000"), std::string::npos)
      << "the checkpoint does not record its GPU: " << shown.out.substr(0, 2000);

  auto restore = [&](const std::vector<std::string>& extra, const std::vector<std::string>& env) {
    std::vector<std::string> argv = {CairnBinary(), "restore", "--dir", ckpt, "--detach"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return RunCommand(argv, dir_.path(), WithEnv(env));
  };
  std::vector<std::string> mixed = Env();
  mixed.push_back("CAIRN_FAKE_NVML_NAMES=NVIDIA H100 80GB HBM3,NVIDIA A100-SXM4-80GB");
  CommandResult other_model = restore({"--gpu-map", "0=1"}, mixed);
  EXPECT_TRUE(other_model.FailedCleanly()) << other_model.Describe();
  EXPECT_NE(other_model.err.find("used GPU 0 (NVIDIA H100 80GB HBM3"), std::string::npos) << other_model.Describe();
  EXPECT_NE(other_model.err.find("GPU 1 here (NVIDIA A100-SXM4-80GB"), std::string::npos) << other_model.Describe();
  EXPECT_NE(other_model.err.find("nothing was restored"), std::string::npos) << other_model.Describe();
  CommandResult missing = restore({"--gpu-map", "0=5"}, Env());
  EXPECT_TRUE(missing.FailedCleanly()) << missing.Describe();
  EXPECT_NE(missing.err.find("there is no GPU 5 here (2 GPUs)"), std::string::npos) << missing.Describe();
  CommandResult unused = restore({"--gpu-map", "3=1"}, Env());
  EXPECT_TRUE(unused.FailedCleanly()) << unused.Describe();
  EXPECT_NE(unused.err.find("used no GPU 3"), std::string::npos) << unused.Describe();
  EXPECT_FALSE(IsAlive(app_));

  CommandResult moved = restore({"--gpu-map", "0=1"}, Env());
  ASSERT_TRUE(moved.Exited(0)) << moved.Describe();
  WaitProgress(Progress() + 2);
  EXPECT_EQ(ReadFile(dir_ / "gpu"), "1\n") << "the device state did not move to GPU 1";
  EXPECT_EQ(Finished(), expected);
}

TEST_F(GpuFakeDriver, LeaveRunningPutsTheDeviceBackAndTheCheckpointRestores) {
  std::string expected = Uninterrupted();
  StartApp();
  std::string ckpt = dir_ / "ckpt";
  CommandResult d = RunCommand(
      {CairnBinary(), "dump", "--pid", std::to_string(app_), "--dir", ckpt, "--leave-running"}, dir_.path(),
      WithEnv(Env()));
  ASSERT_TRUE(d.Exited(0)) << d.Describe();
  int at = Progress();
  WaitProgress(at + 5);  // it computes again: unlocked
  EXPECT_TRUE(HoldsDevice(app_)) << "its device is not back";
  EXPECT_EQ(Finished(), expected) << "the program left running computed something else";
  EXPECT_TRUE(Journals().empty());

  WriteFile(dir_ / "app.out", "");
  CommandResult r = RunCommand({CairnBinary(), "restore", "--dir", ckpt, "--detach"}, dir_.path(), WithEnv(Env()));
  ASSERT_TRUE(r.Exited(0)) << r.Describe();
  EXPECT_NE(Finished().find(expected), std::string::npos) << "the checkpoint of the program left running differs";
}

// The host side keeps its ways around the device side: a pre-copy dump restored lazily, and an
// incremental dump on top of a tracked one.
TEST_F(GpuFakeDriver, PreCopyLazyRestoreAndIncrementalDumpsKeepWorking) {
  std::string expected = Uninterrupted();
  {
    SCOPED_TRACE("pre-copy, lazy restore");
    StartApp();
    std::string ckpt = dir_ / "precopy";
    CommandResult d = RunCommand({CairnBinary(), "dump", "--pid", std::to_string(app_), "--dir", ckpt, "--pre-copy"},
                                 dir_.path(), WithEnv(Env()));
    ASSERT_TRUE(d.Exited(0)) << d.Describe();
    EXPECT_NE(d.out.find("GPU: the device state"), std::string::npos) << d.Describe();
    ASSERT_TRUE(WaitGone(app_, 10s).gone);
    CommandResult r = RunCommand({CairnBinary(), "restore", "--dir", ckpt, "--detach", "--lazy"}, dir_.path(),
                                 WithEnv(Env()));
    ASSERT_TRUE(r.Exited(0)) << r.Describe();
    EXPECT_EQ(Finished(), expected);
  }
  {
    SCOPED_TRACE("--track, then --parent");
    WriteFile(dir_ / "app.out", "");
    StartApp();
    std::string base = dir_ / "base", top = dir_ / "top";
    CommandResult d1 = RunCommand(
        {CairnBinary(), "dump", "--pid", std::to_string(app_), "--dir", base, "--leave-running", "--track"},
        dir_.path(), WithEnv(Env()));
    ASSERT_TRUE(d1.Exited(0)) << d1.Describe();
    WaitProgress(Progress() + 5);
    CommandResult d2 = RunCommand({CairnBinary(), "dump", "--pid", std::to_string(app_), "--dir", top, "--parent", base},
                                  dir_.path(), WithEnv(Env()));
    ASSERT_TRUE(d2.Exited(0)) << d2.Describe();
    ASSERT_TRUE(WaitGone(app_, 10s).gone);
    CommandResult r = RunCommand({CairnBinary(), "restore", "--dir", top, "--detach"}, dir_.path(), WithEnv(Env()));
    ASSERT_TRUE(r.Exited(0)) << r.Describe();
    EXPECT_EQ(Finished(), expected);
  }
}

TEST_F(GpuFakeDriver, ARefusedDeviceCheckpointLeavesTheProgramRunningAndNoCheckpoint) {
  std::string expected = Uninterrupted();
  StartApp();
  for (const char* call : {"lock", "checkpoint"}) {
    SCOPED_TRACE(call);
    std::string ckpt = dir_ / (std::string("ckpt-") + call);
    CommandResult d = RunCommand({CairnBinary(), "dump", "--pid", std::to_string(app_), "--dir", ckpt}, dir_.path(),
                                 WithEnv(Env(true, call)));
    EXPECT_TRUE(d.FailedCleanly()) << d.Describe();
    EXPECT_NE(d.err.find("CUDA_ERROR_NOT_SUPPORTED"), std::string::npos) << d.Describe();
    EXPECT_NE(d.err.find("put back to RUNNING"), std::string::npos) << d.Describe();
    EXPECT_FALSE(Exists(ckpt) || Exists(ckpt + ".partial")) << "a checkpoint was left";
    EXPECT_TRUE(IsAlive(app_));
    int at = Progress();
    WaitProgress(at + 5);  // not left locked
  }
  if (!RealDriverHere()) {
    CommandResult d = RunCommand({CairnBinary(), "dump", "--pid", std::to_string(app_), "--dir", dir_ / "ckpt-none"},
                                 dir_.path(), WithEnv(Env(/*driver=*/false)));
    EXPECT_TRUE(d.FailedCleanly()) << d.Describe();
    EXPECT_NE(d.err.find("holds CUDA state"), std::string::npos) << d.Describe();
    EXPECT_NE(d.err.find("libcuda.so.1"), std::string::npos) << d.Describe();
  }
  EXPECT_EQ(Finished(), expected);
  EXPECT_TRUE(Journals().empty());
}

// What the dump refuses anyway is refused before the driver touches the process: its precheck
// (here: a pipe whose other end a process outside the checkpoint holds) comes first.
TEST_F(GpuFakeDriver, ADumpThePrecheckRefusesNeverTouchesTheDevice) {
  app_ = SpawnProgram({"/bin/bash", "-c",
                       std::string("exec 3< <(exec sleep 1000); exec ") + FAKE_CUDA_APP + " " + dir_.path() + " " +
                           std::to_string(kSteps) + " " + std::to_string(kStepMs)},
                      dir_ / "empty", dir_ / "app.out", dir_ / "app.err");
  ASSERT_GT(app_, 0);
  WaitProgress(20);
  // Every driver call refused: any that were made would show in the error.
  CommandResult d = RunCommand({CairnBinary(), "dump", "--pid", std::to_string(app_), "--dir", dir_ / "ckpt"},
                               dir_.path(), WithEnv(Env(true, "lock")));
  EXPECT_TRUE(d.FailedCleanly()) << d.Describe();
  EXPECT_NE(d.err.find("is a pipe"), std::string::npos) << d.Describe();
  EXPECT_EQ(d.err.find("CUDA_ERROR"), std::string::npos) << "the driver was asked before the precheck: " << d.Describe();
  int at = Progress();
  WaitProgress(at + 3);
  EXPECT_TRUE(HoldsDevice(app_));
  for (pid_t c : ChildrenNamed("sleep", app_)) ::kill(c, SIGKILL);
}

// The dumper killed once the driver has the device state in host memory: its guardian execs a
// fresh cairn (gpu-put-back) that puts it back (engine/dump/guardian.h, point 11).
TEST_F(GpuFakeDriver, ADumpKilledAfterTheDeviceCheckpointHasTheProgramPutBack) {
  std::string expected = Uninterrupted();
  StartApp();
  std::string ckpt = dir_ / "ckpt";
  pid_t dump = -1;
  DumpPausedAfterTheDeviceCheckpoint(Env(), &dump);
  if (HasFatalFailure()) return;
  // Checkpointed by the driver: no device open, no step taken.
  EXPECT_FALSE(HoldsDevice(app_));
  int at = Progress();
  std::this_thread::sleep_for(200ms);
  EXPECT_EQ(Progress(), at) << "the program computed while its device state was checkpointed";
  ::kill(dump, SIGKILL);
  ::waitpid(dump, nullptr, 0);
  WaitProgress(at + 5);
  EXPECT_TRUE(HoldsDevice(app_));
  EXPECT_NE(ReadFile(dir_ / "dump.err").find("cairn gpu-put-back: pid " + std::to_string(app_) +
                                             ": its CUDA state was CHECKPOINTED, RUNNING now"),
            std::string::npos)
      << ReadFile(dir_ / "dump.err");
  EXPECT_EQ(Finished(), expected);
  for (auto until = Clock::now() + 10s; !Journals().empty() && Clock::now() < until;) std::this_thread::sleep_for(10ms);
  EXPECT_TRUE(Journals().empty()) << "the journal of the killed dump is left";
  EXPECT_FALSE(Exists(ckpt) || Exists(ckpt + ".partial"));
}

// The dumper and its guardian killed together: the program waits, locked, until the next cairn
// (here the next dump) puts it back (guardian.h, points 8 and 11).
TEST_F(GpuFakeDriver, ADumpKilledWithItsGuardianHasTheProgramPutBackByTheNextCairn) {
  std::string expected = Uninterrupted();
  StartApp();
  pid_t dump = -1;
  DumpPausedAfterTheDeviceCheckpoint(Env(), &dump);
  if (HasFatalFailure()) return;
  std::vector<pid_t> guardian = ChildrenNamed("cairn-guardian", dump);
  for (auto until = Clock::now() + 5s; guardian.empty() && Clock::now() < until;) {
    std::this_thread::sleep_for(5ms);
    guardian = ChildrenNamed("cairn-guardian", dump);
  }
  ASSERT_EQ(guardian.size(), 1u);
  ::kill(guardian[0], SIGKILL);
  ::kill(dump, SIGKILL);
  ::waitpid(dump, nullptr, 0);
  for (auto until = Clock::now() + 10s; IsAlive(guardian[0]) && Clock::now() < until;) {
    ::waitpid(guardian[0], nullptr, WNOHANG);
    std::this_thread::sleep_for(5ms);
  }
  int at = Progress();
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(Progress(), at) << "nothing should have put the program back yet";
  EXPECT_EQ(Journals().size(), 1u);

  CommandResult next = RunCommand(
      {CairnBinary(), "-v", "dump", "--pid", std::to_string(app_), "--dir", dir_ / "next", "--leave-running"},
      dir_.path(), WithEnv(Env()));
  ASSERT_TRUE(next.Exited(0)) << next.Describe();
  EXPECT_NE(next.err.find("its CUDA state was CHECKPOINTED, RUNNING now"), std::string::npos) << next.Describe();
  EXPECT_TRUE(Journals().empty());
  EXPECT_EQ(Finished(), expected);
}

// A put-back the driver refuses (here its restore call) keeps the journal as NAME.failed with the
// program still checkpointed by the driver: `cairn check` names it, and the next cairn (here the
// next dump) tries again and puts it back (guardian.h, point 11).
TEST_F(GpuFakeDriver, AFailedPutBackIsTriedAgainByTheNextCairn) {
  std::string expected = Uninterrupted();
  StartApp();
  pid_t dump = -1;
  DumpPausedAfterTheDeviceCheckpoint(Env(true, "restore"), &dump);
  if (HasFatalFailure()) return;
  ::kill(dump, SIGKILL);
  ::waitpid(dump, nullptr, 0);
  auto failed = [&] {
    std::vector<std::string> j = Journals();
    return j.size() == 1 && j[0].ends_with(".journal.failed");
  };
  for (auto until = Clock::now() + 10s; !failed() && Clock::now() < until;) std::this_thread::sleep_for(10ms);
  ASSERT_TRUE(failed()) << ReadFile(dir_ / "dump.err");
  EXPECT_NE(ReadFile(dir_ / "dump.err").find("CUDA_ERROR"), std::string::npos) << ReadFile(dir_ / "dump.err");
  int at = Progress();
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(Progress(), at) << "the program ran while the driver held its device state";
  EXPECT_FALSE(HoldsDevice(app_));

  CommandResult check = RunCommand({CairnBinary(), "check"}, dir_.path(), WithEnv(Env()));
  EXPECT_FALSE(check.Exited(0)) << check.Describe();
  EXPECT_NE(check.out.find("its GPU processes are still locked or checkpointed by the NVIDIA driver"), std::string::npos)
      << check.Describe();

  CommandResult next = RunCommand(
      {CairnBinary(), "-v", "dump", "--pid", std::to_string(app_), "--dir", dir_ / "next", "--leave-running"},
      dir_.path(), WithEnv(Env()));
  ASSERT_TRUE(next.Exited(0)) << next.Describe();
  EXPECT_NE(next.err.find("its CUDA state was CHECKPOINTED, RUNNING now"), std::string::npos) << next.Describe();
  EXPECT_NE(next.err.find("its GPU processes are put back now"), std::string::npos) << next.Describe();
  EXPECT_EQ(Finished(), expected);
  CommandResult again = RunCommand({CairnBinary(), "check"}, dir_.path(), WithEnv(Env()));
  EXPECT_EQ(again.out.find("still locked or checkpointed"), std::string::npos) << again.Describe();
  for (const std::string& j : Journals()) std::filesystem::remove(std::filesystem::path(journals_) / j);
}

}  // namespace
}  // namespace cairn::testing
