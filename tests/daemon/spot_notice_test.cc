// Spot notices and the GPU watcher end to end: a real cairnd polls a metadata responder on
// 127.0.0.1 that speaks each cloud's protocol (tests/daemon/metadata_responder.py). A notice
// must show in `cairn job watch` and `cairn node info` with its deadline, and the running job
// must get a pinned checkpoint at once; no notice, or a responder that is down, must give none.

#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "daemon_harness.h"

namespace cairn::testing {
namespace {

using nlohmann::json;

class SpotNoticeTest : public CairnTest {
 protected:
  std::string Dir() const { return temp_->path(); }

  // Every event in the daemon's stream (replayed from the start), parsed.
  std::vector<json> Events(const DaemonProcess& d) {
    CommandResult r = d.Cairn({"job", "watch", "--after", "0", "--json", "--timeout", "1"});
    EXPECT_TRUE(r.Exited(0)) << r.Describe();
    std::vector<json> out;
    for (absl::string_view line : absl::StrSplit(r.out, '\n', absl::SkipEmpty())) {
      json j = json::parse(line, nullptr, false);
      if (!j.is_discarded()) out.push_back(j);
    }
    return out;
  }
  std::vector<json> EventsOfKind(const DaemonProcess& d, const std::string& kind) {
    std::vector<json> out;
    for (json& e : Events(d)) {
      if (e.value("kind", "") == kind) out.push_back(e);
    }
    return out;
  }
  json Info(const DaemonProcess& d) { return d.Json({"node", "info"}); }
  std::string Component(const DaemonProcess& d, const std::string& name) {
    json i = Info(d);
    return i.contains("components") ? i["components"].value(name, "") : "";
  }
  // Polls of the notice path the responder answered as the protocol asks.
  static int Polls(const std::string& requests, const std::string& path) {
    int n = 0;
    for (absl::string_view line : absl::StrSplit(requests, '\n', absl::SkipEmpty())) {
      n += absl::StrContains(line, path) && absl::EndsWith(line, " ok");
    }
    return n;
  }

  // Runs one cloud's whole story: quiet polls give nothing; the notice gives an event, NodeInfo's
  // notice with `want_deadline` (within `slack` s) and a pinned checkpoint of the running job.
  void NoticeStory(const std::string& cloud, const std::string& notice_path, const std::string& notice,
                   double want_deadline, double slack) {
    MetadataResponder md(Dir() + "/md");
    ASSERT_TRUE(md.Start());
    DaemonProcess d(Dir(), "spot", {"--spot-notices", cloud, "--spot-url-" + cloud, md.url(), "--spot-poll", "0.2"});
    ASSERT_TRUE(d.Start());
    CommandResult run = d.Cairn({"job", "run", "--name", "work", "--", "/bin/sleep", "600"});
    ASSERT_TRUE(run.Exited(0)) << run.Describe();

    // No notice: polls succeed (the responder refuses requests that break the protocol), no event.
    ASSERT_TRUE(WaitFor([&] { return Polls(md.Requests(), notice_path) >= 5; }, 20s)) << md.Requests() << d.Log();
    EXPECT_TRUE(absl::StrContains(Component(d, "spot-watcher"), "last poll ok")) << Info(d).dump();
    EXPECT_TRUE(EventsOfKind(d, "spot-notice").empty());
    EXPECT_FALSE(Info(d).contains("spot_notice"));
    EXPECT_EQ(d.Json({"checkpoint", "list"})["checkpoints"].size(), 0u);

    double before = absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch());
    md.SetNotice(cloud, notice);
    ASSERT_TRUE(WaitFor([&] { return !EventsOfKind(d, "spot-notice").empty(); }, 20s)) << d.Log();
    std::vector<json> ev = EventsOfKind(d, "spot-notice");
    ASSERT_EQ(ev.size(), 1u) << "one notice, one event, however many polls see it";
    EXPECT_EQ(ev[0].value("job", ""), "");
    EXPECT_TRUE(absl::StrContains(ev[0].value("detail", ""), cloud)) << ev[0].dump();

    json info = Info(d);
    ASSERT_TRUE(info.contains("spot_notice")) << info.dump();
    EXPECT_EQ(info["spot_notice"].value("cloud", ""), cloud);
    double deadline = UnixSeconds(info["spot_notice"]["deadline"]);  // RFC 3339 in the JSON
    if (want_deadline > 0) {
      EXPECT_NEAR(deadline, want_deadline, slack) << info.dump();
    } else {  // estimated from when it was seen
      EXPECT_NEAR(deadline, before + slack, 5) << info.dump();
    }

    // The job was checkpointed at once, pinned, for the notice; and it keeps running.
    json cps;
    ASSERT_TRUE(WaitFor(
        [&] {
          cps = d.Json({"checkpoint", "list", "--job", "work"})["checkpoints"];
          return cps.size() == 1 && cps[0].value("state", "") == "complete";
        },
        30s))
        << cps.dump() << d.Log();
    EXPECT_EQ(cps[0].value("reason", ""), "spot-notice");
    EXPECT_TRUE(cps[0].value("pinned", false));
    EXPECT_EQ(d.Json({"job", "show", "work"})["job"].value("state", ""), "running");
    // The notice stays out; polls go on; no second event or checkpoint.
    int polls = Polls(md.Requests(), notice_path);
    ASSERT_TRUE(WaitFor([&] { return Polls(md.Requests(), notice_path) >= polls + 3; }, 20s));
    EXPECT_EQ(EventsOfKind(d, "spot-notice").size(), 1u);
    EXPECT_EQ(d.Json({"checkpoint", "list"})["checkpoints"].size(), 1u);
    d.KillJobs();
  }
};

TEST_F(SpotNoticeTest, AwsImdsV2NoticeCheckpointsTheJob) {
  // 2 minutes from now, as AWS gives it.
  absl::Time at = absl::FromUnixSeconds(absl::ToUnixSeconds(absl::Now()) + 120);
  std::string when = absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", at, absl::UTCTimeZone());
  NoticeStory("aws", "/latest/meta-data/spot/instance-action",
              R"({"action": "terminate", "time": ")" + when + R"("})", absl::ToUnixSeconds(at), 0.5);
}

TEST_F(SpotNoticeTest, GcpPreemptedNoticeCheckpointsTheJob) {
  NoticeStory("gcp", "/computeMetadata/v1/instance/preempted", "TRUE", 0, 30);
}

TEST_F(SpotNoticeTest, AzurePreemptNoticeCheckpointsTheJob) {
  absl::Time at = absl::FromUnixSeconds(absl::ToUnixSeconds(absl::Now()) + 45);
  std::string when = absl::FormatTime("%a, %d %b %Y %H:%M:%S GMT", at, absl::UTCTimeZone());
  NoticeStory("azure", "/metadata/scheduledevents",
              R"([{"EventId": "C0FFEE", "EventType": "Preempt", "ResourceType": "VirtualMachine",
                   "Resources": ["node-1"], "EventStatus": "Scheduled", "NotBefore": ")" + when + R"("}])",
              absl::ToUnixSeconds(at), 0.5);
}

TEST_F(SpotNoticeTest, ResponderDownGivesAWarningAndNoNotice) {
  int port = FreeTcpPort();  // nothing listens there
  DaemonProcess d(Dir(), "spot", {"--spot-notices", "aws", "--spot-url-aws", "http://127.0.0.1:" + std::to_string(port),
                                  "--spot-poll", "0.2"});
  ASSERT_TRUE(d.Start());
  ASSERT_TRUE(d.Cairn({"job", "run", "--name", "work", "--", "/bin/sleep", "600"}).Exited(0));
  ASSERT_TRUE(WaitFor([&] { return !EventsOfKind(d, "spot-watcher-warning").empty(); }, 20s)) << d.Log();
  std::this_thread::sleep_for(1s);  // several more failed polls
  std::string line = Component(d, "spot-watcher");
  EXPECT_TRUE(absl::StartsWith(line, "warning: poll failed (no notice assumed)")) << line;
  EXPECT_TRUE(absl::StrContains(line, std::to_string(port))) << line;
  EXPECT_EQ(EventsOfKind(d, "spot-watcher-warning").size(), 1u) << "warned once, not on every poll";
  EXPECT_TRUE(EventsOfKind(d, "spot-notice").empty());
  EXPECT_FALSE(Info(d).contains("spot_notice"));
  EXPECT_EQ(d.Json({"checkpoint", "list"})["checkpoints"].size(), 0u);
  d.KillJobs();
  d.Kill(SIGTERM);
  d.Wait();
  EXPECT_TRUE(absl::StrContains(d.Log(), "spot-watcher: warning: poll failed")) << d.Log();
}

TEST_F(SpotNoticeTest, OffUnlessConfiguredAndGpuWatcherSaysWhyItIsOff) {
  DaemonProcess d(Dir(), "plain");
  ASSERT_TRUE(d.Start());
  json info = Info(d);
  EXPECT_TRUE(absl::StartsWith(info["components"].value("spot-watcher", ""), "off")) << info.dump();
  std::string gpu = info["components"].value("gpu-watcher", "");
  if (absl::StartsWith(gpu, "on:")) GTEST_SKIP() << "this machine has a GPU: " << gpu;
  EXPECT_TRUE(absl::StartsWith(gpu, "off (no NVML: ")) << gpu;
  EXPECT_FALSE(info.contains("gpus") && JsonInt(info["gpus"]) > 0);
  // The same, as people read it.
  CommandResult r = d.Cairn({"node", "info"});
  ASSERT_TRUE(r.Exited(0)) << r.Describe();
  EXPECT_TRUE(absl::StrContains(r.out, "gpu-watcher: off (no NVML: ")) << r.out;
  d.Kill(SIGTERM);
  d.Wait();
  EXPECT_TRUE(absl::StrContains(d.Log(), "gpu-watcher: off (no NVML")) << d.Log();
}

// The freezer hierarchy the daemon holds jobs in is said at its start: on, or a warning when this
// mount namespace has none (a daemon started under `ip netns exec`, which mounts a /sys of its own).
TEST_F(SpotNoticeTest, TheFreezerIsSaidOnOrMissingAtStart) {
  DaemonProcess plain(Dir(), "plain");
  ASSERT_TRUE(plain.Start());
  EXPECT_EQ(Info(plain)["components"].value("freezer", ""), "on (/sys/fs/cgroup/freezer)") << Info(plain).dump();

  const std::string ns = "cairnfz" + std::to_string(::getpid() % 100000);
  ASSERT_TRUE(RunCommand({"/usr/sbin/ip", "netns", "add", ns}, Dir()).Exited(0)) << "needs root";
  DaemonProcess inside(Dir(), "inside");
  inside.RunUnder({"/usr/sbin/ip", "netns", "exec", ns});
  bool started = static_cast<bool>(inside.Start());
  std::string freezer = started ? Info(inside)["components"].value("freezer", "") : "";
  inside.Kill(SIGTERM);
  inside.Wait();
  RunCommand({"/usr/sbin/ip", "netns", "del", ns}, Dir());
  ASSERT_TRUE(started) << inside.Log();
  EXPECT_TRUE(absl::StartsWith(freezer, "warning: the cgroup v1 freezer is not mounted")) << freezer;
  EXPECT_TRUE(absl::StrContains(inside.Log(), "nsenter --net")) << inside.Log();
}

}  // namespace
}  // namespace cairn::testing
