// The controller killed while it carries a decision out, with real daemons (issue 21): a
// cairn-controller (`--dispatch cairnd`, SQLite) and two cairnd. The python job of the daemon
// tests runs on y ($1.20/h, 10 h of declared work); x ($0.30/h) registers, and the
// cheaper-capacity rule decides to move the job there, live. The controller runs with
// CAIRN_FAULT_PAUSE at one of its fault points and is SIGKILLed there:
//   controller-in-flight  the decision stored in flight, no daemon asked yet;
//   controller-carried    the migration done, its outcome not yet stored.
// It is started again on the same store; the daemons register again; the new leader resolves
// the decision by asking them (abandoned: the job still runs on y; resolved: it runs on x).
// Whatever the cut, the job runs on exactly one node, the controller places it there, the
// decision's end is an event with its reason, and the job finishes with an uninterrupted run's
// result.
//
// And deposed: two controllers on a 3-member etcd cluster; the leader stops (SIGSTOP, as a
// partition or a long pause would) with a move stored in flight; the other takes the lead, the
// daemons register with it, it resolves the move (abandoned: the job runs on y). When the old
// leader wakes and carries its stale move out, the daemon refuses its call for its old term.
// And an etcd member killed while a move is in flight: the move is carried out and stored
// through the other two.

#include <signal.h>
#include <sys/stat.h>

#include <functional>
#include <optional>

#include "absl/strings/match.h"
#include "cluster_harness.h"

namespace cairn::testing {
namespace {

using nlohmann::json;

class ControllerKillTest : public ClusterFixture {
 protected:
  static std::string StateOn(const DaemonProcess& d) {
    json j = json::parse(d.Cairn({"job", "show", "train", "--json"}, 20s).out, nullptr, false);
    return j.is_discarded() || j.is_null() ? "" : j["job"].value("state", "");
  }
  // "train": the python job of the daemon tests, as nobody (the controller passes its user to the
  // daemon, and a daemon that receives it by migration restores it only as nobody), 10 h of
  // declared work, submitted through `ctl` and checked running on `y`. Returns its output dir.
  std::string SubmitTrain(const std::function<CommandResult(std::vector<std::string>)>& ctl, const DaemonProcess& y) {
    EXPECT_EQ(::chmod(Dir().c_str(), 0755), 0);
    std::string out = Dir() + "/job";
    std::vector<std::string> submit = {"submit", "--id", "train", "--cpus", "1", "--memory-mb", "100",
                                       "--work-hours", "10", "--user", "nobody", "--json", "--"};
    for (auto& arg : PythonJob(out)) submit.push_back(arg);
    EXPECT_EQ(::chmod(out.c_str(), 0777), 0);
    CommandResult sub = ctl(submit);
    EXPECT_TRUE(sub.Exited(0)) << sub.Describe();
    EXPECT_EQ(ParseJson(sub).value("node_id", ""), y.node()) << sub.out;
    EXPECT_EQ(StateOn(y), "running") << y.RunLog();
    return out;
  }
  // Starts `c` paused at controller-in-flight for 3 s (CAIRN_FAULT_PAUSE_S) and waits for it to lead.
  static ::testing::AssertionResult StartPausingLeader(ControllerProcess& c) {
    ::setenv("CAIRN_FAULT_PAUSE", "controller-in-flight", 1);
    ::setenv("CAIRN_FAULT_PAUSE_S", "3", 1);
    ::testing::AssertionResult started = c.Start();
    ::unsetenv("CAIRN_FAULT_PAUSE");
    ::unsetenv("CAIRN_FAULT_PAUSE_S");
    return started ? c.WaitLeader(15s) : started;
  }
  // A cairnd on loopback TCP joined to `controllers` (unix sockets) at `price`, checkpoints in
  // the shared store `shared`; started, and (`wait`) heartbeating.
  std::unique_ptr<DaemonProcess> Join(const std::string& name, const std::string& controllers, const std::string& price,
                                      const std::string& shared, bool wait) {
    std::string token = Token("daemon.token", "daemon-token-0123456789abcdef");
    auto d = std::make_unique<DaemonProcess>(
        Dir(), name,
        std::vector<std::string>{"--listen", "127.0.0.1:" + std::to_string(FreeTcpPort()), "--token-file", token,
                                 "--controller", controllers, "--price-per-hour", price, "--storage", "dir:" + shared});
    EXPECT_TRUE(d->Start());
    if (wait) {
      EXPECT_TRUE(WaitFor([&] { return absl::StrContains(d->Cairn({"node", "info"}).out, "heartbeats ok"); }, 30s))
          << d->RunLog();
    }
    return d;
  }
  std::string NodeOfJob(const ControllerProcess& c) {
    for (const json& j : Status(c).value("jobs", json::array())) {
      if (j["spec"].value("id", "") == "train") return j.value("node_id", "");
    }
    return "";
  }
  // The cut at `stage`; `kind` is how the new leader ends the decision, `runs_on` "x" or "y".
  void KillAndRestart(const std::string& stage, const std::string& kind, const std::string& runs_on) {
    std::string expected = Expected();
    ASSERT_FALSE(expected.empty());
    ::setenv("CAIRN_FAULT_PAUSE", stage.c_str(), 1);
    std::unique_ptr<ControllerProcess> c = StartTcpController("6");
    ::unsetenv("CAIRN_FAULT_PAUSE");
    ASSERT_NE(c, nullptr);
    std::string shared = SharedStore();
    DaemonProcess y(Dir(), "y", JoinArgs("1.20", shared, {}));
    ASSERT_TRUE(y.Start());
    ASSERT_FALSE(WaitEvent(*c, 0, [&](const json& e) {
                   return e.value("kind", "") == "node-registered" && e.value("node_id", "") == y.node();
                 }, 30s).is_null())
        << c->Log() << y.Log();
    std::string out = SubmitTrain([&](std::vector<std::string> a) { return Ctl(*c, std::move(a)); }, y);
    ASSERT_FALSE(HasFailure()) << c->Log();

    // x registers: cheaper capacity. The controller stops at the stage and is killed there.
    DaemonProcess x(Dir(), "x", JoinArgs("0.30", shared, {}));
    ASSERT_TRUE(x.Start());
    ASSERT_TRUE(WaitFor([&] { return absl::StrContains(c->Log(), "cairn: fault point " + stage); }, 60s))
        << c->Log() << x.Log() << y.Log();
    c->Kill(SIGKILL);
    c->Wait();
    const std::string on_x = StateOn(x), on_y = StateOn(y);
    EXPECT_TRUE((on_x == "running") != (on_y == "running")) << "x: " << on_x << ", y: " << on_y;

    // Started again on the same store: the daemons register again, the decision is resolved.
    c = RestartTcpController("6");
    ASSERT_NE(c, nullptr);
    json ended = WaitEvent(*c, 0, [](const json& e) {
      return absl::StartsWith(e.value("kind", ""), "decision-") && e.value("job_id", "") == "train";
    }, 60s);
    ASSERT_FALSE(ended.is_null()) << c->Log();
    EXPECT_EQ(ended.value("kind", ""), kind) << ended.dump();
    EXPECT_EQ(ended.value("rule", ""), "cheaper-capacity") << ended.dump();
    const DaemonProcess& there = runs_on == "x" ? x : y;
    const DaemonProcess& not_there = runs_on == "x" ? y : x;
    // Where it runs, read before asking whether the rules have decided anew since (the cheaper
    // capacity is still there: a later decision may move the job at once, faster than these
    // reads — then where it runs says nothing of how this decision ended).
    const std::string on_there = StateOn(there), on_not_there = StateOn(not_there), node = NodeOfJob(*c);
    json shown = json::parse(there.Cairn({"job", "show", "train", "--json"}).out, nullptr, false);
    ASSERT_FALSE(shown.is_discarded());
    const std::string uid =
        LineStartingWith(ReadFile("/proc/" + std::to_string(JsonInt(shown["job"]["host_pid"])) + "/status"), "Uid:");
    json again;  // the first decision the rules made anew since
    for (const json& e : Events(*c)) {
      if (again.is_null() && JsonInt(e["seq"]) > JsonInt(ended["seq"]) && e.value("kind", "") == "decision" &&
          e.value("job_id", "") == "train") {
        again = e;
      }
    }
    if (!again.is_null()) {
      // Then that decision names where this one left the job.
      EXPECT_EQ(again.value("node_id", ""), there.node()) << again.dump();
    } else {
      EXPECT_EQ(on_there, "running");
      EXPECT_NE(on_not_there, "running");
      EXPECT_EQ(node, there.node()) << Status(*c).dump();
      EXPECT_EQ(uid, "Uid:\t65534\t65534\t65534\t65534");
    }
    // Nothing of the decision is left in flight: it is not resolved again, and rules act again.
    std::this_thread::sleep_for(2s);
    int ends = 0;
    for (const json& e : Events(*c)) {
      ends += absl::StartsWith(e.value("kind", ""), "decision-") && e.value("job_id", "") == "train";
    }
    EXPECT_EQ(ends, 1) << c->Log();

    // Rules act again: a later cheaper-capacity decision may still move it to x (after a node
    // re-registers, as one whose heartbeats were late under load does). Wherever it finishes,
    // it finishes once, with the uninterrupted result.
    Release(out);
    ASSERT_TRUE(WaitFor([&] { return StateOn(x) == "exited" || StateOn(y) == "exited"; }, 180s))
        << "x: " << StateOn(x) << ", y: " << StateOn(y) << "\n" << c->Log() << there.Log() << not_there.Log();
    EXPECT_EQ(ReadFile(out + "/result"), expected);
    EXPECT_FALSE(StateOn(x) == "running" || StateOn(y) == "running");
    x.KillJobs();
    y.KillJobs();
  }
};

// Killed with the decision stored and no daemon asked: the job still runs on y, so the new leader
// abandons the move, saying why.
TEST_F(ControllerKillTest, KilledBeforeAskingAnyNodeTheMoveIsAbandoned) {
  KillAndRestart("controller-in-flight", "decision-abandoned", "y");
}

// Killed after the live migration and before its outcome was stored: the job runs on x, and the
// new leader finds it there and places it there.
TEST_F(ControllerKillTest, KilledAfterTheMoveBeforeStoringItTheMoveIsFound) {
  KillAndRestart("controller-carried", "decision-resolved", "x");
}

TEST_F(ControllerKillTest, DeposedLeaderCannotCarryOutItsStaleDecision) {
  if (EtcdCluster::Binary().empty()) GTEST_SKIP() << "etcd is not installed (/usr/bin/etcd): scripts/install-deps.sh";
  std::string expected = Expected();
  ASSERT_FALSE(expected.empty());
  EtcdCluster etcd(Dir());
  ASSERT_TRUE(etcd.Start());
  const std::vector<std::string> flags = {"--dispatch", "cairnd", "--lease-ttl", "2", "--heartbeat-interval", "0.3",
                                          "--heartbeat-timeout", "15"};
  ControllerProcess c1(Dir(), "c1", etcd.StoreSpec(), flags);
  ASSERT_TRUE(StartPausingLeader(c1)) << c1.Log();
  ControllerProcess c2(Dir(), "c2", etcd.StoreSpec(), flags);
  ASSERT_TRUE(c2.Start());
  const std::string both = c1.address() + "," + c2.address();
  auto ctl = [&](std::vector<std::string> args) { return RunCairn(args, Dir(), {"CAIRN_CONTROLLER=" + both}); };
  auto node_of_job = [&]() -> std::string {
    json st = json::parse(ctl({"cluster", "status", "--json"}).out, nullptr, false);
    if (st.is_discarded()) return "?";
    for (const json& j : st.value("jobs", json::array())) {
      if (j["spec"].value("id", "") == "train") return j.value("node_id", "");
    }
    return "";
  };
  auto events = [&]() {
    json j = json::parse(ctl({"events", "--json"}).out, nullptr, false);
    return j.is_discarded() ? json::array() : j.value("events", json::array());
  };
  std::string shared = SharedStore();
  std::unique_ptr<DaemonProcess> yp = Join("y", both, "1.20", shared, /*wait=*/true);
  DaemonProcess& y = *yp;
  ASSERT_FALSE(HasFailure()) << c1.Log();
  std::string out = SubmitTrain(ctl, y);
  ASSERT_FALSE(HasFailure()) << c1.Log();

  // x registers: c1 decides the move, stores it in flight, and stops there: deposed.
  std::unique_ptr<DaemonProcess> xp = Join("x", both, "0.30", shared, /*wait=*/false);  // its registration pauses c1
  DaemonProcess& x = *xp;
  ASSERT_TRUE(WaitFor([&] { return absl::StrContains(c1.Log(), "cairn: fault point controller-in-flight"); }, 60s))
      << c1.Log() << x.Log();
  ASSERT_EQ(::kill(c1.pid(), SIGSTOP), 0);
  bool c2_resolved = WaitFor(
      [&] {
        for (const json& e : events()) {
          if (e.value("kind", "") == "decision-abandoned" && e.value("job_id", "") == "train") return true;
        }
        return false;
      },
      60s);
  std::optional<api::LeaderResponse> l2 = c2.Leader();
  ::kill(c1.pid(), SIGCONT);
  ASSERT_TRUE(c2_resolved) << c2.Log() << x.Log() << y.Log();
  ASSERT_TRUE(l2.has_value() && l2->leader()) << c2.Log();

  // c1 wakes with its move: y refuses it for its old term, and c1 steps down. (c2 may have moved
  // the job to x meanwhile, on its own decision: that is its to make.)
  ASSERT_TRUE(WaitFor([&] { return absl::StrContains(y.RunLog(), "has taken the lead since"); }, 30s))
      << y.RunLog() << c1.Log();
  EXPECT_TRUE(WaitFor([&] { auto l = c1.Leader(); return l.has_value() && !l->leader(); }, 20s)) << c1.Log();
  // One copy, placed where it runs. (c2 may be moving it meanwhile: its status answers once a
  // move is done, so the nodes are asked again until both say the same.)
  bool on_x = false, on_y = false;
  std::string placed;
  bool agree = WaitFor(
      [&] {
        on_x = StateOn(x) == "running";
        on_y = StateOn(y) == "running";
        placed = node_of_job();
        return on_x != on_y && placed == (on_x ? x : y).node() && StateOn(on_x ? x : y) == "running";
      },
      60s);
  ASSERT_TRUE(on_x != on_y) << "x: " << StateOn(x) << ", y: " << StateOn(y);
  const DaemonProcess& there = on_x ? x : y;
  EXPECT_TRUE(agree) << "placed on " << placed << ", runs on " << there.node() << "\n" << c2.Log();
  // Every move c2 made is a decision of its own (term 2), none of c1's.
  for (const json& e : events()) {
    if (e.value("kind", "") == "decision" && e.value("job_id", "") == "train") {
      EXPECT_TRUE(absl::StrContains(c2.Log(), "event seq=" + std::to_string(JsonInt(e["seq"])) + " kind=decision"))
          << e.dump();
    }
  }

  Release(out);
  ASSERT_TRUE(WaitFor([&] { return StateOn(there) == "exited"; }, 180s)) << there.Log();
  EXPECT_EQ(ReadFile(out + "/result"), expected);
  EXPECT_NE(StateOn(on_x ? y : x), "running");
  x.KillJobs();
  y.KillJobs();
}

// Partitioned from etcd alone: the leader still reaches the daemons (and they it), but every
// byte between it and etcd is dropped (its connections stay open: silence, not resets) from the
// moment it has stored a move in flight. Its lease lapses, the other controller takes the lead
// and resolves the move; whatever the cut-off leader does with its move meanwhile (it wakes from
// its pause 3 s later and may ask the daemons), the job runs on exactly one node, the decision
// ends once with its reason, and the job finishes once with the uninterrupted result.
TEST_F(ControllerKillTest, LeaderCutOffFromEtcdAloneLosesTheLeadAndTheJobRunsOnce) {
  if (EtcdCluster::Binary().empty()) GTEST_SKIP() << "etcd is not installed (/usr/bin/etcd): scripts/install-deps.sh";
  std::string expected = Expected();
  ASSERT_FALSE(expected.empty());
  EtcdCluster etcd(Dir());
  ASSERT_TRUE(etcd.Start());
  std::vector<std::unique_ptr<Partitionable>> paths;  // c1's only way to etcd
  const std::vector<std::string> flags = {"--dispatch", "cairnd", "--lease-ttl", "2", "--heartbeat-interval", "0.3",
                                          "--heartbeat-timeout", "15"};
  ControllerProcess c1(Dir(), "c1", PartitionableStoreSpec(etcd, &paths), flags);
  ASSERT_TRUE(StartPausingLeader(c1)) << c1.Log();
  ControllerProcess c2(Dir(), "c2", etcd.StoreSpec(), flags);
  ASSERT_TRUE(c2.Start());
  const std::string both = c1.address() + "," + c2.address();
  std::string shared = SharedStore();
  std::unique_ptr<DaemonProcess> yp = Join("y", both, "1.20", shared, /*wait=*/true);
  DaemonProcess& y = *yp;
  ASSERT_FALSE(HasFailure()) << c1.Log();
  std::string out = SubmitTrain([&](std::vector<std::string> a) { return Ctl(c1, std::move(a)); }, y);
  ASSERT_FALSE(HasFailure()) << c1.Log();

  // x registers: c1 decides the move, stores it in flight, and is cut off from etcd there.
  std::unique_ptr<DaemonProcess> xp = Join("x", both, "0.30", shared, /*wait=*/false);
  DaemonProcess& x = *xp;
  ASSERT_TRUE(WaitFor([&] { return absl::StrContains(c1.Log(), "cairn: fault point controller-in-flight"); }, 60s))
      << c1.Log() << x.Log();
  for (auto& p : paths) p->Cut();

  // c2 takes the lead and ends the decision, once.
  auto ends = [&] {
    std::vector<json> out;
    for (const json& e : Events(c2)) {
      if (absl::StartsWith(e.value("kind", ""), "decision-") && e.value("job_id", "") == "train") out.push_back(e);
    }
    return out;
  };
  ASSERT_TRUE(WaitFor([&] { return !ends().empty(); }, 60s)) << c2.Log() << c1.Log() << x.Log() << y.Log();
  std::optional<api::LeaderResponse> l2 = c2.Leader();
  ASSERT_TRUE(l2.has_value() && l2->leader()) << c2.Log();
  json ended = ends().front();
  std::printf("the cut-off leader's move: %s (%s)\n", ended.value("kind", "").c_str(), ended.value("reason", "").c_str());
  EXPECT_EQ(ended.value("rule", ""), "cheaper-capacity") << ended.dump();
  EXPECT_FALSE(ended.value("reason", "").empty()) << ended.dump();
  // c1 knows it no longer leads (it cannot renew its lease). It answers nothing while it carries
  // its move out (the controller's lock), and each of its writes to etcd waits 3 s for nothing.
  EXPECT_TRUE(WaitFor([&] { auto l = c1.Leader(); return l.has_value() && !l->leader(); }, 90s)) << c1.Log();

  std::this_thread::sleep_for(3s);  // whatever c1 was doing with its move is done or refused
  const bool on_x = StateOn(x) == "running", on_y = StateOn(y) == "running";
  ASSERT_TRUE(on_x != on_y) << "x: " << StateOn(x) << ", y: " << StateOn(y) << "\n" << c1.Log() << c2.Log();
  const DaemonProcess& there = on_x ? x : y;
  EXPECT_TRUE(WaitFor([&] { return NodeOfJob(c2) == there.node(); }, 20s)) << Status(c2).dump();
  EXPECT_EQ(ends().size(), 1u) << c2.Log();

  Release(out);
  ASSERT_TRUE(WaitFor([&] { return StateOn(x) == "exited" || StateOn(y) == "exited"; }, 180s))
      << "x: " << StateOn(x) << ", y: " << StateOn(y) << "\n" << c2.Log() << x.Log() << y.Log();
  EXPECT_EQ(ReadFile(out + "/result"), expected);
  EXPECT_FALSE(StateOn(x) == "running" || StateOn(y) == "running");
  x.KillJobs();
  y.KillJobs();
}

TEST_F(ControllerKillTest, EtcdMemberKilledDuringAMoveTheMoveIsStored) {
  if (EtcdCluster::Binary().empty()) GTEST_SKIP() << "etcd is not installed (/usr/bin/etcd): scripts/install-deps.sh";
  std::string expected = Expected();
  ASSERT_FALSE(expected.empty());
  EtcdCluster etcd(Dir());
  ASSERT_TRUE(etcd.Start());
  ControllerProcess c(Dir(), "c", etcd.StoreSpec(),
                      {"--dispatch", "cairnd", "--lease-ttl", "5", "--heartbeat-interval", "0.3", "--heartbeat-timeout", "15"});
  ASSERT_TRUE(StartPausingLeader(c)) << c.Log();
  std::string shared = SharedStore();
  std::unique_ptr<DaemonProcess> yp = Join("y", c.address(), "1.20", shared, /*wait=*/true);
  DaemonProcess& y = *yp;
  ASSERT_FALSE(HasFailure()) << c.Log();
  std::string out = SubmitTrain([&](std::vector<std::string> a) { return Ctl(c, std::move(a)); }, y);
  ASSERT_FALSE(HasFailure()) << c.Log();
  std::unique_ptr<DaemonProcess> xp = Join("x", c.address(), "0.30", shared, /*wait=*/false);
  DaemonProcess& x = *xp;
  ASSERT_TRUE(WaitFor([&] { return absl::StrContains(c.Log(), "cairn: fault point controller-in-flight"); }, 60s))
      << c.Log();
  etcd.KillMember(0);  // the first endpoint the controller tries
  json moved = WaitEvent(c, 0, [](const json& e) {
    return e.value("kind", "") == "decision" && e.value("rule", "") == "cheaper-capacity" && e.value("job_id", "") == "train";
  }, 60s);
  ASSERT_FALSE(moved.is_null()) << c.Log();
  EXPECT_TRUE(absl::StartsWith(moved.value("dispatch", ""), "migrated live from " + y.node() + " to " + x.node()))
      << moved.dump();
  EXPECT_EQ(StateOn(x), "running");
  EXPECT_NE(StateOn(y), "running");
  EXPECT_EQ(NodeOfJob(c), x.node()) << Status(c).dump();
  auto l = c.Leader();
  EXPECT_TRUE(l.has_value() && l->leader()) << c.Log();
  Release(out);
  ASSERT_TRUE(WaitFor([&] { return StateOn(x) == "exited"; }, 180s)) << x.RunLog();
  EXPECT_EQ(ReadFile(out + "/result"), expected);
  x.KillJobs();
  y.KillJobs();
}

}  // namespace
}  // namespace cairn::testing
