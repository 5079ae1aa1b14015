// SLURM with cairn (src/integrations/slurm/): a real slurmctld and three slurmd on this host
// (tests/slurm/cluster.sh: nodes n1..n3, partitions low and high, PreemptMode=REQUEUE), one
// cairnd per SLURM node sharing a directory store and an image key, and batch jobs submitted with
// --cairn through the SPANK plugin (cairn_spank.so). The jobs run hash_steps.py: their output
// must end with the digest an uninterrupted run prints, and a job that came back from a
// checkpoint must not compute its first steps again.
#include <sys/mount.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>

#include <chrono>
#include <filesystem>
#include <memory>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "daemon_harness.h"
#include "integrations/slurm/scontrol.h"

namespace cairn::testing {
namespace {

using namespace std::chrono_literals;

constexpr char kSteps[] = "900";
constexpr char kPerStep[] = "100000";

// The cluster, its cairnds and the store, shared by the tests of this file (a start takes ~10 s).
struct Cluster {
  std::unique_ptr<TempDir> dir;
  std::string slurm, shared, jobs, conf, scratch;
  std::vector<std::unique_ptr<DaemonProcess>> cairnd;  // n1, n2, n3
  std::map<std::string, std::string> expected;         // steps -> the digest line of an uninterrupted run
  std::string failure;                                 // why the cluster could not be started
};
Cluster* g = nullptr;

CommandResult Slurm(const std::vector<std::string>& argv, std::chrono::milliseconds timeout = 60s) {
  return RunCommand(argv, g->scratch, CommandOptions{{"SLURM_CONF=" + g->conf}, timeout, std::nullopt});
}

CommandResult ClusterScript(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {"/bin/bash", CLUSTER_SH};
  argv.insert(argv.end(), args.begin(), args.end());
  return RunCommand(argv, g->dir->path(), CommandOptions{{"GRACE_TIME=4", "KILL_WAIT=30"}, 120s, std::nullopt});
}

// `scontrol show job J` as KEY=VALUE pairs.
// `scontrol show job J` as KEY=VALUE pairs (the agent's own reader; SLURM_CONF is this
// process's, set when the cluster starts); none when scontrol fails.
std::map<std::string, std::string> ShowJob(const std::string& id) {
  return slurm::ScontrolShow("job", id).value_or(std::map<std::string, std::string>{});
}

class SlurmTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    g = new Cluster;
    if (::access("/usr/sbin/slurmctld", X_OK) != 0 || ::access("/usr/sbin/munged", X_OK) != 0) {
      g->failure = "SLURM is not installed (apt install slurmctld slurmd slurm-client munge)";
      return;
    }
    g->dir = std::make_unique<TempDir>();
    g->slurm = g->dir->path() + "/slurm";
    g->shared = g->dir->path() + "/store";
    g->jobs = g->dir->path() + "/jobs";
    g->conf = g->slurm + "/slurm.conf";
    g->scratch = g->dir->path() + "/scratch";  // the output files of the many scontrol calls
    for (const std::string& d : {g->slurm, g->shared, g->jobs, g->scratch}) std::filesystem::create_directories(d);
    // The shared store: a tmpfs of its own, so that a test can fill it.
    if (::mount("cairn-store", g->shared.c_str(), "tmpfs", 0, "size=64m,mode=0700") != 0) {
      g->failure = "cannot mount a tmpfs for the store: " + std::string(std::strerror(errno));
      return;
    }
    std::string key = g->dir->path() + "/image.key";
    // One image key for the cluster: a checkpoint one node seals, another restores.
    CommandResult k = RunCommand({"/bin/sh", "-c", "od -An -tx1 -N32 /dev/urandom | tr -d ' \\n' > " + key + " && chmod 0600 " + key},
                                 g->dir->path());
    if (!k.Exited(0)) {
      g->failure = "cannot make the image key: " + k.Describe();
      return;
    }
    for (const char* n : {"n1", "n2", "n3"}) {
      g->cairnd.push_back(std::make_unique<DaemonProcess>(
          g->dir->path(), n, std::vector<std::string>{"--storage", "dir:" + g->shared, "--image-key", key}));
      ::testing::AssertionResult started = g->cairnd.back()->Start();
      if (!started) {
        g->failure = started.message();
        return;
      }
    }
    // cairnd's node is nX-SUFFIX: the plugin names the socket of SLURM node %n.
    std::string suffix = g->cairnd[0]->node().substr(2);
    std::string plug = absl::StrCat("required ", CAIRN_SPANK, " cairn=", CAIRN_BIN, " socket=", g->dir->path(), "/%n",
                                    suffix, ".sock");
    ::setenv("SLURM_CONF", g->conf.c_str(), 1);  // for ScontrolShow
    CommandResult r = ClusterScript({"start", g->slurm, plug});
    if (!r.Exited(0)) {
      g->failure = "cluster.sh start: " + r.Describe();
      return;
    }
  }

  static void TearDownTestSuite() {
    if (g->dir != nullptr) {
      for (auto& d : g->cairnd) d->KillJobs();
      ClusterScript({"stop", g->slurm});
      g->cairnd.clear();
      ::umount2(g->shared.c_str(), MNT_DETACH);
    }
    delete g;
    g = nullptr;
  }

  void SetUp() override {
    if (!g->failure.empty()) GTEST_FAIL() << g->failure;
  }

  // The digest line of an uninterrupted run of `steps` steps.
  static std::string Expected(const std::string& steps = kSteps) {
    if (!g->expected.count(steps)) {
      CommandResult plain =
          RunCommand({"/usr/bin/python3", HASH_STEPS, steps, kPerStep}, g->scratch, WithTimeout(300s));
      size_t at = plain.out.rfind("digest ");
      g->expected[steps] = at == std::string::npos ? "(no digest: " + plain.Describe() + ")" : plain.out.substr(at);
    }
    return g->expected[steps];
  }

  // Submits hash_steps.py (`steps` steps) as a batch job with `flags` (or, with `script_job`
  // false, what flags say: --wrap); returns its id ("" on failure).
  std::string Submit(const std::string& name, const std::vector<std::string>& flags, bool script_job = true,
                     const std::string& steps = kSteps) {
    std::string script = g->jobs + "/" + name + ".sh";
    WriteFile(script, absl::StrCat("#!/bin/bash\nexec /usr/bin/python3 -u ", HASH_STEPS, " ", steps, " ", kPerStep,
                                   "\n"));
    ::chmod(script.c_str(), 0755);
    // --open-mode=append: the output of every start stays, so that the test sees where each began.
    std::vector<std::string> argv = {"/usr/bin/sbatch", "--parsable",    "-J", name, "-o", Output(name),
                                     "-D",              g->jobs,         "--open-mode=append"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    if (script_job) argv.push_back(script);
    CommandResult r = Slurm(argv);
    EXPECT_TRUE(r.Exited(0)) << r.Describe();
    return std::string(absl::StripAsciiWhitespace(r.out));
  }
  std::string Output(const std::string& name) { return g->jobs + "/" + name + ".out"; }

  // Waits until the job's output shows step `n`.
  ::testing::AssertionResult WaitStep(const std::string& name, int n, std::chrono::milliseconds timeout = 120s) {
    if (WaitFor([&] { return LastStep(ReadFile(Output(name))) >= n; }, timeout)) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << "job " << name << " did not reach step " << n << ":\n"
                                         << ReadFile(Output(name));
  }

  // The complete checkpoints cairnd `d` keeps of job `job` (0 while it does not know the job).
  static int Checkpoints(const DaemonProcess& d, const std::string& job) {
    CommandResult r = d.Cairn({"job", "show", job, "--json"});
    nlohmann::json j = nlohmann::json::parse(r.out, nullptr, false);
    return r.Exited(0) && !j.is_discarded() ? j["job"].value("checkpoints", 0) : 0;
  }

  // The checkpoints of SLURM job `id` (user root; its batch script, or `step` ".STEP.TASK") in the
  // shared store, whichever node put them there.
  static int Stored(const std::string& id, const std::string& step = "") {
    std::error_code ec;
    int n = 0;
    for (const auto& e : std::filesystem::directory_iterator(g->shared + "/slurm-" + id + step + "-u0", ec)) {
      if (!absl::EndsWith(e.path().string(), ".partial")) ++n;
    }
    return n;
  }

  // Job `id` (output `name`) was ended by SLURM for good, for `why`: its output says so, no
  // checkpoint was taken at the stop, and the store holds none of it.
  void EndedForGood(const std::string& name, const std::string& id, const std::string& why) {
    std::string out;
    EXPECT_TRUE(WaitFor(
        [&] {
          out = ReadFile(Output(name));
          return absl::StrContains(out, "(" + why + ") and will not start it again");
        },
        30s))
        << out;
    EXPECT_EQ(out.find("checkpointing it first"), std::string::npos) << out;
    EXPECT_TRUE(WaitFor([&] { return Stored(id) == 0; }, 30s)) << Stored(id) << " checkpoint(s) left in the store";
  }

  // The cairnd of SLURM node nX.
  static DaemonProcess& Cairnd(const std::string& node) { return *g->cairnd[node[1] - '1']; }

  // Submits a job of the high partition that needs all of `node`: SLURM preempts the low job
  // there (REQUEUE) and sends it SIGTERM once its grace time is over.
  std::string Preempt(const std::string& node) {
    return Submit("preemptor-" + node, {"-p", "high", "-w", node, "-c", "2", "--wrap", "sleep 2"}, false);
  }

  // Waits until job `id` is in `state` (RUNNING, COMPLETED...); the failure says where it is.
  ::testing::AssertionResult WaitJob(const std::string& id, const std::string& state,
                                     std::chrono::milliseconds timeout = 120s) {
    std::string last;
    bool ok = WaitFor(
        [&] {
          last = ShowJob(id)["JobState"];
          return last == state;
        },
        timeout);
    if (ok) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << "job " << id << " is " << last << ", not " << state << "\n"
                                         << Slurm({"/usr/bin/scontrol", "show", "job", id}).out;
  }

  // The steps the job's output shows, in order (each start of the job appends its own).
  static std::vector<int> Steps(const std::string& out) {
    std::vector<int> steps;
    for (absl::string_view line : absl::StrSplit(out, '\n')) {
      std::vector<absl::string_view> f = absl::StrSplit(line, ' ');
      int step = 0;
      if (f.size() == 3 && f[0] == "step" && absl::SimpleAtoi(f[1], &step)) steps.push_back(step);
    }
    return steps;
  }
  static int LastStep(const std::string& out) {
    std::vector<int> s = Steps(out);
    return s.empty() ? 0 : s.back();
  }
  // Where the job's second start went on from: {the last step of the first start, the first of
  // the second}, split where the agent says it restored the job (or, without that, where the
  // steps begin again); {-1, -1} when it started only once.
  static std::pair<int, int> Restart(const std::string& out) {
    int before = 0, after = -1;
    bool restored = false;
    std::vector<int> steps;
    for (absl::string_view line : absl::StrSplit(out, '\n')) {
      if (absl::StrContains(line, "restored on node")) restored = true;
      std::vector<absl::string_view> f = absl::StrSplit(line, ' ');
      int step = 0;
      if (f.size() != 3 || f[0] != "step" || !absl::SimpleAtoi(f[1], &step)) continue;
      if (!restored && !steps.empty() && step <= steps.back()) restored = true;  // began again
      if (restored && after < 0) after = step;
      if (!restored) before = step;
      steps.push_back(step);
    }
    return after < 0 ? std::pair<int, int>{-1, -1} : std::pair<int, int>{before, after};
  }
  // The job's output ends with the uninterrupted run's digest, and its second start went on from
  // a checkpoint at most `max_lost` steps behind where the first start stopped.
  static ::testing::AssertionResult CameBackRight(const std::string& out, int max_lost,
                                                  const std::string& steps = kSteps) {
    if (out.find(Expected(steps)) == std::string::npos) {
      return ::testing::AssertionFailure() << "no " << Expected(steps) << " in the output:\n" << out;
    }
    auto [stopped_at, went_on_at] = Restart(out);
    if (went_on_at < 0) return ::testing::AssertionFailure() << "the job did not start twice:\n" << out;
    // Nothing lost either: every step from the restored one on reached the output.
    if (went_on_at == 1 || stopped_at - (went_on_at - 1) > max_lost || went_on_at > stopped_at + 1) {
      return ::testing::AssertionFailure() << "the first start stopped at step " << stopped_at
                                           << " and the second began at step " << went_on_at << ":\n" << out;
    }
    return ::testing::AssertionSuccess();
  }
};

// SLURM's own preemption path: SIGTERM once the grace time is over (slurmctld notices that up
// to 30 s late), SIGKILL KillWait later; SLURM requeues the job. Its job runs 1500 steps (about a
// minute) so that it is still running then.
TEST_F(SlurmTest, APreemptedJobComesBackFromItsCheckpointAndFinishesWithTheRightResult) {
  const std::string steps = "1500";
  std::string low = Submit("preempted", {"-p", "low", "-w", "n1", "-c", "2", "--requeue", "--cairn=10m"}, true, steps);
  ASSERT_FALSE(low.empty());
  ASSERT_TRUE(WaitStep("preempted", 10)) << ReadFile(g->slurm + "/slurmd-n1.log");
  // Its agent checkpoints it and stops it at the SIGTERM.
  std::string high = Preempt("n1");
  ASSERT_TRUE(WaitJob(low, "COMPLETED", 400s)) << ReadFile(Output("preempted"));
  EXPECT_EQ(ShowJob(low)["Restarts"], "1");
  std::string out = ReadFile(Output("preempted"));
  // Its only checkpoint was the one at the preemption (the periodic ones are 10 minutes apart):
  // what it lost is the steps between that checkpoint and the stop, none.
  EXPECT_TRUE(CameBackRight(out, 1, steps));
  EXPECT_NE(out.find("checkpointed ("), std::string::npos) << out;
  EXPECT_NE(out.find("restored on node"), std::string::npos) << out;
  EXPECT_TRUE(WaitJob(high, "COMPLETED", 120s));
  EXPECT_EQ(Stored(low), 0) << "a job that finished leaves no checkpoint in the store";
}

// A plain batch script whose work is an srun step under cairn (`srun --cairn`): SLURM sends the
// step SIGTERM at the start of the grace time; its agent checkpoints the step and requeues the
// job; the script runs again, and its first step, the same step id, comes back from that
// checkpoint (job slurm-JOB.0.0) instead of starting over.
TEST_F(SlurmTest, AnSrunStepOfAPlainScriptComesBackFromItsCheckpointWhenTheScriptRunsAgain) {
  const std::string steps = "1500";
  std::string low = Submit("step", {"-p", "low", "-w", "n1", "-c", "2", "--requeue", "--wrap",
                                    absl::StrCat("echo script start; srun --cairn=10m -n1 /usr/bin/python3 -u ",
                                                 HASH_STEPS, " ", steps, " ", kPerStep)},
                           false);
  ASSERT_FALSE(low.empty());
  ASSERT_TRUE(WaitStep("step", 10)) << ReadFile(g->slurm + "/slurmd-n1.log");
  EXPECT_TRUE(Cairnd("n1").Cairn({"job", "show", "slurm-" + low + ".0.0-u0"}).Exited(0))
      << "the step runs as a job of its own";
  std::string high = Preempt("n1");
  ASSERT_TRUE(WaitJob(low, "COMPLETED", 400s)) << ReadFile(Output("step"));
  std::string out = ReadFile(Output("step"));
  EXPECT_NE(ShowJob(low)["Restarts"], "0");
  EXPECT_TRUE(CameBackRight(out, 1, steps));
  EXPECT_NE(out.find("checkpointed ("), std::string::npos) << out;
  EXPECT_EQ(Stored(low, ".0.0"), 0);
  EXPECT_TRUE(WaitJob(high, "COMPLETED", 120s));
}

// The same requeue (scontrol requeue: at once) of a job without --cairn and of one with it.
TEST_F(SlurmTest, AJobWithoutCairnIsLeftAloneAndARequeueStartsItOverWhereACairnJobGoesOn) {
  std::string plain = Submit("plain", {"-p", "low", "-w", "n1", "-c", "1", "--requeue"});
  std::string cairn = Submit("cairn", {"-p", "low", "-w", "n1", "-c", "1", "--requeue", "--cairn=10m"});
  ASSERT_TRUE(WaitStep("plain", 50));
  ASSERT_TRUE(WaitStep("cairn", 50));
  // The plugin did nothing for the plain one: no cairnd knows it; its output names no cairn.
  for (auto& d : g->cairnd) EXPECT_FALSE(d->Cairn({"job", "show", "slurm-" + plain + "-u0"}).Exited(0)) << d->node();
  EXPECT_TRUE(Cairnd("n1").Cairn({"job", "show", "slurm-" + cairn + "-u0"}).Exited(0));
  for (const std::string& id : {plain, cairn}) {
    CommandResult r = Slurm({"/usr/bin/scontrol", "requeue", id});
    EXPECT_TRUE(r.Exited(0)) << r.Describe();
  }
  ASSERT_TRUE(WaitJob(plain, "COMPLETED", 300s)) << ReadFile(Output("plain"));
  ASSERT_TRUE(WaitJob(cairn, "COMPLETED", 300s)) << ReadFile(Output("cairn"));
  std::string out = ReadFile(Output("plain"));
  EXPECT_NE(out.find(Expected()), std::string::npos) << out;
  EXPECT_EQ(out.find("cairn"), std::string::npos) << out;
  // SLURM alone starts a requeued job over: its second start began at step 1.
  EXPECT_EQ(Restart(out).second, 1) << out;
  EXPECT_FALSE(CameBackRight(out, 1));
  EXPECT_TRUE(CameBackRight(ReadFile(Output("cairn")), 1));
}

TEST_F(SlurmTest, AJobWhoseNodeDiesComesBackOnAnotherNodeFromItsNewestPeriodicCheckpoint) {
  std::string id = Submit("lost", {"-p", "low", "-c", "2", "--requeue", "--cairn=2s"});
  ASSERT_TRUE(WaitJob(id, "RUNNING"));
  std::string node = ShowJob(id)["BatchHost"];
  ASSERT_TRUE(node == "n1" || node == "n2" || node == "n3") << node;
  DaemonProcess& d = Cairnd(node);
  // Its node's cairnd has stored a periodic checkpoint of it.
  ASSERT_TRUE(WaitFor([&] { return Checkpoints(d, "slurm-" + id + "-u0") >= 1; }, 60s)) << d.RunLog();
  ASSERT_TRUE(WaitStep("lost", 100));
  // The machine dies: its slurmd and slurmstepds (the job's agent with them), its cairnd, the
  // job's processes — the agent first, so that nothing of the node outlives another part.
  std::vector<pid_t> job_pids;
  nlohmann::json jobs = d.Json({"job", "list"});
  for (const auto& j : jobs["jobs"]) {
    if (j.value("state", "") == "running") job_pids.push_back(j["host_pid"].get<int>());
  }
  CommandResult killed = ClusterScript({"kill-node", g->slurm, node});
  ASSERT_TRUE(killed.Exited(0)) << killed.Describe();
  d.Kill(SIGKILL);
  d.Wait();
  for (pid_t pid : job_pids) ::kill(pid, SIGKILL);
  // SLURM marks the node down (SlurmdTimeout) and requeues the job elsewhere; its agent there
  // restores the newest checkpoint in the store.
  EXPECT_TRUE(WaitJob(id, "COMPLETED", 300s)) << ReadFile(Output("lost"));
  std::string out = ReadFile(Output("lost"));
  EXPECT_NE(ShowJob(id)["BatchHost"], node);
  // Checkpoints every 2 s: it lost at most the steps of a few seconds (40 ms each).
  EXPECT_TRUE(CameBackRight(out, 250));
  EXPECT_NE(out.find("restored on node"), std::string::npos) << out;
  EXPECT_EQ(Stored(id), 0) << "finished, it leaves none of its checkpoints in the store, the lost node's included";
  // The node comes back for the other tests.
  CommandResult back = ClusterScript({"start-node", g->slurm, node});
  EXPECT_TRUE(back.Exited(0)) << back.Describe();
  EXPECT_TRUE(d.Start());
  EXPECT_TRUE(WaitFor([&] { return ShowJob(id).count("JobState") == 0 ||
                                  Slurm({"/usr/bin/sinfo", "-h", "-n", node, "-o", "%t"}).out.find("idle") == 0; },
                      120s));
}

// A job SLURM ends for good (scancel; past its time limit, scontrol says Reason=TimeLimit and it
// takes the same way): stopped at the SIGTERM without a checkpoint, and every checkpoint of it
// removed from the store (a new submission is another job: nothing could restore them). Its
// allocation (-c 1 --mem=300M) is its cairnd job's CPU and memory limits.
TEST_F(SlurmTest, AScancelledJobStopsWithoutACheckpointAndLeavesNoneInTheStore) {
  std::string id = Submit("cancelled", {"-p", "low", "-w", "n2", "-c", "1", "--mem=300M", "--requeue", "--cairn=2s"});
  ASSERT_FALSE(id.empty());
  ASSERT_TRUE(WaitStep("cancelled", 20));
  // What SLURM allocated is the cairnd job's limits (its processes are in cairnd's cgroups): its
  // CPU and its memory (this cluster allocates memory: SelectTypeParameters=CR_CPU_Memory), the
  // latter as the job's memory cgroup enforces it.
  nlohmann::json limits = Cairnd("n2").Json({"job", "show", "slurm-" + id + "-u0"})["job"]["spec"]["limits"];
  EXPECT_EQ(limits.value("cpus", 0.0), 1.0) << limits.dump();
  EXPECT_EQ(limits.value("memory_bytes", int64_t{0}), int64_t{300} << 20) << limits.dump();
  std::string cap = "/sys/fs/cgroup/memory/cairn/" + Cairnd("n2").node() + ".slurm-" + id + "-u0/memory.limit_in_bytes";
  EXPECT_EQ(ReadFile(cap), std::to_string(int64_t{300} << 20) + "\n") << cap;
  ASSERT_TRUE(WaitFor([&] { return Stored(id) >= 1; }, 60s)) << "no periodic checkpoint reached the store";
  CommandResult r = Slurm({"/usr/bin/scancel", id});
  ASSERT_TRUE(r.Exited(0)) << r.Describe();
  ASSERT_TRUE(WaitJob(id, "CANCELLED", 120s));
  EndedForGood("cancelled", id, "cancelled");
  EXPECT_FALSE(Cairnd("n2").Cairn({"job", "show", "slurm-" + id + "-u0"}).Exited(0)) << "its record on the node is gone";
}

TEST_F(SlurmTest, WhenTheCheckpointAtTheStopFailsTheJobGoesOnFromItsPreviousOneAndItsOutputSaysSo) {
  // --signal=B:TERM (with preempt_send_user_signal): SIGTERM when SLURM decides to preempt, not at
  // the end of the grace time; the agent requeues the job itself.
  std::string id = Submit("full", {"-p", "low", "-w", "n1", "-c", "2", "--requeue", "--cairn=3s", "--signal=B:TERM"});
  DaemonProcess& d = Cairnd("n1");
  ASSERT_TRUE(WaitFor([&] { return Checkpoints(d, "slurm-" + id + "-u0") >= 1; }, 60s)) << d.RunLog();
  ASSERT_TRUE(WaitStep("full", 60));
  // The store fills up: the checkpoint at the stop cannot be stored.
  std::string filler = g->shared + "/filler";
  CommandResult fill = RunCommand({"/bin/sh", "-c", "cat /dev/zero > " + filler + "; sync"}, g->scratch, WithTimeout(60s));
  std::string high = Preempt("n1");
  ASSERT_TRUE(WaitFor([&] { return ReadFile(Output("full")).find("failed") != std::string::npos; }, 120s))
      << ReadFile(Output("full"));
  std::filesystem::remove(filler);
  ASSERT_TRUE(WaitJob(id, "COMPLETED", 300s)) << ReadFile(Output("full"));
  std::string out = ReadFile(Output("full"));
  EXPECT_NE(out.find("the checkpoint at the stop failed"), std::string::npos) << out;
  EXPECT_NE(out.find("No space left on device"), std::string::npos) << out;
  // It went on from the periodic checkpoint before (taken every 3 s: at most ~100 steps back).
  EXPECT_TRUE(CameBackRight(out, 200));
  EXPECT_TRUE(WaitJob(high, "COMPLETED", 120s));
}

TEST_F(SlurmTest, CairnSlurmMigrateMovesARunningJobToTheNodeItNames) {
  std::string id = Submit("moved", {"-p", "low", "-w", "n2", "-c", "1", "--requeue", "--cairn=10m"});
  ASSERT_TRUE(WaitStep("moved", 20));
  CommandResult r = Slurm({CAIRN_BIN, "slurm", "migrate", id, "--to", "n3"}, 300s);
  ASSERT_TRUE(r.Exited(0)) << r.Describe() << ReadFile(Output("moved"));
  EXPECT_NE(r.out.find("moved from node n2 to node n3"), std::string::npos) << r.out;
  EXPECT_EQ(ShowJob(id)["BatchHost"], "n3");
  ASSERT_TRUE(WaitJob(id, "COMPLETED", 300s)) << ReadFile(Output("moved"));
  std::string out = ReadFile(Output("moved"));
  EXPECT_TRUE(CameBackRight(out, 1));
  EXPECT_NE(out.find("restored on node"), std::string::npos) << out;
  // A job that does not run is refused, naming its state.
  CommandResult again = Slurm({CAIRN_BIN, "slurm", "migrate", id, "--to", "n1"});
  EXPECT_TRUE(again.FailedCleanly()) << again.Describe();
  EXPECT_NE(again.err.find("not RUNNING"), std::string::npos) << again.err;
}

// sbatch --signal=B:USR1@T: SIGUSR1 T seconds before the time limit; the agent checkpoints the
// job, stops it and requeues it, and the next start (with its time limit afresh) goes on.
TEST_F(SlurmTest, SigusrOneBeforeTheTimeLimitCheckpointsAndRequeuesTheJob) {
  std::string id = Submit("usr1", {"-p", "low", "-w", "n2", "-c", "1", "--requeue", "--cairn=10m", "--time=1",
                                   "--signal=B:USR1@50"});
  ASSERT_TRUE(WaitFor([&] { return ReadFile(Output("usr1")).find("SIGUSR1") != std::string::npos; }, 120s))
      << ReadFile(Output("usr1"));
  ASSERT_TRUE(WaitJob(id, "COMPLETED", 300s)) << ReadFile(Output("usr1"));
  std::string out = ReadFile(Output("usr1"));
  EXPECT_TRUE(CameBackRight(out, 1));
  // Each start gets the signal 50 s before its own limit: a start that cannot finish in 10 s is
  // checkpointed and requeued again.
  int restarts = 0;
  EXPECT_TRUE(absl::SimpleAtoi(ShowJob(id)["Restarts"], &restarts) && restarts >= 1) << ShowJob(id)["Restarts"];
}

// Past its time limit (no --signal asking for a checkpoint before it), SLURM ends the job for
// good: scontrol gives Reason=TimeLimit at the SIGTERM, and the job goes without a checkpoint,
// its periodic ones removed from the store.
TEST_F(SlurmTest, AJobPastItsTimeLimitStopsWithoutACheckpointAndLeavesNoneInTheStore) {
  std::string id = Submit("timeout", {"-p", "low", "-w", "n3", "-c", "1", "--requeue", "--cairn=2s", "--time=1"}, true,
                          "5000");
  ASSERT_FALSE(id.empty());
  ASSERT_TRUE(WaitFor([&] { return Stored(id) >= 1; }, 90s)) << "no periodic checkpoint reached the store";
  ASSERT_TRUE(WaitJob(id, "TIMEOUT", 180s)) << ReadFile(Output("timeout"));
  EndedForGood("timeout", id, "it reached its time limit");
}

// The job runs as the user who submitted it, under cairn too, and comes back as that user only.
TEST_F(SlurmTest, AJobOfAUserRunsAndComesBackAsThatUser) {
  ASSERT_EQ(::chmod(g->dir->path().c_str(), 0755), 0);
  ASSERT_EQ(::chmod(g->jobs.c_str(), 0777), 0);
  std::string id = Submit("user", {"-p", "low", "-w", "n3", "-c", "2", "--requeue", "--cairn=10m", "--uid=nobody",
                                   "--signal=B:TERM"});
  ASSERT_TRUE(WaitStep("user", 10));
  DaemonProcess& d = Cairnd("n3");
  nlohmann::json job = d.Json({"job", "show", "slurm-" + id + "-u65534"})["job"];
  // SLURM's ids: nobody's uid, root's gid (sbatch --uid without --gid keeps the submitter's).
  EXPECT_TRUE(absl::StartsWith(job["spec"].value("user", ""), "65534:0")) << job.dump();
  // Every process of the job (in its cgroup on node `on`) is nobody's, none root's: the Uid lines.
  auto uids = [&](const DaemonProcess& on) {
    std::string all;
    std::string procs = ReadFile("/sys/fs/cgroup/pids/cairn/" + on.node() + ".slurm-" + id + "-u65534/cgroup.procs");
    for (absl::string_view pid : absl::StrSplit(procs, '\n', absl::SkipEmpty())) {
      std::string status = ReadFile(absl::StrCat("/proc/", pid, "/status"));
      size_t at = status.find("Uid:");
      if (at != std::string::npos) all += status.substr(at, status.find('\n', at) - at) + "\n";
    }
    return all;
  };
  std::string before = uids(d);
  EXPECT_NE(before.find("65534"), std::string::npos) << before;
  EXPECT_EQ(before.find("\t0\t"), std::string::npos) << before;
  std::string high = Preempt("n3");
  ASSERT_TRUE(WaitFor([&] { return ReadFile(Output("user")).find("restored on node") != std::string::npos; }, 300s))
      << ReadFile(Output("user"));
  std::string node = ShowJob(id)["BatchHost"];
  DaemonProcess& there = Cairnd(node.empty() ? "n3" : node);
  std::string after;
  EXPECT_TRUE(WaitFor([&] { return !(after = uids(there)).empty(); }, 30s));
  EXPECT_NE(after.find("65534"), std::string::npos) << after;
  EXPECT_EQ(after.find("\t0\t"), std::string::npos) << after;
  ASSERT_TRUE(WaitJob(id, "COMPLETED", 300s)) << ReadFile(Output("user"));
  EXPECT_TRUE(CameBackRight(ReadFile(Output("user")), 1));
  EXPECT_TRUE(WaitJob(high, "COMPLETED", 120s));
}

// cairn slurm setup checks what --cairn jobs need: the plugin, plugstack.conf, slurm.conf's
// settings through slurmctld, this node's cairnd and its store.
TEST_F(SlurmTest, CairnSlurmSetupChecksTheClusterAndSaysWhatIsMissing) {
  std::string socket = g->dir->path() + "/%n" + g->cairnd[0]->node().substr(2) + ".sock";
  CommandResult ok = Slurm({CAIRN_BIN, "slurm", "setup", "--plugin", CAIRN_SPANK, "--socket", socket, "--node", "n1"});
  EXPECT_TRUE(ok.Exited(0)) << ok.Describe();
  for (const char* line : {"ok   the plugin ", "ok   cairn_spank.so in ", "ok   JobRequeue=1", "ok   KillWait",
                           "ok   PreemptMode REQUEUE", "ok   cairnd on this node at ", "ok   a shared --storage",
                           "this node is ready"}) {
    EXPECT_NE(ok.out.find(line), std::string::npos) << line << "\n" << ok.out;
  }
  EXPECT_NE(ok.out.find("optional " + std::string(CAIRN_SPANK)), std::string::npos) << ok.out;
  // A node whose cairnd is not there, a plugin that is not: said, and the exit status is 1.
  CommandResult missing = Slurm({CAIRN_BIN, "slurm", "setup", "--plugin", g->dir->path() + "/nope.so", "--socket",
                                 socket, "--node", "n9"});
  EXPECT_TRUE(missing.Exited(1)) << missing.Describe();
  EXPECT_NE(missing.out.find("MISSING the plugin " + g->dir->path() + "/nope.so"), std::string::npos) << missing.out;
  EXPECT_NE(missing.out.find("MISSING cairnd on this node at "), std::string::npos) << missing.out;
  EXPECT_NE(missing.out.find("some parts are missing"), std::string::npos) << missing.out;
}

TEST_F(SlurmTest, WithItsNodesCairndDownAJobRunsWithoutCairnAndSaysSoOnce) {
  DaemonProcess& d = Cairnd("n3");
  d.Kill(SIGTERM);
  ASSERT_TRUE(d.Wait().gone);
  std::string id = Submit("nodaemon", {"-p", "low", "-w", "n3", "-c", "1", "--cairn"});
  EXPECT_TRUE(WaitJob(id, "COMPLETED", 300s)) << ReadFile(Output("nodaemon"));
  std::string out = ReadFile(Output("nodaemon"));
  EXPECT_NE(out.find(Expected()), std::string::npos) << out;
  size_t warning = out.find("cairnd does not answer");
  EXPECT_NE(warning, std::string::npos) << out;
  EXPECT_EQ(out.find("cairnd does not answer", warning + 1), std::string::npos) << out;
  EXPECT_TRUE(d.Start());
}

}  // namespace
}  // namespace cairn::testing
