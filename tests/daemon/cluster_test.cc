// cairn-controller with real node daemons: one controller (`--dispatch cairnd`) and two cairnd
// on loopback TCP with tokens, a metadata responder playing the spot node's cloud. The nodes
// register and heartbeat with their facts; a submitted job is placed on the cheapest node and
// really runs there; that node's spot notice reaches the controller as a signal, and the
// controller's decisions are carried out by the daemons (a move through a shared dir: store); a
// node back from a partition has its moved job stopped.

#include <sys/stat.h>
#include <unistd.h>

#include <functional>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "cluster_harness.h"

namespace cairn::testing {
namespace {

using nlohmann::json;

class ControllerWithDaemonsTest : public ClusterFixture {
 protected:
  static json JobIn(const DaemonProcess& d, const std::string& name) {
    CommandResult r = d.Cairn({"job", "list", "--json"});
    json j = json::parse(r.out, nullptr, false);
    if (j.is_discarded()) return json();
    for (const json& job : j.value("jobs", json::array())) {
      if (job.value("name", "") == name) return job;
    }
    return json();
  }
};

TEST_F(ControllerWithDaemonsTest, DaemonsRegisterJobRunsOnCheapestNodeAndSpotNoticeIsActedOn) {
  std::unique_ptr<ControllerProcess> cp = StartTcpController("5");
  ASSERT_NE(cp, nullptr);
  ControllerProcess& c = *cp;
  MetadataResponder md(Dir() + "/md");
  ASSERT_TRUE(md.Start());

  // Checkpoint storage both nodes share: what a move goes through.
  std::string shared = SharedStore();
  ASSERT_FALSE(HasFailure());
  std::vector<std::string> spot_args = SpotArgs(md.url(), "us-east-1a");
  spot_args.insert(spot_args.end(), {"--labels", "pool=spot,team=ml"});
  DaemonProcess spot(Dir(), "spot", JoinArgs("0.45", shared, spot_args));
  // The on-demand node fails every live migration into it (a test hook, after the image is sent):
  // moves then go through the shared store (e2e_test.cc has them go live).
  DaemonProcess od(Dir(), "od", JoinArgs("1.90", shared, {"--zone", "us-east-1b", "--labels", "pool=od"}),
                   {"CAIRND_TEST_FAIL_MIGRATION_RESTORE=1"});
  ASSERT_TRUE(spot.Start());
  ASSERT_TRUE(od.Start());

  // Both register with their facts, and keep heartbeating.
  json st;
  ASSERT_TRUE(WaitFor(
      [&] {
        st = Status(c);
        return !NodeIn(st, spot.node()).is_null() && !NodeIn(st, od.node()).is_null();
      },
      20s))
      << st.dump() << c.Log() << spot.Log();
  json a = NodeIn(st, spot.node()), b = NodeIn(st, od.node());
  EXPECT_DOUBLE_EQ(a["spec"].value("price_per_hour", 0.0), 0.45);
  EXPECT_TRUE(a["spec"].value("spot", false));
  EXPECT_EQ(a["spec"].value("zone", ""), "us-east-1a");
  EXPECT_EQ(a["spec"].value("cloud", ""), "aws");
  EXPECT_EQ(a["spec"]["labels"].value("team", ""), "ml");
  EXPECT_EQ(a["spec"].value("cpus", 0.0), static_cast<double>(::sysconf(_SC_NPROCESSORS_ONLN)));
  EXPECT_GT(JsonInt(a["spec"]["memory_mb"]), 0);
  // And their CPU: its x86-64 level and features, which placement compares (a job moves only to a
  // CPU with what it may use).
  int level = a["spec"].value("cpu_level", 0);
  EXPECT_GE(level, 1) << a.dump();
  EXPECT_LE(level, 4) << a.dump();
  EXPECT_GE(a["spec"]["cpu_features"].size(), 5u) << a.dump();
  // And its network: its interfaces and their addresses (where a job's service address can go).
  bool lo = false;
  for (const json& d : a["spec"]["devices"]) lo |= d == "lo";
  EXPECT_TRUE(lo) << a.dump();
  for (const json& addr : a["spec"]["addresses"]) {
    EXPECT_TRUE(Matches(addr.get<std::string>(), "^[0-9a-f.:]+/[0-9]+@[^ ]+$")) << addr;
    EXPECT_FALSE(absl::StartsWith(addr.get<std::string>(), "127.")) << "loopback is not where a service address goes";
  }
  EXPECT_FALSE(b["spec"].value("spot", false));
  EXPECT_EQ(b["spec"]["labels"].value("pool", ""), "od");
  std::this_thread::sleep_for(1500ms);  // several heartbeat intervals
  st = Status(c);
  for (const std::string& id : {spot.node(), od.node()}) {
    json n = NodeIn(st, id);
    EXPECT_EQ(n.value("health", ""), "healthy") << n.dump();
    EXPECT_LT(n.value("seconds_since_heartbeat", 99.0), 1.5) << n.dump();
  }
  CommandResult human = Ctl(c, {"cluster", "status"});
  EXPECT_TRUE(absl::StrContains(human.out, spot.node()) && absl::StrContains(human.out, od.node())) << human.out;
  EXPECT_TRUE(absl::StrContains(human.out, absl::StrCat("x86-64-v", level))) << human.out;
  // The baseline a job must keep to to move to every node (both are this machine here).
  EXPECT_TRUE(absl::StrContains(human.out, absl::StrCat("CPU baseline every node meets: x86-64-v", level, "\n")))
      << human.out;
  EXPECT_TRUE(absl::StrContains(spot.Json({"node", "info"})["components"].value("controller", ""), "registered"));

  // A job goes to the cheapest node and really runs there.
  CommandResult sub = Ctl(c, {"submit", "--id", "train", "--cpus", "1", "--memory-mb", "100", "--json", "--",
                              "/bin/sleep", "600"});
  ASSERT_TRUE(sub.Exited(0)) << sub.Describe() << c.Log();
  json placed = ParseJson(sub);
  ASSERT_EQ(placed.value("node_id", ""), spot.node()) << sub.out;
  json job = JobIn(spot, "train");
  ASSERT_FALSE(job.is_null()) << spot.Cairn({"job", "list"}).out << c.Log();
  EXPECT_EQ(job.value("state", ""), "running");
  EXPECT_TRUE(IsAlive(job.value("host_pid", 0)));
  EXPECT_TRUE(JobIn(od, "train").is_null());
  st = Status(c);
  ASSERT_EQ(st["jobs"].size(), 1u);
  EXPECT_EQ(st["jobs"][0].value("state", ""), "running") << st.dump();  // the dispatcher confirmed the start
  // A second job that checkpoints on a notice (its rule then moves it): also on the cheap node.
  // It keeps to the CPU level every node has (`--cpu-baseline cluster`), so that it can move to
  // any of them: the controller records the level, and the node starts it for it.
  CommandResult sub2 = Ctl(c, {"submit", "--id", "keep", "--cpus", "1", "--memory-mb", "100", "--checkpoint-on-notice",
                               "--notice-checkpoint", "5", "--cpu-baseline", "cluster", "--json", "--", "/bin/sleep",
                               "600"});
  ASSERT_TRUE(sub2.Exited(0)) << sub2.Describe();
  ASSERT_EQ(ParseJson(sub2).value("node_id", ""), spot.node()) << sub2.out;
  ASSERT_EQ(JobIn(spot, "keep").value("state", ""), "running");
  std::string baseline = absl::StrCat("x86-64-v", level);
  for (const json& j : Status(c)["jobs"]) {
    if (j["spec"].value("id", "") == "keep") {
      EXPECT_EQ(j["spec"].value("cpu_baseline", ""), baseline) << j.dump();
    }
  }
  std::string environ = ReadFile(absl::StrCat("/proc/", JobIn(spot, "keep").value("host_pid", 0), "/environ"));
  EXPECT_TRUE(absl::StrContains(environ, "CAIRN_CPU_BASELINE=" + baseline)) << environ;
  CommandResult nobase = Ctl(c, {"submit", "--id", "nobase", "--cpu-baseline", "skylake", "--", "/bin/sleep", "1"});
  EXPECT_TRUE(nobase.FailedCleanly()) << nobase.Describe();
  EXPECT_TRUE(absl::StrContains(nobase.err, "unknown CPU baseline 'skylake'")) << nobase.err;

  // The spot node's cloud announces the reclaim: the daemon reports it; the controller records
  // the signal and decides, with a reason; the decision is carried out by the daemons.
  absl::Time at = absl::FromUnixSeconds(absl::ToUnixSeconds(absl::Now()) + 120);
  md.SetNotice("aws", R"({"action": "terminate", "time": ")" +
                          absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", at, absl::UTCTimeZone()) + R"("})");
  json signal, decision, moved;
  ASSERT_TRUE(WaitFor(
      [&] {
        for (const json& e : Events(c)) {
          if (e.value("kind", "") == "signal" && e.value("node_id", "") == spot.node()) signal = e;
          if (e.value("kind", "") == "decision" && e.value("job_id", "") == "train") decision = e;
          if (e.value("kind", "") == "decision" && e.value("job_id", "") == "keep") moved = e;
        }
        return !signal.is_null() && !decision.is_null() && !moved.is_null();
      },
      30s))
      << c.Log() << spot.Log();
  EXPECT_TRUE(absl::StrContains(signal.value("reason", ""), "spot-notice")) << signal.dump();
  EXPECT_EQ(decision.value("rule", ""), "spot-notice") << decision.dump();
  EXPECT_FALSE(decision.value("reason", "").empty()) << decision.dump();
  EXPECT_FALSE(decision.value("dispatch", "").empty()) << decision.dump();
  // The daemon acted on its own too: a pinned checkpoint of the job, for the notice.
  json cps = spot.Json({"checkpoint", "list", "--job", "train"})["checkpoints"];
  ASSERT_GE(cps.size(), 1u) << spot.Log();
  EXPECT_EQ(cps[0].value("reason", ""), "spot-notice");
  EXPECT_TRUE(cps[0].value("pinned", false));

  // A job without checkpoint-on-notice: the rule restores it elsewhere, and the daemons do so:
  // from the checkpoint the spot node's daemon took on its own for the notice when its report
  // (NodeSignal CHECKPOINT) reached the controller first, else from the beginning.
  ASSERT_EQ(decision.value("action", ""), "restore") << decision.dump();
  ASSERT_EQ(decision.value("target_node_id", ""), od.node()) << decision.dump();
  if (absl::StrContains(decision.value("reason", ""), "restore checkpoint of t=")) {
    EXPECT_TRUE(absl::StrContains(decision.value("dispatch", ""), "restored on " + od.node() + " from its newest checkpoint"))
        << decision.dump();
  } else {
    EXPECT_TRUE(absl::StrContains(decision.value("dispatch", ""), "started on " + od.node())) << decision.dump();
  }
  ASSERT_TRUE(WaitFor([&] { return JobIn(od, "train").value("state", "") == "running"; }, 20s))
      << od.Cairn({"job", "list"}).out << decision.dump();
  EXPECT_TRUE(WaitFor([&] { return JobIn(spot, "train").value("state", "") == "killed"; }, 20s))
      << spot.Cairn({"job", "list"}).out;
  // The job that checkpoints on notice is moved: its live migration fails (the hook), so it is
  // checkpointed and stopped on the spot node into the shared store, restored from there on the
  // on-demand node.
  EXPECT_EQ(moved.value("action", ""), "migrate") << moved.dump();
  EXPECT_EQ(moved.value("target_node_id", ""), od.node()) << moved.dump();
  std::string note = moved.value("dispatch", "");
  EXPECT_TRUE(absl::StartsWith(note, "moved through dir:" + shared)) << note;
  EXPECT_TRUE(absl::StrContains(note, "restored on " + od.node())) << note;
  EXPECT_TRUE(absl::StrContains(note, "live migration failed (") && absl::StrContains(note, "test hook")) << note;
  EXPECT_EQ(JobIn(od, "keep").value("state", ""), "running") << od.Cairn({"job", "list"}).out;
  EXPECT_TRUE(IsAlive(JobIn(od, "keep").value("host_pid", 0)));
  EXPECT_TRUE(WaitFor([&] { return JobIn(spot, "keep").value("state", "") == "killed"; }, 20s))
      << spot.Cairn({"job", "list"}).out;
  json keep_cps = spot.Json({"checkpoint", "list", "--job", "keep"})["checkpoints"];
  EXPECT_EQ(keep_cps.size(), 2u) << "the daemon's own for the notice, and the move's: " << keep_cps.dump();
  for (const json& ck : keep_cps) {
    EXPECT_TRUE(absl::StartsWith(ck.value("location", ""), shared)) << ck.dump();
  }

  st = Status(c);
  ASSERT_EQ(st["jobs"].size(), 2u);
  for (const json& j : st["jobs"]) {
    if (j["spec"].value("id", "") == "train") {
      EXPECT_EQ(j.value("node_id", ""), od.node()) << st.dump();
    }
    if (j["spec"].value("id", "") == "keep") {
      EXPECT_EQ(j.value("node_id", ""), od.node()) << st.dump();
      EXPECT_EQ(j.value("pending_action", ""), "") << st.dump();
    }
  }
  spot.KillJobs();
  od.KillJobs();
}

// Over unix sockets both ways: a job the daemon reports hung reaches the controller as a signal.
TEST_F(ControllerWithDaemonsTest, HungJobIsReportedToTheController) {
  ControllerProcess c(Dir(), "ctl", "sqlite:" + Dir() + "/controller.db",
                      {"--dispatch", "cairnd", "--heartbeat-interval", "0.3"});
  ASSERT_TRUE(c.Start());
  ASSERT_TRUE(c.WaitLeader(10s));
  DaemonProcess d(Dir(), "n", {"--controller", c.address(), "--price-per-hour", "1"});
  ASSERT_TRUE(d.Start());
  ASSERT_TRUE(WaitFor([&] { return !NodeIn(Status(c), d.node()).is_null(); }, 20s)) << c.Log() << d.Log();
  // The job runs on the daemon with a hang detector; the controller is then given the same job:
  // its dispatcher finds it already running there.
  ASSERT_TRUE(d.Cairn({"job", "run", "--name", "stuck", "--hang-after", "1", "--", "/bin/sleep", "600"}).Exited(0));
  CommandResult sub = Ctl(c, {"submit", "--id", "stuck", "--cpus", "1", "--memory-mb", "50", "--json", "--",
                              "/bin/sleep", "600"});
  ASSERT_TRUE(sub.Exited(0)) << sub.Describe();
  json placed;
  ASSERT_TRUE(WaitFor(
      [&] {
        for (const json& e : Events(c)) {
          if (e.value("kind", "") == "job-placed" && e.value("job_id", "") == "stuck") placed = e;
        }
        return !placed.is_null();
      },
      10s));
  EXPECT_TRUE(absl::StrContains(placed.value("dispatch", ""), "already running on " + d.node())) << placed.dump();
  json signal;
  ASSERT_TRUE(WaitFor(
      [&] {
        for (const json& e : Events(c)) {
          if (e.value("kind", "") == "signal" && e.value("job_id", "") == "stuck") signal = e;
        }
        return !signal.is_null();
      },
      30s))
      << d.Log() << c.Log();
  EXPECT_TRUE(absl::StrContains(signal.value("reason", ""), "job-hung reported")) << signal.dump();
  EXPECT_TRUE(absl::StrContains(signal.value("reason", ""), "last_progress_time")) << signal.dump();
  d.KillJobs();
}

// A job submitted with a service address (`submit --address`) reaches its node with it: the node
// daemon puts it on the interface of its subnet (one end of a veth pair the test makes, standing
// for the node's network) while the job runs, and takes it off when it ends. A malformed one is
// refused at submit.
TEST_F(ControllerWithDaemonsTest, SubmittedJobsAddressIsPutOnItsNodeWhileItRuns) {
  const std::string dev = "cairnd" + std::to_string(::getpid() % 100000);
  const std::string subnet = "10.81." + std::to_string(::getpid() % 200) + ".";
  auto ip = [&](std::vector<std::string> args) {
    args.insert(args.begin(), "/usr/sbin/ip");
    return RunCommand(args, Dir());
  };
  ASSERT_TRUE(ip({"link", "add", dev, "type", "veth", "peer", "name", dev + "p"}).Exited(0)) << "needs root and veth";
  struct Gone {
    std::function<void()> f;
    ~Gone() { f(); }
  } gone{[&] { ip({"link", "del", dev}); }};
  ASSERT_TRUE(ip({"addr", "add", subnet + "1/24", "dev", dev}).Exited(0));
  ASSERT_TRUE(ip({"link", "set", dev, "up"}).Exited(0));
  ASSERT_TRUE(ip({"link", "set", dev + "p", "up"}).Exited(0));
  auto on_dev = [&] { return ip({"-o", "addr", "show", "dev", dev}).out; };

  std::unique_ptr<ControllerProcess> cp = StartTcpController("5");
  ASSERT_NE(cp, nullptr);
  ControllerProcess& c = *cp;
  DaemonProcess d(Dir(), "n", JoinArgs("1", SharedStore(), {}));
  ASSERT_TRUE(d.Start());
  ASSERT_TRUE(WaitFor([&] { return !NodeIn(Status(c), d.node()).is_null(); }, 20s)) << c.Log() << d.Log();

  CommandResult bad = Ctl(c, {"submit", "--id", "bad", "--address", "10.81.0.5", "--", "/bin/sleep", "600"});
  EXPECT_FALSE(bad.Exited(0)) << bad.Describe();
  EXPECT_TRUE(absl::StrContains(bad.err, "ADDR/PREFIX")) << bad.Describe();

  std::string service = subnet + "50";
  CommandResult sub = Ctl(c, {"submit", "--id", "svc", "--cpus", "1", "--memory-mb", "50", "--address",
                              service + "/24", "--json", "--", "/bin/sleep", "600"});
  ASSERT_TRUE(sub.Exited(0)) << sub.Describe();
  ASSERT_TRUE(WaitFor([&] { return JobIn(d, "svc").value("state", "") == "running"; }, 20s)) << d.Log() << c.Log();
  json job = JobIn(d, "svc");
  ASSERT_EQ(job["spec"]["addresses"].size(), 1u) << job.dump();
  EXPECT_EQ(job["spec"]["addresses"][0], service + "/24");
  EXPECT_TRUE(absl::StrContains(on_dev(), " " + service + "/24")) << on_dev();

  ASSERT_TRUE(d.Cairn({"job", "kill", "svc"}).Exited(0));
  EXPECT_TRUE(WaitFor([&] { return !absl::StrContains(on_dev(), " " + service + "/"); }, 20s))
      << "the address outlived its job: " << on_dev();
  d.KillJobs();
}

// `cairn job cancel` through the controller: the job is killed on its node, which removes its
// unpinned checkpoints there (files and stored objects) and keeps its logs and pinned ones. (On
// the way: the job's request is its cgroup's limits there; a submission without a command is
// refused.)
TEST_F(ControllerWithDaemonsTest, ACancelledJobsCheckpointsGoFromItsNode) {
  std::unique_ptr<ControllerProcess> cp = StartTcpController("5");
  ASSERT_NE(cp, nullptr);
  ControllerProcess& c = *cp;
  std::string store = SharedStore();
  DaemonProcess d(Dir(), "n", JoinArgs("1", store, {"--memory", "3G"}));
  ASSERT_TRUE(d.Start());
  ASSERT_TRUE(WaitFor([&] { return !NodeIn(Status(c), d.node()).is_null(); }, 20s)) << c.Log() << d.Log();
  // (The node offers what its --memory says, in the sizes `job run --memory` takes.)
  EXPECT_EQ(NodeIn(Status(c), d.node())["spec"]["memory_mb"], 3072) << NodeIn(Status(c), d.node()).dump();
  CommandResult sub = Ctl(c, {"submit", "--id", "work", "--cpus", "0.5", "--memory", "50M", "--json", "--",
                              "/bin/sh", "-c", "echo started; exec sleep 600"});
  ASSERT_TRUE(sub.Exited(0)) << sub.Describe();
  ASSERT_TRUE(WaitFor([&] { return JobIn(d, "work").value("state", "") == "running"; }, 20s)) << d.Log() << c.Log();
  // What it asked for is what it may use on the node: its cgroup's CPU quota and memory limit.
  json limits = JobIn(d, "work")["spec"]["limits"];
  EXPECT_EQ(limits.value("cpus", 0.0), 0.5) << limits.dump();
  EXPECT_EQ(limits.value("memory_bytes", int64_t{0}), int64_t{50} << 20) << limits.dump();
  EXPECT_EQ(ReadFile("/sys/fs/cgroup/memory/cairn/" + d.node() + ".work/memory.limit_in_bytes"),
            std::to_string(int64_t{50} << 20) + "\n");
  // A submission without a command is refused: the node daemons would have nothing to run.
  CommandResult bare = Ctl(c, {"submit", "--id", "bare", "--cpus", "1"});
  EXPECT_TRUE(bare.FailedCleanly()) << bare.Describe();
  EXPECT_TRUE(Matches(bare.err, "no command")) << bare.err;
  json pinned = d.Json({"job", "checkpoint", "work", "--pin"})["checkpoint"];
  json plain = d.Json({"job", "checkpoint", "work"})["checkpoint"];
  ASSERT_EQ(plain.value("state", ""), "complete") << plain.dump() << d.Log();
  std::string stored = plain.value("location", "");
  ASSERT_TRUE(absl::StartsWith(stored, "/")) << "a directory store: " << plain.dump();
  ASSERT_TRUE(std::filesystem::is_directory(stored));

  CommandResult cancel = Ctl(c, {"job", "cancel", "work"});
  ASSERT_TRUE(cancel.Exited(0)) << cancel.Describe() << c.Log();
  json job = JobIn(d, "work");
  EXPECT_EQ(job.value("state", ""), "killed") << job.dump();
  EXPECT_TRUE(job.value("cancelled", false)) << job.dump();
  json list = d.Json({"checkpoint", "list", "--job", "work"});
  ASSERT_EQ(list["checkpoints"].size(), 1u) << list.dump();
  EXPECT_EQ(list["checkpoints"][0]["id"], pinned["id"]);
  EXPECT_FALSE(std::filesystem::exists(stored)) << "the stored checkpoint outlived the cancel";
  EXPECT_EQ(d.Cairn({"job", "logs", "work"}).out, "started\n");
}

// The dispatcher keeps daemon addresses in memory: a restarted controller asks each node to
// register again (in its heartbeat reply), and then carries decisions out on it as before.
TEST_F(ControllerWithDaemonsTest, RestartedControllerHasNodesRegisterAgain) {
  std::string store = "sqlite:" + Dir() + "/controller.db";
  auto c = std::make_unique<ControllerProcess>(Dir(), "ctl", store,
                                               std::vector<std::string>{"--dispatch", "cairnd", "--heartbeat-interval", "0.3"});
  ASSERT_TRUE(c->Start());
  ASSERT_TRUE(c->WaitLeader(10s));
  std::string address = c->address();
  DaemonProcess d(Dir(), "n", {"--controller", address, "--price-per-hour", "1"});
  ASSERT_TRUE(d.Start());
  ASSERT_TRUE(WaitFor([&] { return !NodeIn(Status(*c), d.node()).is_null(); }, 20s)) << c->Log() << d.Log();
  c->Kill(SIGKILL);
  c->Wait();
  c = std::make_unique<ControllerProcess>(Dir(), "ctl", store,
                                          std::vector<std::string>{"--dispatch", "cairnd", "--heartbeat-interval", "0.3"});
  ASSERT_TRUE(c->Start());
  ASSERT_TRUE(c->WaitLeader(10s));
  json again;
  ASSERT_TRUE(WaitFor(
      [&] {
        for (const json& e : Events(*c)) {
          if (e.value("kind", "") == "node-reregistered" && e.value("node_id", "") == d.node()) again = e;
        }
        return !again.is_null();
      },
      20s))
      << c->Log() << d.Log();
  EXPECT_TRUE(absl::StrContains(again.value("reason", ""), "daemon at unix:" + d.socket())) << again.dump();
  CommandResult sub = Ctl(*c, {"submit", "--id", "after", "--cpus", "1", "--memory-mb", "50", "--json", "--",
                               "/bin/sleep", "600"});
  ASSERT_TRUE(sub.Exited(0)) << sub.Describe();
  EXPECT_EQ(ParseJson(sub).value("node_id", ""), d.node());
  EXPECT_EQ(JobIn(d, "after").value("state", ""), "running") << d.Cairn({"job", "list"}).out << c->Log();
  d.KillJobs();
}

// A node cut off by a partition is declared lost while its job runs on there; the job is started
// again on the other node; when the node comes back, its copy is stopped (fenced): the job never
// runs twice for longer than the partition lasts.
TEST_F(ControllerWithDaemonsTest, NodeBackFromAPartitionHasItsMovedJobStopped) {
  ControllerProcess c(Dir(), "ctl", "sqlite:" + Dir() + "/controller.db",
                      {"--dispatch", "cairnd", "--heartbeat-interval", "0.3", "--heartbeat-timeout", "2"});
  ASSERT_TRUE(c.Start());
  ASSERT_TRUE(c.WaitLeader(10s));
  DaemonProcess x(Dir(), "x", {"--controller", c.address(), "--price-per-hour", "0.5"});
  DaemonProcess y(Dir(), "y", {"--controller", c.address(), "--price-per-hour", "1"});
  ASSERT_TRUE(x.Start());
  ASSERT_TRUE(y.Start());
  ASSERT_TRUE(WaitFor([&] { json st = Status(c); return !NodeIn(st, x.node()).is_null() && !NodeIn(st, y.node()).is_null(); },
                      20s))
      << c.Log();
  CommandResult sub = Ctl(c, {"submit", "--id", "svc", "--cpus", "1", "--memory-mb", "50", "--json", "--",
                              "/bin/sleep", "600"});
  ASSERT_TRUE(sub.Exited(0)) << sub.Describe();
  ASSERT_EQ(ParseJson(sub).value("node_id", ""), x.node()) << sub.out;
  int on_x = JobIn(x, "svc").value("host_pid", 0);
  ASSERT_GT(on_x, 0) << x.Cairn({"job", "list"}).out;

  // The partition: x's daemon stops answering anyone (SIGSTOP); its job runs on.
  ASSERT_EQ(::kill(x.pid(), SIGSTOP), 0);
  json restarted;
  bool moved = WaitFor(
      [&] {
        for (const json& e : Events(c)) {
          if (e.value("kind", "") == "decision" && e.value("rule", "") == "node-lost" && e.value("job_id", "") == "svc") {
            restarted = e;
          }
        }
        return !restarted.is_null() && JobIn(y, "svc").value("state", "") == "running";
      },
      30s);
  if (!moved) ::kill(x.pid(), SIGCONT);
  ASSERT_TRUE(moved) << c.Log();
  EXPECT_TRUE(absl::StrContains(restarted.value("dispatch", ""), "started on " + y.node())) << restarted.dump();
  EXPECT_TRUE(IsAlive(on_x)) << "the partitioned copy should still run: nothing could reach it";

  // The partition heals: x heartbeats again, and its copy of the job is stopped.
  ASSERT_EQ(::kill(x.pid(), SIGCONT), 0);
  json fenced;
  ASSERT_TRUE(WaitFor(
      [&] {
        for (const json& e : Events(c)) {
          if (e.value("kind", "") == "fenced" && e.value("node_id", "") == x.node()) fenced = e;
        }
        return !fenced.is_null();
      },
      20s))
      << c.Log() << x.Log();
  EXPECT_TRUE(absl::StrContains(fenced.value("reason", ""), "job svc still ran on " + x.node())) << fenced.dump();
  EXPECT_TRUE(absl::StrContains(fenced.value("reason", ""), "stopped there")) << fenced.dump();
  EXPECT_TRUE(WaitGone(on_x, 10s).gone);
  EXPECT_EQ(JobIn(x, "svc").value("state", ""), "killed");
  EXPECT_EQ(JobIn(y, "svc").value("state", ""), "running");
  // A job x runs that the controller never placed is left alone.
  ASSERT_TRUE(x.Cairn({"job", "run", "--name", "mine", "--", "/bin/sleep", "600"}).Exited(0));
  for (const json& n : Status(c).value("jobs", json::array())) {
    if (n["spec"].value("id", "") == "svc") {
      EXPECT_EQ(n.value("node_id", ""), y.node());
    }
  }
  ASSERT_EQ(::kill(x.pid(), SIGSTOP), 0);
  std::this_thread::sleep_for(3s);  // past the heartbeat timeout: lost again
  ASSERT_EQ(::kill(x.pid(), SIGCONT), 0);
  ASSERT_TRUE(WaitFor(
      [&] {
        int returned = 0;
        for (const json& e : Events(c)) returned += e.value("kind", "") == "node-returned" && e.value("node_id", "") == x.node();
        return returned >= 2;
      },
      20s))
      << c.Log();
  EXPECT_EQ(JobIn(x, "mine").value("state", ""), "running");
  x.KillJobs();
  y.KillJobs();
}

TEST_F(ControllerWithDaemonsTest, TcpControllerNeedsTheTokenFile) {
  DaemonProcess d(Dir(), "n", {"--controller", "127.0.0.1:1"});
  ::testing::AssertionResult r = d.Start(10s);
  ASSERT_FALSE(r);
  EXPECT_TRUE(absl::StrContains(r.message(), "--controller-token-file")) << r.message();
}

}  // namespace
}  // namespace cairn::testing
