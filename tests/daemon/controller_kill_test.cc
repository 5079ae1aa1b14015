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

#include <signal.h>

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
    std::string out = Dir() + "/job";
    std::vector<std::string> submit = {"submit", "--id", "train", "--cpus", "1", "--memory-mb", "100",
                                       "--work-hours", "10", "--json", "--"};
    for (auto& arg : PythonJob(out)) submit.push_back(arg);
    CommandResult sub = Ctl(*c, submit);
    ASSERT_TRUE(sub.Exited(0)) << sub.Describe() << c->Log();
    ASSERT_EQ(ParseJson(sub).value("node_id", ""), y.node()) << sub.out;
    ASSERT_EQ(StateOn(y), "running") << y.Log();

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
    EXPECT_EQ(StateOn(there), "running");
    EXPECT_NE(StateOn(not_there), "running");
    EXPECT_EQ(NodeOfJob(*c), there.node()) << Status(*c).dump();
    // Nothing of the decision is left in flight: it is not resolved again, and rules act again.
    std::this_thread::sleep_for(2s);
    int ends = 0;
    for (const json& e : Events(*c)) {
      ends += absl::StartsWith(e.value("kind", ""), "decision-") && e.value("job_id", "") == "train";
    }
    EXPECT_EQ(ends, 1) << c->Log();

    Release(out);
    ASSERT_TRUE(WaitFor([&] { return StateOn(there) == "exited"; }, 180s)) << there.Log();
    EXPECT_EQ(ReadFile(out + "/result"), expected);
    EXPECT_NE(StateOn(not_there), "running");
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

}  // namespace
}  // namespace cairn::testing
