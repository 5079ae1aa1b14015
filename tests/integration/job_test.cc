// `cairn run` jobs: started in their own PID and mount namespaces and cgroup, checkpointed
// with `dump --job`, restored into a fresh namespace, carrying on with the same PIDs
// as the job sees them.

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
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

// Runs `workload` as job `name` under `cairn run`, dumps it with `dump --job` once it is
// ready, restores it into a fresh namespace and lets it finish: it must PASS. `inspect_says`:
// a line `cairn inspect` must show for the checkpoint. `run_flags`: more options of `cairn run`.
void RoundTripJob(const std::string& name, const std::string& workload, const std::string& inspect_says = "",
                  const std::vector<std::string>& run_flags = {}) {
  TempDir tmp;
  std::string state = tmp / "state";
  std::string work = tmp / "work";
  ::mkdir(work.c_str(), 0755);
  CommandOptions env = WithEnv({"CAIRN_STATE_DIR=" + state});
  std::string comm = workload.substr(workload.rfind('/') + 1).substr(0, 15);

  std::vector<std::string> argv = {CairnBinary(), "run", "--name", name, "--dir", tmp / "job"};
  argv.insert(argv.end(), run_flags.begin(), run_flags.end());
  argv.insert(argv.end(), {"--", WorkloadPath(workload), work});
  CommandResult run = RunCommand(argv, tmp.path(), env);
  ASSERT_TRUE(run.Exited(0)) << run.Describe();
  ASSERT_TRUE(Matches(run.out, "job " + name + " pid [0-9]+")) << run.out;
  pid_t init = std::stoi(RecordField(state, name, "host_pid"));
  ASSERT_TRUE(WaitForFile(work + "/ready", 20s)) << ReadFile(tmp / "job/stderr.log");
  // The job's init is PID 1 of its own namespace.
  EXPECT_TRUE(Matches(NsPids(init), "NSpid:[[:space:]]+[0-9]+[[:space:]]+1$")) << NsPids(init);
  // And of its own time namespace (whose clocks a restore on another machine continues).
  auto time_ns = [](pid_t pid) { return std::filesystem::read_symlink("/proc/" + std::to_string(pid) + "/ns/time").string(); };
  EXPECT_NE(time_ns(init), time_ns(::getpid()));

  CommandResult dump = RunCommand({CairnBinary(), "dump", "--job", name, "--dir", tmp / "ckpt"}, tmp.path(), env);
  ASSERT_TRUE(dump.Exited(0)) << dump.Describe();
  EXPECT_TRUE(Matches(dump.out, "2 processes")) << dump.out;
  Ending gone = WaitGone(init, 10s);
  ASSERT_TRUE(gone.gone) << "the job's init still runs after the dump";

  CommandResult inspect = RunCommand({CairnBinary(), "inspect", tmp / "ckpt"}, tmp.path(), env);
  ASSERT_TRUE(inspect.Exited(0)) << inspect.Describe();
  EXPECT_TRUE(Matches(inspect.out, "process 1 \\(cairn-init\\)")) << inspect.out;
  EXPECT_TRUE(Matches(inspect.out, "descendant process 2 \\(" + comm + "\\), parent 1")) << inspect.out;
  if (!inspect_says.empty()) {
    EXPECT_TRUE(Matches(inspect.out, inspect_says)) << inspect.out;
  }

  CommandResult restore =
      RunCommand({CairnBinary(), "restore", "--verify", "--dir", tmp / "ckpt", "--detach"}, tmp.path(), env);
  ASSERT_TRUE(restore.Exited(0)) << restore.Describe();
  pid_t new_init = std::stoi(RecordField(state, name, "host_pid"));
  ASSERT_GT(new_init, 0);
  EXPECT_TRUE(IsAlive(new_init));
  EXPECT_TRUE(Matches(NsPids(new_init), "NSpid:[[:space:]]+[0-9]+[[:space:]]+1$")) << NsPids(new_init);
  EXPECT_NE(time_ns(new_init), time_ns(::getpid()));
  EXPECT_EQ(ReadFile("/proc/" + std::to_string(new_init) + "/timens_offsets"), ReadFile("/proc/self/timens_offsets"))
      << "restored on the boot it was checkpointed on: its offsets are kept";
  EXPECT_TRUE(Matches(ReadFile("/proc/" + std::to_string(new_init) + "/cgroup"), "freezer:/cairn/" + name));

  WriteFileAtomic(work + "/go", "");
  Ending end = WaitGone(new_init, 30s);
  EXPECT_TRUE(end.gone) << "the restored job did not finish";
  std::string out = ReadFile(tmp / "job/stdout.log");
  EXPECT_EQ(LastLine(out), "PASS") << out << ReadFile(tmp / "job/stderr.log");
}

// wl_threads: four threads holding registers and TLS across the checkpoint.
TEST(JobTest, RunDumpRestoreCarriesOnInAFreshNamespace) { RoundTripJob("t1", "wl_threads"); }

// A job started for a CPU baseline: glibc in it keeps to the level (the job's environment has
// the tunables; ld.so run in it says which glibc-hwcaps levels it searches), its checkpoint
// records the baseline, and it restores and finishes.
TEST(JobTest, AJobStartedForACpuBaselineKeepsToItAndRecordsIt) {
  TempDir tmp;
  CommandOptions env = WithEnv({"CAIRN_STATE_DIR=" + tmp / "state"});
  CommandResult run = RunCommand({CairnBinary(), "run", "--name", "cb0", "--dir", tmp / "job", "--cpu-baseline",
                                  "x86-64-v2", "--", "/lib64/ld-linux-x86-64.so.2", "--help"},
                                 tmp.path(), env);
  ASSERT_TRUE(run.Exited(0)) << run.Describe();
  pid_t init = std::stoi(RecordField(tmp / "state", "cb0", "host_pid"));
  WaitGone(init, 20s);
  std::string help = ReadFile(tmp / "job/stdout.log");
  EXPECT_TRUE(Matches(help, "x86-64-v2 \\(supported, searched\\)")) << help;
  EXPECT_FALSE(Matches(help, "x86-64-v3 \\(supported, searched\\)")) << help;
  CommandResult bad = RunCommand({CairnBinary(), "run", "--name", "cb1", "--cpu-baseline", "haswell", "--", "/bin/true"},
                                 tmp.path(), env);
  EXPECT_TRUE(bad.FailedCleanly()) << bad.Describe();
  EXPECT_TRUE(Matches(bad.err, "unknown CPU baseline 'haswell'")) << bad.err;

  RoundTripJob("cb2", "wl_threads", "the job keeps to x86-64-v2", {"--cpu-baseline", "x86-64-v2"});
}

// Files of the job's own /proc (its PID namespace's ids: /proc/2/status names pid 2) and its
// namespaces' descriptors: opened again by the restored process in its fresh namespace, they
// name it (the workloads compare them with getpid() and /proc/self/ns).
TEST(JobTest, ProcFilesAndNamespaceDescriptorsNameTheRestoredJob) {
  RoundTripJob("pf1", "wl_proc_self_files");
  RoundTripJob("ns1", "wl_ns_fds");
}

// Descriptors in flight name the processes that hold them by their ids inside the job's PID
// namespace, and those only the messages hold come back with them.
TEST(JobTest, DescriptorsInFlightComeBackInsideAJob) { RoundTripJob("scm1", "wl_scm_rights"); }

// `cairn run --user nobody`: the init and the command run as nobody (nothing of the job as root);
// `restore --as-user root` refuses the checkpoint, restoring nothing; `--as-user nobody` brings it
// back as nobody, and it finishes.
TEST(JobTest, RunAsAUserComesBackOnlyAsThatUser) {
  TempDir tmp;
  ASSERT_EQ(::chmod(tmp.path().c_str(), 0755), 0);
  std::string state = tmp / "state";
  std::string work = tmp / "work";
  ::mkdir(work.c_str(), 0777);
  ASSERT_EQ(::chmod(work.c_str(), 0777), 0);
  CommandOptions env = WithEnv({"CAIRN_STATE_DIR=" + state});
  auto uids = [](pid_t pid) { return LineStartingWith(ReadFile("/proc/" + std::to_string(pid) + "/status"), "Uid:"); };
  const std::string nobody = "Uid:\t65534\t65534\t65534\t65534";
  CommandResult run = RunCommand({CairnBinary(), "run", "--name", "u1", "--user", "nobody", "--dir", tmp / "job", "--",
                                  WorkloadPath("wl_threads"), work},
                                 tmp.path(), env);
  ASSERT_TRUE(run.Exited(0)) << run.Describe();
  pid_t init = std::stoi(RecordField(state, "u1", "host_pid"));
  ASSERT_TRUE(WaitForFile(work + "/ready", 20s)) << ReadFile(tmp / "job/stderr.log");
  EXPECT_EQ(uids(init), nobody) << "the job's init runs as root";
  std::string children = ReadFile("/proc/" + std::to_string(init) + "/task/" + std::to_string(init) + "/children");
  ASSERT_FALSE(children.empty());
  EXPECT_EQ(uids(std::stoi(children)), nobody);

  CommandResult dump = RunCommand({CairnBinary(), "dump", "--job", "u1", "--dir", tmp / "ckpt"}, tmp.path(), env);
  ASSERT_TRUE(dump.Exited(0)) << dump.Describe();
  ASSERT_TRUE(WaitGone(init, 10s).gone);

  CommandResult as_root = RunCommand({CairnBinary(), "restore", "--dir", tmp / "ckpt", "--detach", "--as-user", "root"},
                                     tmp.path(), env);
  EXPECT_TRUE(as_root.FailedCleanly()) << as_root.Describe();
  EXPECT_TRUE(Matches(as_root.err, "process 1 \\(cairn-init\\) of the checkpoint runs as uid 65534")) << as_root.err;
  EXPECT_TRUE(Matches(as_root.err, "only as user root")) << as_root.err;
  EXPECT_EQ(std::stoi(RecordField(state, "u1", "host_pid")), init) << "nothing was restored";

  CommandResult restore = RunCommand(
      {CairnBinary(), "restore", "--verify", "--dir", tmp / "ckpt", "--detach", "--as-user", "nobody"}, tmp.path(), env);
  ASSERT_TRUE(restore.Exited(0)) << restore.Describe();
  pid_t new_init = std::stoi(RecordField(state, "u1", "host_pid"));
  ASSERT_NE(new_init, init);
  EXPECT_EQ(uids(new_init), nobody);
  WriteFileAtomic(work + "/go", "");
  EXPECT_TRUE(WaitGone(new_init, 30s).gone) << "the restored job did not finish";
  EXPECT_EQ(LastLine(ReadFile(tmp / "job/stdout.log")), "PASS") << ReadFile(tmp / "job/stderr.log");
}

// System V shared memory, semaphores and message queues in the job's IPC namespace.
TEST(JobTest, SysvIpcObjectsComeBackWithTheirIds) {
  RoundTripJob("ipc1", "job/wl_job_sysv_ipc",
               "System V IPC \\(own namespace\\): 3 segments \\(1\\.0 MiB\\), 1 semaphore set, 1 message queue");
}

// PostgreSQL 15 from Debian, the real program: a server (postmaster and its background workers,
// shared memory from mmap and a System V segment, run as the postgres user) started as a job,
// given rows, checkpointed idle, killed and restored with --verify; a client then reads back the
// rows written before and writes more.
TEST(JobTest, PostgresServesItsRowsAfterRestore) {
  const std::string bin = "/usr/lib/postgresql/15/bin";
  if (!std::filesystem::exists(bin + "/postgres") || !std::filesystem::exists("/usr/bin/psql")) {
    GTEST_SKIP() << bin << "/postgres or psql is not installed (scripts/install-deps.sh installs postgresql)";
  }
  TempDir tmp;
  ::chmod(tmp.path().c_str(), 0755);  // the postgres user reaches its data directory and socket
  std::string state = tmp / "state", data = tmp / "pgdata", sockdir = tmp / "sock";
  ::mkdir(data.c_str(), 0700);
  ::mkdir(sockdir.c_str(), 0755);
  CommandResult chown = RunCommand({"/bin/chown", "postgres:postgres", data, sockdir}, tmp.path());
  ASSERT_TRUE(chown.Exited(0)) << chown.Describe();
  CommandResult initdb = RunCommand({"/usr/sbin/runuser", "-u", "postgres", "--", bin + "/initdb", "-D", data, "-A",
                                     "trust", "-U", "postgres"},
                                    tmp.path(), WithTimeout(120s));
  ASSERT_TRUE(initdb.Exited(0)) << initdb.Describe();
  CommandOptions env = WithEnv({"CAIRN_STATE_DIR=" + state});
  const std::string name = "pg" + std::to_string(::getpid());
  CommandResult run = RunCommand({CairnBinary(), "run", "--name", name, "--dir", tmp / "job", "--", "/usr/bin/setpriv",
                                  "--reuid=postgres", "--regid=postgres", "--init-groups", bin + "/postgres", "-D",
                                  data, "-k", sockdir, "-p", "15432", "-c", "listen_addresses="},
                                 tmp.path(), env);
  ASSERT_TRUE(run.Exited(0)) << run.Describe();
  pid_t init = std::stoi(RecordField(state, name, "host_pid"));
  auto sql = [&](const std::string& query) {
    CommandResult r = RunCommand({"/usr/bin/psql", "-h", sockdir, "-p", "15432", "-U", "postgres", "-d", "postgres",
                                  "-Atq", "-c", query},
                                 tmp.path(), WithTimeout(20s));
    return r.Exited(0) ? r.out : "ERROR: " + r.Describe();
  };
  auto deadline = std::chrono::steady_clock::now() + 30s;
  while (sql("select 1") != "1\n" && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(100ms);
  ASSERT_EQ(sql("select 1"), "1\n") << ReadFile(tmp / "job/stderr.log");
  ASSERT_EQ(sql("create table t(a int); insert into t select generate_series(1, 2000); select count(*), sum(a) from t"),
            "2000|2001000\n");
  std::this_thread::sleep_for(500ms);  // idle: its backend for the client gone

  CommandResult dump = RunCommand({CairnBinary(), "dump", "--job", name, "--dir", tmp / "ckpt"}, tmp.path(), env);
  ASSERT_TRUE(dump.Exited(0)) << dump.Describe();
  ASSERT_TRUE(WaitGone(init, 10s).gone) << "the job's init still runs after the dump";
  CommandResult restore =
      RunCommand({CairnBinary(), "restore", "--verify", "--dir", tmp / "ckpt", "--detach"}, tmp.path(), env);
  ASSERT_TRUE(restore.Exited(0)) << restore.Describe();
  pid_t new_init = std::stoi(RecordField(state, name, "host_pid"));
  EXPECT_EQ(sql("select count(*), sum(a) from t"), "2000|2001000\n");
  EXPECT_EQ(sql("insert into t values (7); select count(*) from t"), "2001\n");
  ::kill(new_init, SIGTERM);  // forwarded by the job's init: a smart shutdown
  EXPECT_TRUE(WaitGone(new_init, 30s).gone) << "the restored server did not shut down";
}

// A process attached to a System V segment of the machine's own IPC namespace is refused.
TEST(JobTest, SysvSegmentOutsideAJobIsRefused) {
  TempDir tmp;
  std::string work = tmp / "work";
  ::mkdir(work.c_str(), 0755);
  pid_t pid = SpawnProgram({WorkloadPath("job/wl_job_sysv_ipc"), work}, "/dev/null", tmp / "out", tmp / "err");
  ASSERT_GT(pid, 0);
  ASSERT_TRUE(WaitForFile(work + "/ready", 20s)) << ReadFile(tmp / "err");
  CommandResult dump = RunCommand({CairnBinary(), "dump", "--pid", std::to_string(pid), "--dir", tmp / "ckpt"},
                                  tmp.path());
  EXPECT_TRUE(dump.FailedCleanly()) << dump.Describe();
  EXPECT_TRUE(Matches(dump.err, "System V shared memory segment [0-9]+ attached")) << dump.err;
  EXPECT_TRUE(Matches(dump.err, "cairn run")) << dump.err;
  EXPECT_FALSE(Exists(tmp / "ckpt"));
  EXPECT_TRUE(IsAlive(pid)) << "the refused process does not run any more";
  WriteFileAtomic(work + "/go", "");
  Ending end = WaitGone(pid, 10s);
  EXPECT_TRUE(end.ExitedWith(0)) << end.Describe() << ReadFile(tmp / "out");
  // Its objects live in the machine's namespace: remove them.
  for (const char* key : {"0x4341", "0x4342"}) RunCommand({"/usr/bin/ipcrm", "-M", key}, tmp.path());
  RunCommand({"/usr/bin/ipcrm", "-S", "0x4343"}, tmp.path());
  RunCommand({"/usr/bin/ipcrm", "-Q", "0x4344"}, tmp.path());
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
