// `cairn run` jobs: started in their own PID and mount namespaces and cgroup, checkpointed
// with `dump --job`, restored into a fresh namespace, carrying on with the same PIDs
// as the job sees them.

#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <thread>

#include "gtest/gtest.h"
#include "harness.h"

namespace cairn::testing {
namespace {

using namespace std::chrono_literals;

// The key=value record `cairn run` keeps for a job.
std::string RecordField(const std::string& state_dir, const std::string& name, const std::string& key) {
  std::string text = ReadFile(state_dir + "/jobs/" + name + ".job");
  return LineStartingWith(text, key + "=").substr(key.size() + 1);
}

// The job's ids inside its namespace, from the host's /proc status of `host_pid`.
std::string NsPids(pid_t host_pid) {
  return LineStartingWith(ReadFile("/proc/" + std::to_string(host_pid) + "/status"), "NSpid:");
}

bool WaitForFile(const std::string& path, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (Exists(path)) return true;
    std::this_thread::sleep_for(20ms);
  }
  return false;
}

TEST(JobTest, RunDumpRestoreCarriesOnInAFreshNamespace) {
  TempDir tmp;
  std::string state = tmp / "state";
  std::string work = tmp / "work";
  ::mkdir(work.c_str(), 0755);
  CommandOptions env = WithEnv({"CAIRN_STATE_DIR=" + state});

  // wl_threads: four threads holding registers and TLS across the checkpoint.
  CommandResult run = RunCommand({CairnBinary(), "run", "--name", "t1", "--dir", tmp / "job", "--",
                                  WorkloadPath("wl_threads"), work},
                                 tmp.path(), env);
  ASSERT_TRUE(run.Exited(0)) << run.Describe();
  ASSERT_TRUE(Matches(run.out, "job t1 pid [0-9]+")) << run.out;
  pid_t init = std::stoi(RecordField(state, "t1", "host_pid"));
  ASSERT_TRUE(WaitForFile(work + "/ready", 20s)) << ReadFile(tmp / "job/stderr.log");
  // The job's init is PID 1 of its own namespace.
  EXPECT_TRUE(Matches(NsPids(init), "NSpid:[[:space:]]+[0-9]+[[:space:]]+1$")) << NsPids(init);

  CommandResult dump = RunCommand({CairnBinary(), "dump", "--job", "t1", "--dir", tmp / "ckpt"}, tmp.path(), env);
  ASSERT_TRUE(dump.Exited(0)) << dump.Describe();
  EXPECT_TRUE(Matches(dump.out, "2 processes")) << dump.out;
  Ending gone = WaitGone(init, 10s);
  ASSERT_TRUE(gone.gone) << "the job's init still runs after the dump";

  CommandResult inspect = RunCommand({CairnBinary(), "inspect", tmp / "ckpt"}, tmp.path(), env);
  ASSERT_TRUE(inspect.Exited(0)) << inspect.Describe();
  EXPECT_TRUE(Matches(inspect.out, "process 1 \\(cairn-init\\)")) << inspect.out;
  EXPECT_TRUE(Matches(inspect.out, "descendant process 2 \\(wl_threads\\), parent 1")) << inspect.out;

  CommandResult restore = RunCommand({CairnBinary(), "restore", "--dir", tmp / "ckpt", "--detach"}, tmp.path(), env);
  ASSERT_TRUE(restore.Exited(0)) << restore.Describe();
  pid_t new_init = std::stoi(RecordField(state, "t1", "host_pid"));
  ASSERT_GT(new_init, 0);
  EXPECT_TRUE(IsAlive(new_init));
  EXPECT_TRUE(Matches(NsPids(new_init), "NSpid:[[:space:]]+[0-9]+[[:space:]]+1$")) << NsPids(new_init);
  EXPECT_TRUE(Matches(ReadFile("/proc/" + std::to_string(new_init) + "/cgroup"), "freezer:/cairn/t1"));

  WriteFileAtomic(work + "/go", "");
  Ending end = WaitGone(new_init, 30s);
  EXPECT_TRUE(end.gone) << "the restored job did not finish";
  std::string out = ReadFile(tmp / "job/stdout.log");
  EXPECT_EQ(LastLine(out), "PASS") << out << ReadFile(tmp / "job/stderr.log");
}

TEST(JobTest, DumpOfAnUnknownJobFailsClearly) {
  TempDir tmp;
  CommandResult dump = RunCommand({CairnBinary(), "dump", "--job", "no-such-job", "--dir", tmp / "ckpt"}, tmp.path(),
                                  WithEnv({"CAIRN_STATE_DIR=" + (tmp / "state")}));
  EXPECT_TRUE(dump.FailedCleanly()) << dump.Describe();
  EXPECT_TRUE(Matches(dump.err, "no job named 'no-such-job'")) << dump.err;
  EXPECT_FALSE(Exists(tmp / "ckpt"));
}

TEST(JobTest, InvalidJobNameIsRefused) {
  TempDir tmp;
  CommandResult run = RunCommand({CairnBinary(), "run", "--name", "../escape", "--", "/bin/true"}, tmp.path(),
                                 WithEnv({"CAIRN_STATE_DIR=" + (tmp / "state")}));
  EXPECT_TRUE(run.FailedCleanly()) << run.Describe();
  EXPECT_TRUE(Matches(run.err, "invalid job name")) << run.err;
}

}  // namespace
}  // namespace cairn::testing
