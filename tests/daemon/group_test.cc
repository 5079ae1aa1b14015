// Job groups (issue 13, section 2) with real parts: one cairn-controller (`--dispatch cairnd`)
// and two cairnd as two nodes, each running one rank of a job group submitted to the
// controller. The group is checkpointed as one consistent cut through the daemons'
// CheckpointRank, stopped, and restored, each rank on its node.
//
// The program is not ours: a data-parallel training loop on Debian's python3-torch with the gloo
// backend (tests/daemon/group_train.py), whose two ranks all_reduce their gradients over TCP at
// every step — established connections between the ranks, always busy. The restored group must
// finish with exactly the result of an uninterrupted run (final loss and weights, bit for bit).

#include <signal.h>

#include <filesystem>
#include <sstream>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "cluster_harness.h"

namespace cairn::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr char kTrain[] = GROUP_TRAIN_PY;
constexpr char kSteps[] = "600";

class GroupTest : public ClusterFixture {
 protected:
  void SetUp() override {
    ClusterFixture::SetUp();
    if (std::system("/usr/bin/python3 -c 'import torch.distributed' 2>/dev/null") != 0) {
      GTEST_SKIP() << "python3-torch is not installed (scripts/install-deps.sh installs it)";
    }
  }
  // The step rank `rank` last reported in `out` (-1 before the first).
  static int Progress(const std::string& out, int rank) {
    std::string s = ReadFile(out + "/progress-" + std::to_string(rank));
    return s.empty() ? -1 : std::atoi(s.c_str());
  }
  // Both ranks' results, "" until both are written.
  static std::string Results(const std::string& out) {
    std::string a = ReadFile(out + "/result-0"), b = ReadFile(out + "/result-1");
    return a.empty() || b.empty() ? "" : a + b;
  }
  static std::vector<std::string> Rank(const std::string& out, int rank, int port) {
    return {"/usr/bin/python3", kTrain, std::to_string(rank), "2", std::to_string(port), kSteps, out};
  }
  // The two ranks run as plain processes, start to end: what the group must come back to.
  std::string Uninterrupted() {
    std::string out = Dir() + "/plain";
    fs::create_directories(out);
    int port = FreeTcpPort();
    for (int r : {0, 1}) {
      pid_t pid = SpawnProgram(Rank(out, r, port), "/dev/null", out + "/log-" + std::to_string(r),
                               out + "/log-" + std::to_string(r));
      if (pid <= 0) return "";
      Track(pid, "group_train.py");
    }
    WaitFor([&] { return !Results(out).empty(); }, 180s);
    return Results(out);
  }
  // The controller and two daemons (`a` and `b`, labelled host=a / host=b), registered; `b_env`:
  // b's environment (a fault point).
  void StartCluster(std::vector<std::string> b_env = {}) {
    c_ = StartTcpController("10");
    ASSERT_NE(c_, nullptr);
    std::string shared = SharedStore();
    a_ = std::make_unique<DaemonProcess>(Dir(), "a", JoinArgs("0.30", shared, {"--labels", "host=a"}));
    b_ = std::make_unique<DaemonProcess>(Dir(), "b", JoinArgs("0.30", shared, {"--labels", "host=b"}), b_env);
    ASSERT_TRUE(a_->Start());
    ASSERT_TRUE(b_->Start());
    for (const DaemonProcess* d : {a_.get(), b_.get()}) {
      ASSERT_FALSE(WaitEvent(*c_, 0, [&](const json& e) {
                     return e.value("kind", "") == "node-registered" && e.value("node_id", "") == d->node();
                   }, 30s).is_null())
          << c_->Log() << d->Log();
    }
  }
  // Submits job `id`, rank `rank` of group `group`, to run `command` on the node labelled `host`
  // (empty: where placement puts a job of one CPU).
  void Submit(const std::string& id, const std::string& group, int rank, const std::string& host,
              const std::vector<std::string>& command) {
    std::vector<std::string> args = {"submit", "--id", id, "--group", group, "--rank", std::to_string(rank),
                                     // (the limits of its cgroup: a torch.distributed rank holds ~115 MiB)
                                     "--cpus", host.empty() ? "1" : "0.5", "--memory-mb", "1000"};
    // (--node-label takes several values: an option after it ends them, not "--".)
    if (!host.empty()) args.insert(args.end(), {"--node-label", "host=" + host});
    args.insert(args.end(), {"--json", "--"});
    args.insert(args.end(), command.begin(), command.end());
    CommandResult sub = Ctl(*c_, args);
    ASSERT_TRUE(sub.Exited(0)) << sub.Describe() << c_->Log();
  }
  std::string StateOf(const DaemonProcess& d, const std::string& job) {
    json j = json::parse(d.Cairn({"job", "show", job, "--json"}, 20s).out, nullptr, false);
    return j.is_discarded() ? "" : j["job"].value("state", "");
  }
  // The checkpoints job `job` has on `d` (complete and failed).
  json CheckpointsOf(const DaemonProcess& d, const std::string& job) {
    json j = json::parse(d.Cairn({"job", "show", job, "--json"}, 20s).out, nullptr, false);
    return j.is_discarded() ? json::array() : j.value("checkpoints", json::array());
  }

  // How many parts of a group checkpoint job `job` has on `d` that were called off (recorded
  // failed, their files gone); -1 when one is complete or kept files.
  int CalledOffParts(const DaemonProcess& d, const std::string& job) {
    int n = 0;
    for (const json& c : CheckpointsOf(d, job)) {
      if (c.value("group_checkpoint", "").empty()) continue;
      if (c.value("state", "") != "failed" || fs::exists(c.value("location", "/nonexistent"))) {
        ADD_FAILURE() << "a part left after its group checkpoint was called off: " << c.dump();
        return -1;
      }
      ++n;
    }
    return n;
  }

  // The training group (ranks train-0 and train-1 of group "train", on the nodes labelled
  // `host0` and `host1`, or where placement puts them when empty) started and past step 50;
  // it writes to out_ and meets on port_.
  void StartTraining(const std::string& host0, const std::string& host1) {
    out_ = Dir() + "/run";
    fs::create_directories(out_);
    port_ = FreeTcpPort();
    Submit("train-0", "train", 0, host0, Rank(out_, 0, port_));
    Submit("train-1", "train", 1, host1, Rank(out_, 1, port_));
    ASSERT_FALSE(HasFatalFailure());
    ASSERT_TRUE(WaitFor([&] { return Progress(out_, 0) >= 50 && Progress(out_, 1) >= 50; }, 120s))
        << c_->Log() << ReadFile(Dir() + "/run/progress-0") << ReadFile(Dir() + "/run/progress-1");
  }
  // The uninterrupted run's result in *expected, then the cluster (b with `b_env`) and the
  // training group, rank 0 on a and rank 1 on b, past step 50.
  void TrainOnAAndB(std::string* expected, std::vector<std::string> b_env = {}) {
    *expected = Uninterrupted();
    ASSERT_FALSE(expected->empty()) << ReadFile(Dir() + "/plain/log-0") << ReadFile(Dir() + "/plain/log-1");
    StartCluster(std::move(b_env));
    ASSERT_FALSE(HasFatalFailure());
    StartTraining("a", "b");
    ASSERT_FALSE(HasFatalFailure()) << a_->Log() << b_->Log();
  }
  std::string out_;
  int port_ = 0;

  std::unique_ptr<ControllerProcess> c_;
  std::unique_ptr<DaemonProcess> a_, b_;
};

TEST_F(GroupTest, TrainingGroupCheckpointedStoppedAndRestoredFinishesBitForBit) {
  std::string expected;
  TrainOnAAndB(&expected);
  ASSERT_FALSE(HasFatalFailure());
  const std::string out = out_;

  // A group checkpoint that leaves the ranks running: one record, each rank's part complete.
  CommandResult live = Ctl(*c_, {"group", "checkpoint", "train", "--json"});
  ASSERT_TRUE(live.Exited(0)) << live.Describe() << c_->Log() << a_->Log() << b_->Log();
  json g = ParseJson(live)["checkpoint"];
  ASSERT_EQ(g["ranks"].size(), 2u) << live.out;
  EXPECT_EQ(g["ranks"][0].value("node_id", ""), a_->node());
  EXPECT_EQ(g["ranks"][1].value("node_id", ""), b_->node());
  for (const json& r : g["ranks"]) {
    const DaemonProcess& d = r.value("rank", 0) == 0 ? *a_ : *b_;
    bool found = false;
    for (const json& c : CheckpointsOf(d, r.value("job_id", ""))) {
      if (c.value("id", "") != r.value("checkpoint", "")) continue;
      found = true;
      EXPECT_EQ(c.value("state", ""), "complete") << c.dump();
      EXPECT_EQ(c.value("group_checkpoint", ""), g.value("id", "")) << c.dump();
    }
    EXPECT_TRUE(found) << r.dump();
  }
  // Each rank stood frozen for the slowest rank's dump and the decision, and not much longer.
  std::printf("[ group    ] live group checkpoint: slowest dump %.3f s, longest frozen %.3f s\n",
              g.value("dump_max_s", 0.0), g.value("frozen_max_s", 0.0));
  EXPECT_GE(g.value("frozen_max_s", 0.0), g.value("dump_max_s", 0.0)) << g.dump();
  int before = Progress(out, 0);
  ASSERT_TRUE(WaitFor([&] { return Progress(out, 0) > before + 20; }, 60s)) << "the group did not go on training";
  EXPECT_EQ(StateOf(*a_, "train-0"), "running");
  EXPECT_EQ(StateOf(*b_, "train-1"), "running");

  // Stopped with a second group checkpoint: no rank trains on.
  CommandResult stop = Ctl(*c_, {"group", "checkpoint", "train", "--stop", "--json"});
  ASSERT_TRUE(stop.Exited(0)) << stop.Describe() << c_->Log() << a_->Log() << b_->Log();
  std::string stopped_id = ParseJson(stop)["checkpoint"].value("id", "");
  ASSERT_TRUE(WaitFor([&] { return StateOf(*a_, "train-0") != "running" && StateOf(*b_, "train-1") != "running"; },
                      30s));
  int at_stop0 = Progress(out, 0), at_stop1 = Progress(out, 1);
  std::this_thread::sleep_for(1s);
  EXPECT_EQ(Progress(out, 0), at_stop0);
  EXPECT_EQ(Progress(out, 1), at_stop1);
  EXPECT_EQ(Results(out), "") << "the group finished before it was stopped: give it more steps";
  CommandResult list = Ctl(*c_, {"group", "list", "train", "--json"});
  ASSERT_TRUE(list.Exited(0)) << list.Describe();
  ASSERT_EQ(ParseJson(list)["checkpoints"].size(), 2u) << list.out;

  // Restored, each rank where it was: the training ends as if nothing had happened.
  CommandResult back = Ctl(*c_, {"group", "restore", "train"});
  ASSERT_TRUE(back.Exited(0)) << back.Describe() << c_->Log() << a_->Log() << b_->Log();
  EXPECT_TRUE(absl::StrContains(back.out, stopped_id)) << back.out;
  ASSERT_TRUE(WaitFor([&] { return !Results(out).empty(); }, 180s))
      << ReadFile(a_->state_dir() + "/jobs/train-0/stderr.log") << ReadFile(b_->state_dir() + "/jobs/train-1/stderr.log")
      << a_->Log() << b_->Log();
  EXPECT_EQ(Results(out), expected);
  EXPECT_GE(Progress(out, 0), at_stop0);
}

// A group restore called off part-way (rank 1's daemon is down) stops the rank it had restored
// while that rank's connections are still held: they close in repair mode, sending nothing and
// keeping no port, so that the restore can be tried again at once (before, the held FIN left
// rank 0's connections in FIN_WAIT1 for minutes, and the second restore failed "Cannot assign
// requested address"). The training then finishes bit for bit.
TEST_F(GroupTest, AGroupRestoreCalledOffCanBeTriedAgainAtOnce) {
  std::string expected;
  TrainOnAAndB(&expected);
  ASSERT_FALSE(HasFatalFailure());
  const std::string out = out_;
  CommandResult stop = Ctl(*c_, {"group", "checkpoint", "train", "--stop", "--json"});
  ASSERT_TRUE(stop.Exited(0)) << stop.Describe() << c_->Log();
  ASSERT_TRUE(WaitFor([&] { return StateOf(*a_, "train-0") != "running" && StateOf(*b_, "train-1") != "running"; },
                      30s));

  b_->Kill(SIGKILL);
  b_->Wait();
  CommandResult first = Ctl(*c_, {"group", "restore", "train"});
  EXPECT_TRUE(first.FailedCleanly()) << first.Describe() << a_->RunLog() << c_->Log();
  EXPECT_TRUE(absl::StrContains(first.err, "rank 1")) << first.err;
  ASSERT_TRUE(WaitFor([&] { return StateOf(*a_, "train-0") != "running"; }, 30s)) << "rank 0 was not stopped again";

  ASSERT_TRUE(b_->Start());
  ASSERT_TRUE(WaitFor([&] {
    CommandResult again = Ctl(*c_, {"group", "restore", "train"});
    return again.Exited(0);
  }, 30s)) << c_->Log() << a_->Log() << b_->Log();
  ASSERT_TRUE(WaitFor([&] { return !Results(out).empty(); }, 180s))
      << ReadFile(a_->state_dir() + "/jobs/train-0/stderr.log") << ReadFile(b_->state_dir() + "/jobs/train-1/stderr.log")
      << c_->Log() << a_->Log();
  EXPECT_EQ(Results(out), expected);
}

// A rank's node dies in the middle of the group checkpoint: its daemon is SIGKILLed while the
// rank stands frozen, dumped, its connections in repair mode and locked, before it said it was
// prepared. Nothing is recorded; the other rank is thawed with its part removed; the dead
// daemon's guardian thaws its rank and gives its connections back; the daemon, restarted,
// cleans the half-made part. The training then finishes exactly as an uninterrupted run.
TEST_F(GroupTest, ARankWhoseDaemonDiesMidCheckpointLeavesTheGroupTrainingUntouched) {
  std::string expected;
  TrainOnAAndB(&expected, {"CAIRN_FAULT_PAUSE=group-frozen"});
  ASSERT_FALSE(HasFatalFailure());
  const std::string out = out_;

  CommandResult r;
  std::thread call([&] { r = Ctl(*c_, {"group", "checkpoint", "train"}); });
  bool reached = WaitFor([&] { return b_->RunLog().find("fault point group-frozen") != std::string::npos; }, 60s);
  b_->Kill(SIGKILL);
  b_->Wait();
  call.join();
  ASSERT_TRUE(reached) << b_->Log();
  EXPECT_TRUE(r.FailedCleanly()) << r.Describe();
  EXPECT_TRUE(absl::StrContains(r.err, "called off")) << r.err;
  EXPECT_TRUE(absl::StrContains(r.err, "rank 1 (job train-1")) << r.err;
  CommandResult list = Ctl(*c_, {"group", "list", "train", "--json"});
  ASSERT_TRUE(list.Exited(0)) << list.Describe();
  EXPECT_EQ(ParseJson(list).value("checkpoints", json::array()).size(), 0u) << list.out;
  EXPECT_EQ(CalledOffParts(*a_, "train-0"), 1);

  // Both ranks train on (rank 1 with no daemon), and b, back, finds its job running.
  int p1 = Progress(out, 1);
  EXPECT_TRUE(WaitFor([&] { return Progress(out, 1) > p1 + 20; }, 60s)) << "rank 1 was not given back its run";
  ASSERT_TRUE(b_->Start());
  EXPECT_EQ(StateOf(*b_, "train-1"), "running") << b_->Log();
  for (const json& c : CheckpointsOf(*b_, "train-1")) {
    EXPECT_NE(c.value("state", ""), "complete") << c.dump();
    EXPECT_FALSE(fs::exists(c.value("location", "/nonexistent"))) << c.dump();
  }
  ASSERT_TRUE(WaitFor([&] { return !Results(out).empty(); }, 180s))
      << ReadFile(a_->state_dir() + "/jobs/train-0/stderr.log") << ReadFile(b_->state_dir() + "/jobs/train-1/stderr.log");
  EXPECT_EQ(Results(out), expected);
}

// Node b is lost (its daemon and the rank it ran SIGKILLed, as a dead machine loses them) after
// a live group checkpoint: the controller restores the whole group from it — rank 0 stopped and
// restored where it ran, rank 1 on node c from the shared store — with every rank's connections
// held until all are back, and the training finishes bit for bit as an uninterrupted run.
// A rank dies while its node lives (its program SIGKILLed, as the OOM killer or a crash would
// end it): its daemon reports the end (NodeSignal JOB_ENDED), and the controller brings the whole
// group back from its newest group checkpoint, each rank on its node, the survivor stopped
// first. The survivor's own end (it loses its peer) is not a second failover. The training then
// finishes exactly as an uninterrupted run.
TEST_F(GroupTest, ARankThatDiesOnALiveNodeBringsTheGroupBackFromItsNewestGroupCheckpoint) {
  std::string expected;
  TrainOnAAndB(&expected);
  ASSERT_FALSE(HasFatalFailure());
  const std::string out = out_;
  CommandResult ck = Ctl(*c_, {"group", "checkpoint", "train", "--json"});
  ASSERT_TRUE(ck.Exited(0)) << ck.Describe() << c_->Log();
  std::string id = ParseJson(ck)["checkpoint"].value("id", "");
  int at_checkpoint = Progress(out, 1);
  ASSERT_TRUE(WaitFor([&] { return Progress(out, 1) > at_checkpoint + 20; }, 60s)) << "the group did not train on";

  // Rank 1's program dies; its node and daemon live on.
  uint64_t seq = 0;
  for (const json& e : Events(*c_)) seq = std::max<uint64_t>(seq, JsonInt(e["seq"]));
  int init = Job(*b_, "train-1").value("host_pid", 0);
  ASSERT_GT(init, 0);
  std::istringstream kids(ReadFile("/proc/" + std::to_string(init) + "/task/" + std::to_string(init) + "/children"));
  pid_t python = 0;
  ASSERT_TRUE(kids >> python) << "the rank's init has no child";
  ASSERT_EQ(::kill(python, SIGKILL), 0);

  json ended = WaitEvent(*c_, seq, [](const json& e) { return e.value("kind", "") == "job-ended"; }, 60s);
  ASSERT_FALSE(ended.is_null()) << c_->Log() << b_->Log();
  json failover = WaitEvent(*c_, seq, [](const json& e) { return e.value("kind", "") == "group-failover"; }, 60s);
  ASSERT_FALSE(failover.is_null()) << c_->Log();
  EXPECT_TRUE(absl::StrContains(failover.value("reason", ""), id)) << failover.dump();
  EXPECT_TRUE(absl::StrContains(failover.value("reason", ""), "lost rank")) << failover.dump();
  json restored = WaitEvent(*c_, seq, [](const json& e) { return e.value("kind", "") == "group-restored"; }, 60s);
  ASSERT_FALSE(restored.is_null()) << c_->Log() << a_->Log() << b_->Log();
  ASSERT_TRUE(WaitFor([&] { return !Results(out).empty(); }, 180s))
      << ReadFile(a_->state_dir() + "/jobs/train-0/stderr.log") << ReadFile(b_->state_dir() + "/jobs/train-1/stderr.log")
      << c_->Log();
  EXPECT_EQ(Results(out), expected);
  // One failover: the survivor's end, caused by its peer's, did not bring the group back again.
  int failovers = 0;
  for (const json& e : Events(*c_)) {
    if (static_cast<uint64_t>(JsonInt(e["seq"])) > seq && e.value("kind", "") == "group-failover") ++failovers;
  }
  EXPECT_EQ(failovers, 1) << c_->Log();
  EXPECT_TRUE(WaitFor([&] { return StateOf(*a_, "train-0") == "exited" && StateOf(*b_, "train-1") == "exited"; }, 30s))
      << StateOf(*a_, "train-0") << " " << StateOf(*b_, "train-1");
}

TEST_F(GroupTest, NodeLostRestoresTheWholeGroupFromItsNewestGroupCheckpoint) {
  std::string expected = Uninterrupted();
  ASSERT_FALSE(expected.empty()) << ReadFile(Dir() + "/plain/log-0") << ReadFile(Dir() + "/plain/log-1");
  // Three nodes of one CPU each: a rank of one CPU per node.
  c_ = StartTcpController("3");
  ASSERT_NE(c_, nullptr);
  std::string shared = SharedStore();
  a_ = std::make_unique<DaemonProcess>(Dir(), "a", JoinArgs("0.30", shared, {"--cpus", "1"}));
  b_ = std::make_unique<DaemonProcess>(Dir(), "b", JoinArgs("0.30", shared, {"--cpus", "1"}));
  // c fetches rank 1's part, then waits 3 s before rebuilding it: restored rank 0 runs meanwhile,
  // and would be answered with a reset if its connections were not held until rank 1 is back.
  DaemonProcess cn(Dir(), "c", JoinArgs("0.30", shared, {"--cpus", "1"}),
                   {"CAIRN_FAULT_PAUSE=restore-fetched", "CAIRN_FAULT_PAUSE_S=3"});
  for (DaemonProcess* d : {a_.get(), b_.get(), &cn}) {
    ASSERT_TRUE(d->Start());
    ASSERT_FALSE(WaitEvent(*c_, 0, [&](const json& e) {
                   return e.value("kind", "") == "node-registered" && e.value("node_id", "") == d->node();
                 }, 30s).is_null())
        << c_->Log() << d->Log();
  }
  StartTraining("", "");
  ASSERT_FALSE(HasFatalFailure()) << a_->Log() << b_->Log();
  EXPECT_EQ(StateOf(*a_, "train-0"), "running");
  EXPECT_EQ(StateOf(*b_, "train-1"), "running");
  const std::string out = out_;
  const int port = port_;
  CommandResult ck = Ctl(*c_, {"group", "checkpoint", "train", "--json"});
  ASSERT_TRUE(ck.Exited(0)) << ck.Describe() << c_->Log();
  std::string id = ParseJson(ck)["checkpoint"].value("id", "");

  // Node b dies with its rank.
  uint64_t seq = 0;
  for (const json& e : Events(*c_)) seq = std::max<uint64_t>(seq, JsonInt(e["seq"]));
  int rank1 = Job(*b_, "train-1").value("host_pid", 0);
  ASSERT_GT(rank1, 0);
  std::string procs = ReadFile("/sys/fs/cgroup/freezer/cairn/" + b_->node() + ".train-1/cgroup.procs");
  b_->Kill(SIGKILL);
  b_->Wait();
  for (absl::string_view p : absl::StrSplit(procs, '\n', absl::SkipEmpty())) ::kill(std::atoi(std::string(p).c_str()), SIGKILL);

  json failover = WaitEvent(*c_, seq, [](const json& e) { return e.value("kind", "") == "group-failover"; }, 60s);
  ASSERT_FALSE(failover.is_null()) << c_->Log();
  EXPECT_TRUE(absl::StrContains(failover.value("reason", ""), id)) << failover.dump();
  json restored = WaitEvent(*c_, seq, [](const json& e) { return e.value("kind", "") == "group-restored"; }, 60s);
  ASSERT_FALSE(restored.is_null()) << c_->Log() << a_->Log() << cn.Log();
  EXPECT_EQ(StateOf(cn, "train-1"), "running") << cn.Log();
  ASSERT_TRUE(WaitFor([&] { return !Results(out).empty(); }, 180s))
      << ReadFile(a_->state_dir() + "/jobs/train-0/stderr.log") << ReadFile(cn.state_dir() + "/jobs/train-1/stderr.log")
      << c_->Log();
  EXPECT_EQ(Results(out), expected);
  // The controller placed rank 1 on c, and neither restored rank's connections stayed locked.
  bool on_c = false;
  for (const json& j : Status(*c_).value("jobs", json::array())) {
    if (j["spec"].value("id", "") == "train-1") on_c = j.value("node_id", "") == cn.node();
  }
  EXPECT_TRUE(on_c) << Status(*c_).dump();
  EXPECT_EQ(Job(*a_, "train-0").value("network_hold", ""), "");
  EXPECT_EQ(Job(cn, "train-1").value("network_hold", ""), "");
  // No restore lock left that holds the group's connections (each holds the rendezvous port;
  // other tests' locks may exist beside this one).
  CommandResult tables = RunCommand({"/usr/sbin/nft", "list", "tables"}, Dir());
  for (absl::string_view line : absl::StrSplit(tables.out, '\n', absl::SkipEmpty())) {
    if (!absl::StrContains(line, "_restore")) continue;
    std::string name(line.substr(line.rfind(' ') + 1));
    CommandResult t = RunCommand({"/usr/sbin/nft", "-n", "list", "table", "inet", name}, Dir());
    EXPECT_FALSE(absl::StrContains(t.out, absl::StrCat(". ", port, " ")) ||
                 absl::StrContains(t.out, absl::StrCat(". ", port, ",")))
        << "restore lock left: " << t.out;
  }
  cn.KillJobs();
}

// One rank cannot be checkpointed (it holds a FIFO it unlinked, which cairn refuses): the group
// checkpoint is called off, the other rank — frozen and dumped meanwhile — is thawed untouched
// and its part removed, and no group checkpoint is recorded.
TEST_F(GroupTest, ARankThatCannotBeCheckpointedCallsTheGroupCheckpointOff) {
  StartCluster();
  ASSERT_FALSE(HasFatalFailure());
  std::string out = Dir() + "/run";
  fs::create_directories(out);
  // Rank 0 counts; rank 1 holds a tun device (state in the kernel: refused).
  Submit("count-0", "pair", 0, "a",
         {"/usr/bin/python3", "-c",
          "import os, time\nn = 0\nwhile True:\n    n += 1\n    open('" + out + "/n.tmp', 'w').write(str(n))\n"
          "    os.replace('" + out + "/n.tmp', '" + out + "/n')\n    time.sleep(0.01)\n"});
  Submit("tun-1", "pair", 1, "b",
         {"/usr/bin/python3", "-c",
          "import os, time\nfd = os.open('/dev/net/tun', os.O_RDWR)\nopen('" + out +
              "/ready', 'w').close()\ntime.sleep(1000)\n"});
  ASSERT_FALSE(HasFatalFailure());
  ASSERT_TRUE(WaitFor([&] { return fs::exists(out + "/ready") && !ReadFile(out + "/n").empty(); }, 60s))
      << a_->Log() << b_->Log();

  CommandResult r = Ctl(*c_, {"group", "checkpoint", "pair"});
  EXPECT_TRUE(r.FailedCleanly()) << r.Describe();
  EXPECT_TRUE(absl::StrContains(r.err, "called off")) << r.err;
  EXPECT_TRUE(absl::StrContains(r.err, "rank 1 (job tun-1")) << r.err;
  EXPECT_TRUE(absl::StrContains(r.err, "tun/tap")) << r.err;
  // Nothing recorded; rank 0's part gone from its node, the job running on.
  CommandResult list = Ctl(*c_, {"group", "list", "pair", "--json"});
  ASSERT_TRUE(list.Exited(0)) << list.Describe();
  EXPECT_EQ(ParseJson(list).value("checkpoints", json::array()).size(), 0u) << list.out;
  EXPECT_EQ(CalledOffParts(*a_, "count-0"), 1);
  EXPECT_EQ(StateOf(*a_, "count-0"), "running");
  EXPECT_EQ(StateOf(*b_, "tun-1"), "running");
  EXPECT_EQ(JobFreezer(a_->node(), "count-0"), "THAWED");
  int n = std::atoi(ReadFile(out + "/n").c_str());
  EXPECT_TRUE(WaitFor([&] { return std::atoi(ReadFile(out + "/n").c_str()) > n + 10; }, 10s))
      << "rank 0 does not run on";
  // The controller says why.
  bool said = false;
  for (const json& e : Events(*c_)) {
    said |= e.value("kind", "") == "group-checkpoint-failed" && absl::StrContains(e.value("reason", ""), "tun-1");
  }
  EXPECT_TRUE(said);
}

}  // namespace
}  // namespace cairn::testing
