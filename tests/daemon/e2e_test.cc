// Issue 6's end-to-end test on real machines' parts: one cairn-controller (`--dispatch cairnd`,
// TCP with a token) and three cairnd (TCP with a token, distinct node names and state
// directories, one shared dir: checkpoint store), a metadata responder playing the spot node's
// cloud. A python3 job (the hash chain of the integration harness) placed on the cheapest node,
// the spot node A, keeps going across
//   (b) a spot notice on A          -> spot-notice rule: move to B (the cheapest other), live;
//   (c) B killed, daemon and job     -> node-lost rule: restore B's newest reported checkpoint on C
//       (A is draining: its reclaim was announced);
//   (d) B's machine back, cheaper    -> cheaper-capacity rule: move the job from C to B, live;
// and (e) ends with the result an uninterrupted run gives. Each move is a controller event with
// its rule and reason, checked here; the job never runs on two nodes at once.
//
// Prices: A 0.30/h spot, B 0.60/h on-demand, C 1.20/h on-demand. The job declares 10 h of work,
// so moving off C saves (1.20 - 0.60) x 10 h, far more than a move costs.

#include <signal.h>
#include <sys/stat.h>

#include <filesystem>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "cluster_harness.h"

namespace cairn::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

class EndToEndTest : public ClusterFixture {
 protected:
  static bool Decision(const json& e, const std::string& rule) {
    return e.value("kind", "") == "decision" && e.value("rule", "") == rule && e.value("job_id", "") == "train";
  }
  static json JobOn(const DaemonProcess& d) {
    json j = json::parse(d.Cairn({"job", "show", "train", "--json"}, 20s).out, nullptr, false);
    return j.is_discarded() ? json() : j;
  }
  static std::string StateOn(const DaemonProcess& d) {
    json j = JobOn(d);
    return j.is_null() ? "" : j["job"].value("state", "");
  }
  // `decision` moves the job from `from` to `to` for a reason that mentions `why`, and the
  // dispatcher carried it out live, daemon to daemon.
  static void ExpectLiveMove(const json& decision, const DaemonProcess& from, const DaemonProcess& to,
                             const std::string& why) {
    EXPECT_EQ(decision.value("action", ""), "migrate") << decision.dump();
    EXPECT_EQ(decision.value("node_id", ""), from.node()) << decision.dump();
    EXPECT_EQ(decision.value("target_node_id", ""), to.node()) << decision.dump();
    EXPECT_TRUE(absl::StrContains(decision.value("reason", ""), why)) << decision.dump();
    ASSERT_TRUE(absl::StartsWith(decision.value("dispatch", ""), "migrated live from " + from.node() + " to " + to.node()))
        << decision.dump() << from.Log() << to.Log();
  }
  // The controller's view of the job: its node.
  std::string NodeOfJob(const ControllerProcess& c) {
    for (const json& j : Status(c).value("jobs", json::array())) {
      if (j["spec"].value("id", "") == "train") return j.value("node_id", "");
    }
    return "";
  }
};

TEST_F(EndToEndTest, JobKeepsGoingAcrossSpotNoticeNodeLossAndCheaperCapacity) {
  auto t0 = std::chrono::steady_clock::now();
  auto step = [&](const char* what) {
    std::printf("[ e2e      ] %5.1f s: %s\n", std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), what);
    std::fflush(stdout);
  };
  std::string expected = Expected();
  ASSERT_FALSE(expected.empty());

  std::unique_ptr<ControllerProcess> cp = StartTcpController("4");
  ASSERT_NE(cp, nullptr);
  ControllerProcess& c = *cp;
  MetadataResponder md(Dir() + "/md");
  ASSERT_TRUE(md.Start());
  std::string shared = SharedStore();
  ASSERT_FALSE(HasFailure());
  DaemonProcess a(Dir(), "a", JoinArgs("0.30", shared, SpotArgs(md.url(), "us-east-1a")));
  DaemonProcess b(Dir(), "b", JoinArgs("0.60", shared, {"--zone", "us-east-1b"}));
  DaemonProcess cn(Dir(), "c", JoinArgs("1.20", shared, {"--zone", "us-east-1c"}));
  ASSERT_TRUE(a.Start());
  ASSERT_TRUE(b.Start());
  ASSERT_TRUE(cn.Start());
  for (const DaemonProcess* d : {&a, &b, &cn}) {
    ASSERT_FALSE(WaitEvent(c, 0, [&](const json& e) {
                   return e.value("kind", "") == "node-registered" && e.value("node_id", "") == d->node();
                 }, 30s).is_null())
        << c.Log() << d->Log();
  }

  // (a) The job goes to the cheapest node, the spot node A, and runs there.
  std::string out = Dir() + "/job";
  std::vector<std::string> submit = {"submit", "--id", "train", "--cpus", "1", "--memory-mb", "100", "--work-hours", "10",
                                     "--checkpoint-interval", "3", "--checkpoint-on-notice", "--notice-checkpoint", "5",
                                     "--json", "--"};
  for (auto& arg : PythonJob(out)) submit.push_back(arg);
  CommandResult sub = Ctl(c, submit);
  ASSERT_TRUE(sub.Exited(0)) << sub.Describe() << c.Log();
  ASSERT_EQ(ParseJson(sub).value("node_id", ""), a.node()) << sub.out;
  ASSERT_EQ(StateOn(a), "running") << a.Cairn({"job", "list"}).out << c.Log();
  EXPECT_EQ(StateOn(b), "");
  EXPECT_EQ(StateOn(cn), "");

  step("a: running on A");
  // (b) A's cloud announces the reclaim: the spot-notice rule checkpoints the job and moves it to
  // B, the cheapest other node, live, daemon to daemon; A drains.
  uint64_t seq = 0;
  for (const json& e : Events(c)) seq = std::max<uint64_t>(seq, JsonInt(e["seq"]));
  absl::Time at = absl::FromUnixSeconds(absl::ToUnixSeconds(absl::Now()) + 120);
  md.SetNotice("aws", R"({"action": "terminate", "time": ")" +
                          absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", at, absl::UTCTimeZone()) + R"("})");
  json notice = WaitEvent(c, seq, [](const json& e) { return Decision(e, "spot-notice"); }, 60s);
  ASSERT_FALSE(notice.is_null()) << c.Log() << a.Log();
  ExpectLiveMove(notice, a, b, "reclaim in");
  ASSERT_FALSE(HasFatalFailure());
  EXPECT_FALSE(WaitEvent(c, seq, [&](const json& e) {
                 return e.value("kind", "") == "node-draining" && e.value("node_id", "") == a.node();
               }, 10s).is_null());
  ASSERT_TRUE(WaitFor([&] { return StateOn(b) == "running"; }, 30s)) << b.Log();
  EXPECT_NE(StateOn(a), "running") << "the job must not run on two nodes";
  EXPECT_EQ(NodeOfJob(c), b.node());

  step("b: moved to B");
  // (c) A periodic checkpoint of the job on B reaches the shared store and the controller; then
  // B dies: its daemon and the job's processes are SIGKILLed, as a dead machine would lose them.
  uint64_t moved_seq = JsonInt(notice["seq"]);
  json ck = WaitEvent(c, moved_seq, [&](const json& e) {
    return e.value("kind", "") == "checkpoint" && e.value("node_id", "") == b.node() && e.value("job_id", "") == "train";
  }, 60s);
  ASSERT_FALSE(ck.is_null()) << b.Log() << c.Log();
  json on_b = JobOn(b);
  int job_pid = on_b["job"].value("host_pid", 0);
  ASSERT_GT(job_pid, 0) << on_b.dump();
  // Every process of the job: its cgroup's (the job's init, python3 under it).
  std::string procs = "/sys/fs/cgroup/freezer/cairn/" + b.node() + ".train/cgroup.procs";
  ASSERT_FALSE(ReadFile(procs).empty()) << procs;
  b.Kill(SIGKILL);
  for (absl::string_view pid : absl::StrSplit(ReadFile(procs), '\n', absl::SkipEmpty())) {
    ::kill(std::stoi(std::string(pid)), SIGKILL);
  }
  b.Wait();
  EXPECT_TRUE(WaitGone(job_pid, 10s).gone);
  ASSERT_TRUE(WaitFor([&] { return ReadFile(procs).empty(); }, 10s)) << "the job on B still runs: " << ReadFile(procs);
  // The checkpoint the controller knows last when B is declared lost is the one restored.
  json lost = WaitEvent(c, moved_seq, [&](const json& e) {
    return e.value("kind", "") == "node-lost" && e.value("node_id", "") == b.node();
  }, 30s);
  ASSERT_FALSE(lost.is_null()) << c.Log();
  std::string last_ck;
  for (const json& e : Events(c)) {
    if (JsonInt(e["seq"]) < JsonInt(lost["seq"]) && e.value("kind", "") == "checkpoint" &&
        e.value("job_id", "") == "train") {
      last_ck = e.value("reason", "");
    }
  }
  json restore = WaitEvent(c, JsonInt(lost["seq"]), [](const json& e) { return Decision(e, "node-lost"); }, 30s);
  ASSERT_FALSE(restore.is_null()) << c.Log();
  EXPECT_EQ(restore.value("action", ""), "restore") << restore.dump();
  EXPECT_EQ(restore.value("target_node_id", ""), cn.node()) << restore.dump();
  EXPECT_TRUE(absl::StrContains(restore.value("reason", ""), "node " + b.node() + " lost")) << restore.dump();
  EXPECT_TRUE(absl::StrContains(restore.value("reason", ""), "restore checkpoint of t=")) << restore.dump();
  ASSERT_TRUE(absl::StrContains(restore.value("dispatch", ""), "restored on " + cn.node())) << restore.dump() << cn.Log();
  ASSERT_TRUE(WaitFor([&] { return StateOn(cn) == "running"; }, 30s)) << cn.Log();
  json on_c = JobOn(cn);
  std::string restored_from;
  for (const json& e : on_c.value("events", json::array())) {
    if (e.value("kind", "") == "restored") restored_from = e.value("detail", "");
  }
  // "checkpoint ID complete on NODE ..." (controller) and "from checkpoint ID as pid ..." (daemon).
  ASSERT_TRUE(absl::StartsWith(last_ck, "checkpoint ")) << last_ck;
  std::string ck_id = last_ck.substr(11, last_ck.find(' ', 11) - 11);
  EXPECT_TRUE(absl::StartsWith(restored_from, "from checkpoint " + ck_id + " ")) << restored_from << " vs " << last_ck;
  EXPECT_EQ(NodeOfJob(c), cn.node());

  step("c: restored on C");
  // (d) B's machine comes back (its daemon restarts): capacity at half C's price. The
  // cheaper-capacity rule moves the job there, live, daemon to daemon.
  ASSERT_TRUE(b.Start());
  json returned = WaitEvent(c, JsonInt(restore["seq"]), [&](const json& e) {
    return e.value("kind", "") == "node-returned" && e.value("node_id", "") == b.node();
  }, 30s);
  ASSERT_FALSE(returned.is_null()) << c.Log() << b.Log();
  json cheaper = WaitEvent(c, JsonInt(returned["seq"]), [](const json& e) { return Decision(e, "cheaper-capacity"); }, 60s);
  ASSERT_FALSE(cheaper.is_null()) << c.Log();
  ExpectLiveMove(cheaper, cn, b, "saving $");
  ASSERT_FALSE(HasFatalFailure());
  EXPECT_NE(StateOn(cn), "running") << "the job must not run on two nodes";
  EXPECT_EQ(NodeOfJob(c), b.node());

  step("d: moved to B again");
  // (e) The job ends on B with the uninterrupted run's result.
  EXPECT_FALSE(Exists(out + "/result"));
  Release(out);
  ASSERT_TRUE(WaitFor([&] { return StateOn(b) == "exited"; }, 180s)) << JobOn(b).dump() << b.Log();
  EXPECT_EQ(JobOn(b)["job"]["health"].value("exit_code", -1), 0) << JobOn(b).dump();
  EXPECT_EQ(ReadFile(out + "/result"), expected);
  step("e: finished with the uninterrupted run's result");
  for (const DaemonProcess* d : {&a, &cn}) EXPECT_NE(StateOn(*d), "running") << d->node();
  a.KillJobs();
  b.KillJobs();
  cn.KillJobs();
}

}  // namespace
}  // namespace cairn::testing
