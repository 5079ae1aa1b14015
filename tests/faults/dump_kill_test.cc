// Kills `cairn dump` while it works, and asks the process it was checkpointing whether it is
// still exactly as it was (tests/faults/fault_target.c checks its own memory, masks, signal
// actions, mappings, descriptors, vDSO and threads).
//
// At each named stage (CAIRN_FAULT_PAUSE, common/stop_points.h) with SIGKILL, SIGTERM, SIGINT
// and SIGHUP, and at random instants spread over a whole dump. A dump killed before it
// committed must leave the process running as before and no checkpoint; one that was to kill
// the process and had committed must have finished its job: the process gone and the
// checkpoint complete (restored here, it passes the same check).
//
// Sizes: CAIRN_FAULT_MIB (default 256) MiB of target memory, CAIRN_FAULT_RUNS (default 16)
// random instants; tests/faults/long.sh runs it at 1 GiB and 64 instants.
#include <dirent.h>
#include <string.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "harness.h"

namespace cairn::testing {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

int EnvInt(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::atoi(v) : fallback;
}

std::string SignalName(int sig) { return std::string("SIG") + sigabbrev_np(sig); }


class DumpKillTest : public ::testing::Test {
 protected:
  void SetUp() override {
    BecomeSubreaper();
    mib_ = EnvInt("CAIRN_FAULT_MIB", 256);
    StartTarget();
  }
  void TearDown() override {
    if (target_ > 0) KillAndWait(target_);
  }

  std::string TargetOut() const { return dir_ / "target.out"; }

  void StartTarget(const std::vector<std::string>& extra = {}) {
    WriteFile(dir_ / "empty", "");
    std::vector<std::string> argv = {FAULT_TARGET, std::to_string(mib_)};
    argv.insert(argv.end(), extra.begin(), extra.end());
    target_ = SpawnProgram(argv, dir_ / "empty", TargetOut(), dir_ / "target.err");
    ASSERT_GT(target_, 0);
    auto deadline = Clock::now() + 60s;
    while (ReadFile(TargetOut()).find("ready") == std::string::npos) {
      ASSERT_TRUE(IsAlive(target_)) << "the target died before it was ready: " << ReadFile(dir_ / "target.err");
      ASSERT_LT(Clock::now(), deadline) << "the target was not ready in 60 s";
      std::this_thread::sleep_for(20ms);
    }
  }

  // Asks the target to check itself; its answer ("PASS N" or "FAIL why").
  std::string AskTarget() {
    size_t before = ReadFile(TargetOut()).size();
    if (!IsAlive(target_)) return "DEAD (" + ReadFile(TargetOut()).substr(before) + ")";
    ::kill(target_, SIGUSR1);
    auto deadline = Clock::now() + 30s;
    while (Clock::now() < deadline) {
      std::string out = ReadFile(TargetOut());
      size_t at = out.find_first_of("PF", before);
      if (at != std::string::npos && out.find('\n', at) != std::string::npos) {
        if (out.compare(at, 4, "PASS") == 0) return out.substr(at, out.find('\n', at) - at);
        return out.substr(at);  // a FAIL, with its details
      }
      if (!IsAlive(target_)) return "DEAD after the question";
      std::this_thread::sleep_for(20ms);
    }
    return "NO ANSWER in 30 s (its threads are stuck: " + ReadFile("/proc/" + std::to_string(target_) + "/status") + ")";
  }

  struct Killed {
    int exit_code = -1, term_signal = 0;
    bool paused = false;  // reached the fault point
    std::string err;
  };

  // Starts a dump of the target into `dir`, kills it with `sig` at fault point `stage` (or
  // after `delay` when `stage` is empty), waits for it and for its guardian.
  Killed KillDump(const std::string& dir, const std::string& stage, std::chrono::microseconds delay, int sig,
                  bool leave_running) {
    std::vector<std::string> argv = {CairnBinary(), "dump", "--pid", std::to_string(target_), "--dir", dir};
    if (leave_running) argv.push_back("--leave-running");
    argv.insert(argv.end(), extra_args_.begin(), extra_args_.end());
    std::vector<std::string> env;
    if (!stage.empty()) env.push_back("CAIRN_FAULT_PAUSE=" + stage);
    std::string err_path = dir + ".err";
    pid_t dump = SpawnProgram(argv, dir_ / "empty", dir + ".out", err_path, env);
    Killed k;
    if (stage.empty()) {
      std::this_thread::sleep_for(delay);
    } else {
      auto deadline = Clock::now() + 60s;
      while (!(k.paused = ReadFile(err_path).find("fault point " + stage) != std::string::npos) &&
             Clock::now() < deadline && IsAlive(dump)) {
        std::this_thread::sleep_for(5ms);
      }
    }
    ::kill(dump, sig);
    int status = 0;
    ::waitpid(dump, &status, 0);
    if (WIFEXITED(status)) k.exit_code = WEXITSTATUS(status);
    if (WIFSIGNALED(status)) k.term_signal = WTERMSIG(status);
    // Its guardian, if it had one, is now this process's child: wait for it to finish.
    auto deadline = Clock::now() + 30s;
    for (std::vector<pid_t> g; !(g = ChildrenNamed("cairn-guardian")).empty() && Clock::now() < deadline;) {
      for (pid_t p : g) ::waitpid(p, nullptr, WNOHANG);
      std::this_thread::sleep_for(5ms);
    }
    k.err = ReadFile(err_path);
    return k;
  }

  // After a killed dump: the target runs exactly as before and nothing of the checkpoint is
  // left; or (a dump that was to kill it and had committed) the target is gone and the
  // checkpoint restores into a process that passes the same check.
  void ExpectUnharmed(const std::string& dir, const Killed& k, bool leave_running, const std::string& what) {
    SCOPED_TRACE(what);
    EXPECT_FALSE(Exists(dir + ".partial")) << "a half-written checkpoint was left\n" << k.err;
    bool committed = Exists(dir);
    if (!leave_running && committed) {
      // Committed, it was to kill the target: whoever finished the dump (its guardian, `cairn
      // check --fix`) sent the SIGKILL; the death itself may still be under way.
      ASSERT_TRUE(WaitGone(target_, 10s).gone) << "the target runs beside the checkpoint that was to replace it: " << k.err;
      CommandResult r = RunCommand({CairnBinary(), "restore", "--dir", dir, "--detach"}, dir_.path());
      ASSERT_TRUE(r.Exited(0)) << "the committed checkpoint does not restore: " << r.Describe();
      std::string answer = AskTarget();
      EXPECT_EQ(answer.rfind("PASS", 0), 0u) << "restored from the checkpoint the killed dump committed: " << answer;
      ++committed_;
      return;
    }
    EXPECT_TRUE(IsAlive(target_)) << "the target died: " << k.err;
    std::string answer = AskTarget();
    EXPECT_EQ(answer.rfind("PASS", 0), 0u) << "the target is not as it was: " << answer << "\ndump's stderr: " << k.err;
    if (answer.rfind("PASS", 0) == 0) ++survived_;
    if (committed && leave_running) ++committed_;  // killed after its commit: a complete checkpoint
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }

  void AtEveryStage(const std::vector<std::string>& stages, const std::vector<int>& signals, bool leave_running) {
    int n = 0;
    for (const std::string& stage : stages) {
      for (int sig : signals) {
        std::string dir = dir_ / ("ckpt-" + std::to_string(n++));
        Killed k = KillDump(dir, stage, {}, sig, leave_running);
        std::string what = "killed with " + SignalName(sig) + " at stage " + stage;
        EXPECT_TRUE(k.paused) << what << ": the dump never reached the stage\n" << k.err;
        ExpectUnharmed(dir, k, leave_running, what);
        if (sig != SIGKILL && k.paused && stage != "committed") {
          EXPECT_EQ(k.exit_code, 1) << what << ": a caught signal must end the dump with a clean error\n" << k.err;
          EXPECT_NE(k.err.find("interrupted by " + SignalName(sig)), std::string::npos) << what << "\n" << k.err;
        }
        if (HasFatalFailure() || !IsAlive(target_)) return;
      }
    }
  }

  TempDir dir_;
  std::vector<std::string> extra_args_;  // more arguments for every dump
  int mib_ = 256;
  pid_t target_ = -1;
  int survived_ = 0, committed_ = 0;
};

const std::vector<int> kAllSignals = {SIGKILL, SIGTERM, SIGINT, SIGHUP};

TEST_F(DumpKillTest, LeaveRunningDumpKilledAtEveryStageLeavesTheProcessAsItWas) {
  AtEveryStage({"frozen", "trampoline", "injecting", "scratch", "batch", "task_state", "pages", "fds", "socket_queue",
                "thawed"},
               kAllSignals, /*leave_running=*/true);
}

TEST_F(DumpKillTest, DumpKilledAtEveryStageBeforeItsCommitLeavesTheProcessAsItWas) {
  AtEveryStage({"frozen", "injecting", "batch", "task_state", "pages", "fds", "socket_queue"}, kAllSignals,
               /*leave_running=*/false);
}

// A dump that tracks writes from now on (--track) makes a write tracker in the process: a
// userfaultfd made by an injected call, then parked at a chosen descriptor. Killed while it
// makes it, the process must keep no descriptor of it (fault_target compares its descriptors).
TEST_F(DumpKillTest, TrackingDumpKilledWhileItMakesItsTrackerLeavesNoDescriptor) {
  extra_args_ = {"--track"};
  AtEveryStage({"tracker_creating", "tracker_created", "pages"}, kAllSignals, /*leave_running=*/true);
}

// A process that unmapped its vDSO: the injected code goes into the end of a text page
// instead, and a dump killed at each stage still leaves it exactly as it was, those bytes
// included (fault_target checks them).
TEST_F(DumpKillTest, WithoutAVdsoADumpKilledAtEveryStageLeavesTheProcessAsItWas) {
  KillAndWait(target_);
  std::filesystem::remove(TargetOut());
  StartTarget({"novdso"});
  ASSERT_EQ(AskTarget().rfind("PASS", 0), 0u) << ReadFile(TargetOut()) << ReadFile(dir_ / "target.err");
  AtEveryStage({"trampoline", "injecting", "batch", "pages", "thawed"}, {SIGKILL, SIGTERM}, /*leave_running=*/true);
  AtEveryStage({"injecting", "pages", "fds"}, {SIGKILL}, /*leave_running=*/false);
}

// Past its commit a dump that kills its process has done what it was asked: the guardian
// finishes the kill, so that the checkpoint is the only copy.
TEST_F(DumpKillTest, DumpKilledAfterItsCommitFinishesTheKill) {
  std::string dir = dir_ / "ckpt";
  Killed k = KillDump(dir, "committed", {}, SIGKILL, /*leave_running=*/false);
  ASSERT_TRUE(k.paused) << k.err;
  Ending e = WaitGone(target_, 10s);
  EXPECT_TRUE(e.gone) << "the target still runs beside its committed checkpoint";
  ExpectUnharmed(dir, k, false, "killed with SIGKILL after the commit");
  EXPECT_EQ(committed_, 1);
}

// The dump and its guardian killed together (a SIGKILL aimed at both, or at a whole
// service's cgroup): the journal stays behind, and the next cairn does what the guardian
// would have — `cairn check --fix`, or the next dump, which must then find the process as
// it was (guardian.h, point 8).
TEST_F(DumpKillTest, DumpKilledWithItsGuardianIsPutBackByTheNextCairn) {
  std::string journals = dir_ / "journals";
  std::vector<std::string> env = {"CAIRN_JOURNAL_DIR=" + journals};
  struct Case {
    std::string stage;
    bool leave_running;
    bool by_next_dump;  // else by `cairn check --fix`
    bool track = false;
  };
  const std::vector<Case> cases = {{"injecting", true, false},     {"batch", true, true},
                                   {"scratch", true, false},       {"pages", false, false},
                                   {"socket_queue", false, true},  {"fds", true, false},
                                   {"tracker_created", true, false, true}, {"committed", false, false}};
  int n = 0;
  for (const Case& c : cases) {
    std::string what = "dump and guardian killed at stage " + c.stage + (c.leave_running ? " (--leave-running)" : "") +
                       (c.track ? " (--track)" : "") +
                       ", put back by " + (c.by_next_dump ? "the next dump" : "cairn check --fix");
    SCOPED_TRACE(what);
    auto t0 = Clock::now();
    std::string dir = dir_ / ("both-" + std::to_string(n++));
    std::vector<std::string> argv = {CairnBinary(), "dump", "--pid", std::to_string(target_), "--dir", dir};
    if (c.leave_running) argv.push_back("--leave-running");
    if (c.track) argv.push_back("--track");
    std::vector<std::string> dump_env = env;
    dump_env.push_back("CAIRN_FAULT_PAUSE=" + c.stage);
    pid_t dump = SpawnProgram(argv, dir_ / "empty", dir + ".out", dir + ".err", dump_env);
    auto deadline = Clock::now() + 60s;
    while (ReadFile(dir + ".err").find("fault point " + c.stage) == std::string::npos) {
      ASSERT_TRUE(IsAlive(dump)) << "the dump ended before the stage: " << ReadFile(dir + ".err");
      ASSERT_LT(Clock::now(), deadline) << "the dump never reached the stage";
      std::this_thread::sleep_for(5ms);
    }
    // (Its name is set by the guardian itself once forked: under load, a moment after the fork.)
    std::vector<pid_t> guardian = ChildrenNamed("cairn-guardian", dump);
    for (auto until = Clock::now() + 5s; guardian.empty() && Clock::now() < until;) {
      std::this_thread::sleep_for(5ms);
      guardian = ChildrenNamed("cairn-guardian", dump);
    }
    ASSERT_EQ(guardian.size(), 1u) << "the paused dump has no guardian";
    ::kill(guardian[0], SIGKILL);
    ::kill(dump, SIGKILL);
    ::waitpid(dump, nullptr, 0);
    for (auto until = Clock::now() + 10s; IsAlive(guardian[0]) && Clock::now() < until;) {
      ::waitpid(guardian[0], nullptr, WNOHANG);  // re-parented to this subreaper
      std::this_thread::sleep_for(5ms);
    }
    // Nothing was put back yet: the journal says so, and `cairn check` too.
    CommandResult listed = RunCommand({CairnBinary(), "check"}, dir_.path(), WithEnv(env));
    EXPECT_NE(listed.out.find("a dump and its guardian were killed"), std::string::npos) << listed.Describe();
    EXPECT_FALSE(listed.Exited(0)) << listed.Describe();
    auto t1 = Clock::now();
    if (c.by_next_dump) {
      std::string next = dir_ / ("next-" + std::to_string(n));
      CommandResult r = RunCommand({CairnBinary(), "dump", "--pid", std::to_string(target_), "--dir", next,
                                    "--leave-running"},
                                   dir_.path(), WithEnv(env));
      ASSERT_TRUE(r.Exited(0)) << "the next dump of the process: " << r.Describe();
      EXPECT_NE(r.err.find("orphan_repaired"), std::string::npos) << r.Describe();
      std::filesystem::remove_all(next);
    } else {
      CommandResult r = RunCommand({CairnBinary(), "check", "--fix"}, dir_.path(), WithEnv(env));
      EXPECT_NE(r.out.find("done what its guardian would have"), std::string::npos) << r.Describe();
    }
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(journals, ec)) {
      ADD_FAILURE() << "a journal is left: " << e.path();
    }
    Killed k;
    k.err = ReadFile(dir + ".err");
    auto t2 = Clock::now();
    ExpectUnharmed(dir, k, c.leave_running, what);
    std::printf("%s: killed in %lld ms, put back in %lld ms, checked in %lld ms\n", what.c_str(),
                static_cast<long long>((t1 - t0) / 1ms), static_cast<long long>((t2 - t1) / 1ms),
                static_cast<long long>((Clock::now() - t2) / 1ms));
    if (HasFatalFailure()) return;
    if (!IsAlive(target_)) {
      ADD_FAILURE() << what << ": no target left to go on with";
      return;
    }
  }
  EXPECT_EQ(committed_, 1) << "the dump killed after its commit, with its guardian, was not finished";
}

TEST_F(DumpKillTest, DumpKilledAtRandomInstantsLeavesTheProcessAsItWas) {
  // How long a whole dump takes here, to spread the instants over it.
  std::string probe = dir_ / "probe";
  auto t0 = Clock::now();
  CommandResult r = RunCommand({CairnBinary(), "dump", "--pid", std::to_string(target_), "--dir", probe, "--leave-running"},
                               dir_.path(), WithTimeout(300s));
  auto whole = std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - t0);
  ASSERT_TRUE(r.Exited(0)) << r.Describe();
  std::filesystem::remove_all(probe);
  ASSERT_EQ(AskTarget().rfind("PASS", 0), 0u);

  int runs = EnvInt("CAIRN_FAULT_RUNS", 16);
  std::mt19937 rng(static_cast<unsigned>(EnvInt("CAIRN_FAULT_SEED", static_cast<int>(::time(nullptr)))));
  std::uniform_int_distribution<int64_t> when(0, whole.count());
  int completed = 0;
  for (int i = 0; i < runs; ++i) {
    int sig = kAllSignals[i % kAllSignals.size()];
    bool leave_running = (i / kAllSignals.size()) % 2 == 0;
    auto delay = std::chrono::microseconds(when(rng));
    std::string dir = dir_ / ("random-" + std::to_string(i));
    Killed k = KillDump(dir, "", delay, sig, leave_running);
    if (k.exit_code == 0) ++completed;  // it finished before the signal
    std::string what = SignalName(sig) + " after " + std::to_string(delay.count() / 1000) + " ms of a " +
                       std::to_string(whole.count() / 1000) + " ms dump" + (leave_running ? " (--leave-running)" : "");
    // A dump done before the signal, or killed past its commit, left a complete checkpoint
    // (and, without --leave-running, no process): ExpectUnharmed restores it.
    ExpectUnharmed(dir, k, leave_running, what);
    if (HasFatalFailure()) return;
    if (!IsAlive(target_)) {
      ADD_FAILURE() << what << ": no target left to go on with";
      return;
    }
  }
  std::printf("faults: %d dumps of %d MiB killed at random instants over %lld ms: %d left the process as it was, %d "
              "committed first, %d finished before the signal\n",
              runs, mib_, static_cast<long long>(whole.count() / 1000), survived_, committed_, completed);
}

}  // namespace
}  // namespace cairn::testing
