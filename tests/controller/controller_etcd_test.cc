// Several cairn-controllers on a real 3-member etcd cluster (Debian's etcd-server) on loopback:
// one leads, the others follow; killing the leader hands the leadership to another controller
// once the leader's lease expires, and no job is lost.

#include "absl/strings/match.h"
#include "controller_harness.h"

namespace cairn::testing {
namespace {

using nlohmann::json;

constexpr char kLeaseTtl[] = "2";

class ControllerEtcdTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (EtcdCluster::Binary().empty()) {
      GTEST_SKIP() << "etcd is not installed (/usr/bin/etcd): `apt-get install etcd-server etcd-client`, "
                      "or run scripts/install-deps.sh; this test needs a real etcd cluster";
    }
    etcd_ = std::make_unique<EtcdCluster>(dir_.path());
    ASSERT_TRUE(etcd_->Start());
  }

  // The controllers that currently say they lead.
  std::vector<ControllerProcess*> Leaders() {
    std::vector<ControllerProcess*> out;
    for (auto& c : controllers_) {
      if (c->pid() <= 0) continue;
      auto l = c->Leader();
      if (l && l->leader()) out.push_back(c.get());
    }
    return out;
  }
  ControllerProcess* WaitOneLeader(std::chrono::milliseconds timeout) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      auto l = Leaders();
      EXPECT_LE(l.size(), 1u) << "two controllers lead at once";
      if (l.size() == 1) return l[0];
      std::this_thread::sleep_for(50ms);
    }
    return nullptr;
  }
  std::string AllAddresses() const {
    std::string out;
    for (const auto& c : controllers_) out += (out.empty() ? "" : ",") + c->address();
    return out;
  }
  std::vector<std::string> AddressList() const {
    std::vector<std::string> out;
    for (const auto& c : controllers_) out.push_back(c->address());
    return out;
  }

  TempDir dir_;
  std::unique_ptr<EtcdCluster> etcd_;
  std::vector<std::unique_ptr<ControllerProcess>> controllers_;
};

TEST_F(ControllerEtcdTest, LeaderKilledAnotherTakesOverWithoutLosingJobs) {
  for (const char* name : {"ctl-a", "ctl-b", "ctl-c"}) {
    controllers_.push_back(std::make_unique<ControllerProcess>(
        dir_.path(), name, etcd_->StoreSpec(),
        std::vector<std::string>{"--lease-ttl", kLeaseTtl, "--heartbeat-timeout", "6"}));
    ASSERT_TRUE(controllers_.back()->Start());
  }
  ControllerProcess* leader = WaitOneLeader(15s);
  ASSERT_NE(leader, nullptr);
  // Followers refuse work and name the leader.
  for (auto& c : controllers_) {
    if (c.get() == leader) continue;
    // (The CLI waits up to --timeout for a leader to appear at the addresses it was given.)
    auto t0 = std::chrono::steady_clock::now();
    CommandResult r = RunCairn({"cluster", "status", "--timeout", "1", "--controller", c->address()}, dir_.path());
    EXPECT_TRUE(r.FailedCleanly()) << r.Describe();
    EXPECT_TRUE(absl::StrContains(r.err, "does not lead")) << r.Describe();
    EXPECT_GE(std::chrono::steady_clock::now() - t0, 900ms);
  }

  NodeAgent spot(AddressList(), MakeNode("spot-1", 0.9, true, 1, "V100"));
  NodeAgent od(AddressList(), MakeNode("od-1", 3.06, false, 1, "V100"));
  ASSERT_TRUE(spot.Register());
  ASSERT_TRUE(od.Register());
  spot.StartHeartbeats(300ms);
  od.StartHeartbeats(300ms);
  CommandResult r = RunCairn({"submit", "--controller", AllAddresses(), "--id", "survivor", "--gpus", "1", "--cpus",
                              "4", "--memory-mb", "8000", "--json"},
                             dir_.path());
  ASSERT_TRUE(r.Exited(0)) << r.Describe();
  ASSERT_EQ(ParseJson(r)["node_id"], "spot-1") << r.out;

  // Kill the leader without warning: its lease must expire before anyone else leads.
  std::string old_id = leader->Leader()->controller_id();
  auto killed = std::chrono::steady_clock::now();
  leader->Kill(SIGKILL);
  ControllerProcess* next = WaitOneLeader(20s);
  ASSERT_NE(next, nullptr) << "no controller took over";
  double takeover_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - killed).count();
  EXPECT_NE(next, leader);
  RecordProperty("takeover_seconds", std::to_string(takeover_s));
  std::printf("takeover after SIGKILL of the leader: %.2f s (lease TTL %s s)\n", takeover_s, kLeaseTtl);

  // The job is where it was, on the same node, through the CLI trying every address.
  r = RunCairn({"cluster", "status", "--json", "--controller", AllAddresses()}, dir_.path());
  ASSERT_TRUE(r.Exited(0)) << r.Describe();
  json st = ParseJson(r);
  EXPECT_NE(st["controller_id"], old_id);
  ASSERT_EQ(st["jobs"].size(), 1u) << r.out;
  EXPECT_EQ(st["jobs"][0]["spec"]["id"], "survivor");
  EXPECT_EQ(st["jobs"][0]["node_id"], "spot-1");
  EXPECT_EQ(st["nodes"].size(), 2u);
  r = RunCairn({"job", "explain", "survivor", "--controller", AllAddresses()}, dir_.path());
  ASSERT_TRUE(r.Exited(0)) << r.Describe();
  EXPECT_TRUE(absl::StrContains(r.out, "placed on spot-1")) << r.out;

  // The new leader works: nodes keep heartbeating to it (none is declared lost), and it places jobs.
  int acked = spot.acked();
  std::this_thread::sleep_for(1500ms);
  EXPECT_GT(spot.acked(), acked) << "heartbeats do not reach the new leader";
  r = RunCairn({"submit", "--controller", AllAddresses(), "--id", "after", "--gpus", "1", "--cpus", "4",
                "--memory-mb", "8000", "--json"},
               dir_.path());
  ASSERT_TRUE(r.Exited(0)) << r.Describe();
  EXPECT_EQ(ParseJson(r)["node_id"], "od-1") << r.out;
  r = RunCairn({"events", "--json", "--controller", AllAddresses()}, dir_.path());
  ASSERT_TRUE(r.Exited(0)) << r.Describe();
  int elections = 0;
  json events = ParseJson(r)["events"];
  for (const json& e : events) {
    EXPECT_NE(e["kind"], "node-lost") << e.dump();
    if (e["kind"] == "leader-elected") ++elections;
  }
  EXPECT_EQ(elections, 2);

  // A clean stop resigns at once: the third controller leads well within a lease.
  auto stopping = std::chrono::steady_clock::now();
  next->Kill(SIGTERM);
  EXPECT_TRUE(next->Wait().ExitedWith(0));
  ControllerProcess* third = WaitOneLeader(10s);
  ASSERT_NE(third, nullptr);
  double handover_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - stopping).count();
  std::printf("handover after SIGTERM of the leader: %.2f s\n", handover_s);
  r = RunCairn({"cluster", "status", "--json", "--controller", AllAddresses()}, dir_.path());
  ASSERT_TRUE(r.Exited(0)) << r.Describe();
  EXPECT_EQ(ParseJson(r)["jobs"].size(), 2u) << r.out;

  // etcd loses the member every controller tries first: the controllers go on through the others.
  etcd_->KillMember(0);
  r = RunCairn({"submit", "--controller", AllAddresses(), "--id", "after-etcd-loss", "--cpus", "1",
                "--memory-mb", "100", "--json"},
               dir_.path());
  ASSERT_TRUE(r.Exited(0)) << r.Describe() << third->Log();
  r = RunCairn({"cluster", "status", "--json", "--controller", AllAddresses()}, dir_.path());
  ASSERT_TRUE(r.Exited(0)) << r.Describe();
  EXPECT_EQ(ParseJson(r)["jobs"].size(), 3u) << r.out;
  spot.Stop();
  od.Stop();
}

}  // namespace
}  // namespace cairn::testing
