// Job groups with an MPI program (issue 13, section 2): Debian's Open MPI, its TCP transport, 4
// ranks on two nodes — two network namespaces on one wire (tests/integration/netns.h), each with
// its own cairnd, the controller on the wire beside them. The group's rank 0 on node A is
// `mpirun` with two MPI ranks; its rank 1 on node B is Open MPI's daemon (orted) with the other
// two, which mpirun starts through a remote-shell agent that hands the command to that job
// (tests/daemon/mpi_handoff_agent.sh, in place of ssh). Between the nodes run mpirun's control
// connection to orted and the MPI ranks' own connections; inside each node, pipes and unix
// sockets. The program (tests/daemon/mpi_ring.c) folds an all-reduce of every rank's value into
// each at every step: checkpointed as a group, stopped and restored, it must end with exactly
// the values of an uninterrupted run.

#include <filesystem>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "cluster_harness.h"
#include "netns.h"

namespace cairn::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr char kRing[] = MPI_RING_BIN;
constexpr char kAgent[] = MPI_AGENT;
constexpr char kMpirun[] = "/usr/bin/mpirun";
constexpr char kSubnet[] = "10.83.0";
constexpr char kServiceSubnet[] = "10.84.0";  // the ranks' service addresses (NodeLost... test)
constexpr char kSteps[] = "900";  // about 20 s of steps: long enough to be cut twice

class MpiGroupTest : public ClusterFixture {
 protected:
  void SetUp() override {
    ClusterFixture::SetUp();
    if (IsSkipped()) return;
    if (std::string(kRing).empty() || !fs::exists(kMpirun)) {
      GTEST_SKIP() << "Open MPI is not installed (scripts/install-deps.sh installs openmpi-bin and libopenmpi-dev)";
    }
    if (!fs::exists("/usr/bin/nsenter")) GTEST_SKIP() << "needs nsenter (network namespaces as nodes)";
    // Three machines, each with its wire0; the controller on the wire too.
    ASSERT_TRUE(net_.Create({"A", "B", "C"}, kSubnet, Dir(), "wire0"));
    ASSERT_TRUE(net_.JoinWire()) << net_.Last();
  }
  void TearDown() override {
    for (DaemonProcess* d : {a_.get(), b_.get(), c_node_.get()}) {
      if (d != nullptr) d->KillJobs();
    }
    a_.reset();
    b_.reset();
    c_node_.reset();
    c_.reset();
    net_.Remove();
    ClusterFixture::TearDown();
  }

  // mpirun's arguments for 4 ranks, two here ("localhost") and two on host B through the agent
  // handing off in `handoff`, every connection on the nodes' wire.
  // `wire`: the subnet or interface the MPI connections use (the nodes' subnet by default).
  std::vector<std::string> Mpirun(const std::string& handoff, const std::string& out,
                                  std::string wire = std::string(kSubnet) + ".0/24") {
    return {kMpirun, "--allow-run-as-root", "--oversubscribe", "-np", "4", "--host", "localhost:2,B:2",
            "--mca", "plm_rsh_agent", std::string(kAgent) + " " + handoff, "--mca", "btl", "tcp,self",
            "--mca", "btl_tcp_if_include", wire, "--mca", "oob_tcp_if_include", wire, kRing, kSteps, out};
  }
  // What stands in for sshd on B: waits for the handed-off command, then runs it (orted).
  static std::vector<std::string> OnB(const std::string& handoff) {
    std::string launch = handoff + "/launch-B";
    return {"/bin/sh", "-c",
            "while [ ! -f " + launch + " ]; do sleep 0.05; done; exec /bin/sh -c \"$(cat " + launch + ")\""};
  }

  // The same 4 ranks as plain processes, mpirun in A and orted in B, start to end: what the
  // group must come back to.
  std::string Uninterrupted() {
    std::string out = Dir() + "/plain", handoff = Dir() + "/plain-handoff";
    fs::create_directories(out);
    fs::create_directories(handoff);
    std::vector<std::string> b = net_.Enter(1), a = net_.Enter(0);
    std::vector<std::string> on_b = OnB(handoff), run = Mpirun(handoff, out);
    b.insert(b.end(), on_b.begin(), on_b.end());
    a.insert(a.end(), run.begin(), run.end());
    for (const auto& [argv, log] : {std::pair{b, out + "/log-b"}, std::pair{a, out + "/log-a"}}) {
      pid_t pid = SpawnProgram(argv, "/dev/null", log, log);
      if (pid <= 0) return "";
      Track(pid, argv[2]);
    }
    WaitFor([&] { return !ReadFile(out + "/result").empty(); }, 180s);
    return ReadFile(out + "/result");
  }

  // The controller on the wire (nodes lost after `heartbeat_timeout` s), daemon A in namespace
  // A, B in B (and, with `third`, C in C), labelled host=a, host=b, host=c, each listening on its
  // node's address, registered.
  void StartCluster(const std::string& heartbeat_timeout = "10", bool third = false) {
    c_ = StartTcpController(heartbeat_timeout, net_.WireAddress());
    ASSERT_NE(c_, nullptr);
    std::string shared = SharedStore();
    a_ = std::make_unique<DaemonProcess>(Dir(), "a", JoinArgs("0.30", shared, {"--labels", "host=a"}, net_.Address(0)));
    b_ = std::make_unique<DaemonProcess>(Dir(), "b",
                                         JoinArgs("0.30", shared, {"--labels", "host=b,pool=bc"}, net_.Address(1)));
    a_->RunUnder(net_.Enter(0));
    b_->RunUnder(net_.Enter(1));
    std::vector<DaemonProcess*> nodes = {b_.get(), a_.get()};
    if (third) {
      // Dearer than b: rank 1 (pool=bc) goes to b, and to c only when b is lost.
      c_node_ = std::make_unique<DaemonProcess>(Dir(), "c",
                                                JoinArgs("0.50", shared, {"--labels", "host=c,pool=bc"}, net_.Address(2)));
      c_node_->RunUnder(net_.Enter(2));
      nodes.push_back(c_node_.get());
    }
    for (DaemonProcess* d : nodes) {
      ASSERT_TRUE(d->Start());
      // (On a loaded machine a node may be lost and come back before this looks: any of its
      // registrations counts.)
      ASSERT_FALSE(WaitEvent(*c_, 0, [&](const json& e) {
                     std::string kind = e.value("kind", "");
                     return (kind == "node-registered" || kind == "node-reregistered" || kind == "node-returned") &&
                            e.value("node_id", "") == d->node();
                   }, 60s).is_null())
          << c_->Log() << d->Log();
    }
  }
  // Rank `rank` of group "mpi" as job `id`, on a node labelled `label` (k=v), with the service
  // address `address` (none when empty).
  void Submit(const std::string& id, int rank, const std::string& label, const std::vector<std::string>& command,
              const std::string& address = "") {
    std::vector<std::string> args = {"submit", "--id", id, "--group", "mpi", "--rank", std::to_string(rank),
                                     "--cpus", "0.5", "--memory-mb", "500", "--node-label", label};
    if (!address.empty()) args.insert(args.end(), {"--address", address});
    args.insert(args.end(), {"--json", "--"});
    args.insert(args.end(), command.begin(), command.end());
    CommandResult sub = Ctl(*c_, args);
    ASSERT_TRUE(sub.Exited(0)) << sub.Describe() << c_->Log();
  }
  int Progress() {
    std::string s = ReadFile(out_ + "/progress");
    return s.empty() ? -1 : std::atoi(s.c_str());
  }
  std::string StateOf(const DaemonProcess& d, const std::string& job) {
    json j = json::parse(d.Cairn({"job", "show", job, "--json"}, 20s).out, nullptr, false);
    return j.is_discarded() ? "" : j["job"].value("state", "");
  }
  // How many MPI ranks (mpi_ring processes) job `job` of node `d` runs: its freezer cgroup's.
  static int RanksIn(const DaemonProcess& d, const std::string& job) {
    int n = 0;
    std::string procs = ReadFile("/sys/fs/cgroup/freezer/cairn/" + d.node() + "." + job + "/cgroup.procs");
    for (absl::string_view p : absl::StrSplit(procs, '\n', absl::SkipEmpty())) {
      if (absl::StripAsciiWhitespace(ReadFile(absl::StrCat("/proc/", p, "/comm"))) == "mpi_ring") ++n;
    }
    return n;
  }
  std::string Logs() {
    std::string more = c_node_ == nullptr ? "" : ReadFile(c_node_->state_dir() + "/jobs/mpi-1/stderr.log") + c_node_->Log();
    for (size_t i : {0, 1, 2}) {
      std::vector<std::string> ss = net_.Enter(i);
      ss.insert(ss.end(), {"/usr/bin/ss", "-tanoi"});
      std::printf("TCP sockets of node %zu:\n%s\n", i, RunCommand(ss, Dir()).out.c_str());
    }
    return ReadFile(a_->state_dir() + "/jobs/mpi-0/stderr.log") + ReadFile(b_->state_dir() + "/jobs/mpi-1/stderr.log") +
           c_->Log() + a_->Log() + b_->Log() + more;
  }

  NetworkNodes net_;
  std::unique_ptr<ControllerProcess> c_;
  std::unique_ptr<DaemonProcess> a_, b_, c_node_;
  std::string out_;
};

TEST_F(MpiGroupTest, FourRanksOnTwoNodesCheckpointedStoppedAndRestoredFinishBitForBit) {
  const std::string expected = Uninterrupted();
  ASSERT_FALSE(expected.empty()) << ReadFile(Dir() + "/plain/log-a") << ReadFile(Dir() + "/plain/log-b");
  ASSERT_NO_FATAL_FAILURE(StartCluster());
  out_ = Dir() + "/run";
  std::string handoff = Dir() + "/handoff";
  fs::create_directories(out_);
  fs::create_directories(handoff);
  ASSERT_NO_FATAL_FAILURE(Submit("mpi-1", 1, "host=b", OnB(handoff)));
  ASSERT_NO_FATAL_FAILURE(Submit("mpi-0", 0, "host=a", Mpirun(handoff, out_)));
  ASSERT_TRUE(WaitFor([&] { return Progress() >= 100; }, 120s)) << Logs();
  // Two MPI ranks in each node's job: under mpirun on A, under orted on B.
  EXPECT_EQ(RanksIn(*a_, "mpi-0"), 2);
  EXPECT_EQ(RanksIn(*b_, "mpi-1"), 2);

  // Live: one consistent cut of both nodes, and the ranks go on.
  CommandResult live = Ctl(*c_, {"group", "checkpoint", "mpi", "--json"});
  ASSERT_TRUE(live.Exited(0)) << live.Describe() << Logs();
  json g = ParseJson(live)["checkpoint"];
  ASSERT_EQ(g["ranks"].size(), 2u) << live.out;
  std::printf("[ mpi      ] live group checkpoint: slowest dump %.3f s, longest frozen %.3f s\n",
              g.value("dump_max_s", 0.0), g.value("frozen_max_s", 0.0));
  int before = Progress();
  ASSERT_TRUE(WaitFor([&] { return Progress() >= before + 50; }, 60s)) << "the MPI job did not go on: " << Logs();

  // Stopped by a second one: nothing runs on.
  CommandResult stop = Ctl(*c_, {"group", "checkpoint", "mpi", "--stop", "--json"});
  ASSERT_TRUE(stop.Exited(0)) << stop.Describe() << Logs();
  std::string stopped_id = ParseJson(stop)["checkpoint"].value("id", "");
  ASSERT_TRUE(WaitFor([&] { return StateOf(*a_, "mpi-0") != "running" && StateOf(*b_, "mpi-1") != "running"; }, 30s));
  int at_stop = Progress();
  std::this_thread::sleep_for(1s);
  EXPECT_EQ(Progress(), at_stop);
  ASSERT_EQ(ReadFile(out_ + "/result"), "") << "the MPI job finished before it was stopped: give it more steps";

  // Restored, each rank on its node: the program ends as if nothing had happened.
  CommandResult back = Ctl(*c_, {"group", "restore", "mpi"});
  ASSERT_TRUE(back.Exited(0)) << back.Describe() << Logs();
  EXPECT_TRUE(absl::StrContains(back.out, stopped_id)) << back.out;
  EXPECT_EQ(RanksIn(*a_, "mpi-0"), 2);
  EXPECT_EQ(RanksIn(*b_, "mpi-1"), 2);
  ASSERT_TRUE(WaitFor([&] { return !ReadFile(out_ + "/result").empty(); }, 180s)) << Logs();
  EXPECT_EQ(ReadFile(out_ + "/result"), expected);
  EXPECT_GE(Progress(), at_stop);
}

// The same program with node B lost while it runs: the controller brings the whole group back
// from its newest group checkpoint, rank 1 on node C. Every MPI connection runs on a second
// wire (svc0 on every node) between the ranks' service addresses (`--address ...@svc0`, the
// only addresses there), and rank 1's moves with it to C: there its connections are rebuilt
// from the same address, and the program ends with the uninterrupted run's values.
TEST_F(MpiGroupTest, NodeLostBringsTheGroupBackWithARanksAddressOnAnotherNode) {
  const std::string expected = Uninterrupted();
  ASSERT_FALSE(expected.empty()) << ReadFile(Dir() + "/plain/log-a") << ReadFile(Dir() + "/plain/log-b");
  ASSERT_TRUE(net_.AddWire("svc0"));
  ASSERT_NO_FATAL_FAILURE(StartCluster("3", /*third=*/true));
  out_ = Dir() + "/run";
  std::string handoff = Dir() + "/handoff";
  fs::create_directories(out_);
  fs::create_directories(handoff);
  ASSERT_NO_FATAL_FAILURE(Submit("mpi-1", 1, "pool=bc", OnB(handoff), std::string(kServiceSubnet) + ".101/24@svc0"));
  ASSERT_NO_FATAL_FAILURE(Submit("mpi-0", 0, "host=a", Mpirun(handoff, out_, "svc0"),
                                 std::string(kServiceSubnet) + ".100/24@svc0"));
  ASSERT_TRUE(WaitFor([&] { return Progress() >= 100; }, 120s)) << Logs();
  const std::string service1 = std::string(kServiceSubnet) + ".101";
  EXPECT_TRUE(net_.HasAddress(1, service1)) << net_.Last();
  EXPECT_EQ(RanksIn(*b_, "mpi-1"), 2);

  CommandResult ck = Ctl(*c_, {"group", "checkpoint", "mpi", "--json"});
  ASSERT_TRUE(ck.Exited(0)) << ck.Describe() << Logs();
  std::string id = ParseJson(ck)["checkpoint"].value("id", "");
  int at_checkpoint = Progress();
  ASSERT_TRUE(WaitFor([&] { return Progress() >= at_checkpoint + 30; }, 60s)) << Logs();

  // Node B dies: its daemon, its processes, its link.
  uint64_t seq = 0;
  for (const json& e : Events(*c_)) seq = std::max<uint64_t>(seq, JsonInt(e["seq"]));
  std::string procs = ReadFile("/sys/fs/cgroup/freezer/cairn/" + b_->node() + ".mpi-1/cgroup.procs");
  b_->Kill(SIGKILL);
  b_->Wait();
  for (absl::string_view p : absl::StrSplit(procs, '\n', absl::SkipEmpty())) ::kill(std::atoi(std::string(p).c_str()), SIGKILL);
  for (const char* link : {"wire0", "svc0"}) {
    ASSERT_TRUE(net_.Ip({"-n", net_.Namespace(1), "link", "set", link, "down"})) << net_.Last();
  }

  json failover = WaitEvent(*c_, seq, [](const json& e) { return e.value("kind", "") == "group-failover"; }, 60s);
  ASSERT_FALSE(failover.is_null()) << Logs();
  EXPECT_TRUE(absl::StrContains(failover.value("reason", ""), id)) << failover.dump();
  json restored = WaitEvent(*c_, seq, [](const json& e) { return e.value("kind", "") == "group-restored"; }, 60s);
  ASSERT_FALSE(restored.is_null()) << Logs();
  EXPECT_EQ(StateOf(*c_node_, "mpi-1"), "running") << Logs();
  EXPECT_EQ(RanksIn(*c_node_, "mpi-1"), 2);
  EXPECT_TRUE(net_.HasAddress(2, service1)) << "rank 1's address did not come to C: " << net_.Last();
  ASSERT_TRUE(WaitFor([&] { return !ReadFile(out_ + "/result").empty(); }, 180s)) << Logs();
  EXPECT_EQ(ReadFile(out_ + "/result"), expected);
  EXPECT_EQ(Job(*a_, "mpi-0").value("network_hold", ""), "");
  EXPECT_EQ(Job(*c_node_, "mpi-1").value("network_hold", ""), "");
}

}  // namespace
}  // namespace cairn::testing
