// The node-signal parts of cairnd without a daemon: the metadata replies of each cloud -> notice,
// NVML events -> GPU signals (through a fake of our own GpuEventSource), and NVML's absence.

#include <chrono>
#include <deque>
#include <mutex>
#include <thread>

#include <gtest/gtest.h>

#include "daemon/gpu_watch.h"
#include "daemon/spot_watch.h"

namespace cairn::daemon {
namespace {

constexpr double kNow = 1900000000;  // 2030-03-17

TEST(SpotNoticeParse, AwsNoNoticeIs404) {
  auto r = ParseAwsInstanceAction(404, "<html>Not Found</html>", kNow);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->has_value());
}

TEST(SpotNoticeParse, AwsNoticeCarriesActionAndTime) {
  auto r = ParseAwsInstanceAction(200, R"({"action": "stop", "time": "2030-03-17T17:48:20Z"})", kNow);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(r->has_value());
  EXPECT_EQ((*r)->cloud, "aws");
  EXPECT_EQ((*r)->action, "stop");
  EXPECT_DOUBLE_EQ((*r)->deadline, 1900000100);
}

TEST(SpotNoticeParse, AwsGarbageIsAnErrorNotANotice) {
  EXPECT_FALSE(ParseAwsInstanceAction(200, "terminate", kNow).ok());
  EXPECT_FALSE(ParseAwsInstanceAction(500, "oops", kNow).ok());
  EXPECT_FALSE(ParseAwsInstanceAction(200, R"({"action":"terminate","time":"soon"})", kNow).ok());
}

TEST(SpotNoticeParse, GcpPreempted) {
  auto no = ParseGcpPreempted(200, "FALSE", kNow);
  ASSERT_TRUE(no.ok());
  EXPECT_FALSE(no->has_value());
  auto yes = ParseGcpPreempted(200, "TRUE\n", kNow);
  ASSERT_TRUE(yes.ok());
  ASSERT_TRUE(yes->has_value());
  EXPECT_EQ((*yes)->action, "preempt");
  EXPECT_DOUBLE_EQ((*yes)->deadline, kNow + 30);
  EXPECT_FALSE(ParseGcpPreempted(200, "maybe", kNow).ok());
  EXPECT_FALSE(ParseGcpPreempted(403, "Missing Metadata-Flavor:Google header", kNow).ok());
}

TEST(SpotNoticeParse, GcpMaintenanceOnlyTerminateCounts) {
  auto none = ParseGcpMaintenanceEvent(200, "NONE", kNow);
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
  auto migrate = ParseGcpMaintenanceEvent(200, "MIGRATE_ON_HOST_MAINTENANCE", kNow);
  ASSERT_TRUE(migrate.ok());
  EXPECT_FALSE(migrate->has_value());
  auto term = ParseGcpMaintenanceEvent(200, "TERMINATE_ON_HOST_MAINTENANCE", kNow);
  ASSERT_TRUE(term.ok());
  ASSERT_TRUE(term->has_value());
  EXPECT_DOUBLE_EQ((*term)->deadline, kNow + 60);
}

TEST(SpotNoticeParse, AzurePreemptWithNotBefore) {
  const char* body = R"({"DocumentIncarnation": 2, "Events": [
      {"EventId": "A1", "EventType": "Freeze", "NotBefore": "Sun, 17 Mar 2030 17:47:00 GMT"},
      {"EventId": "B2", "EventType": "Preempt", "ResourceType": "VirtualMachine", "Resources": ["vm1"],
       "EventStatus": "Scheduled", "NotBefore": "Sun, 17 Mar 2030 17:47:30 GMT"}]})";
  auto r = ParseAzureScheduledEvents(200, body, kNow);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(r->has_value());
  EXPECT_EQ((*r)->action, "preempt");
  EXPECT_DOUBLE_EQ((*r)->deadline, 1900000050);
  EXPECT_NE((*r)->detail.find("B2"), std::string::npos);
}

TEST(SpotNoticeParse, AzureOtherEventsAreNoNotice) {
  auto r = ParseAzureScheduledEvents(200, R"({"DocumentIncarnation": 1, "Events": [{"EventType": "Reboot"}]})", kNow);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->has_value());
  auto empty = ParseAzureScheduledEvents(200, R"({"DocumentIncarnation": 0, "Events": []})", kNow);
  ASSERT_TRUE(empty.ok());
  EXPECT_FALSE(empty->has_value());
  EXPECT_FALSE(ParseAzureScheduledEvents(200, "[]", kNow).ok());
}

TEST(SpotWatcherStart, RefusesUnknownCloudAndBadUrl) {
  auto nop = [](const SpotNoticeInfo&) {};
  auto nop2 = [](bool, const std::string&) {};
  EXPECT_FALSE(SpotWatcher::Start({"ibm", "http://127.0.0.1:1", 1, 1}, nop, nop2).ok());
  EXPECT_FALSE(SpotWatcher::Start({"aws", "ftp://127.0.0.1:1", 1, 1}, nop, nop2).ok());
}

// ---- GPU events ----

TEST(GpuSignal, XidIsReportedWithItsNumber) {
  std::vector<GpuDevice> devs = {{0, "NVIDIA A100-SXM4-40GB"}, {1, "NVIDIA A100-SXM4-40GB"}};
  auto s = SignalFor({1, kNvmlEventXidCritical, 79}, devs);
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->kind, "xid");
  EXPECT_EQ(s->xid, 79);
  EXPECT_EQ(s->device, 1);
  EXPECT_TRUE(s->report);
  EXPECT_NE(s->detail.find("GPU 1 (NVIDIA A100-SXM4-40GB)"), std::string::npos) << s->detail;
}

TEST(GpuSignal, EccUncorrectableIsReportedCorrectedIsNot) {
  auto dbe = SignalFor({0, kNvmlEventDoubleBitEcc, 0}, {});
  ASSERT_TRUE(dbe.has_value());
  EXPECT_EQ(dbe->kind, "ecc-uncorrectable");
  EXPECT_EQ(dbe->ecc_uncorrectable, 1);
  EXPECT_TRUE(dbe->report);
  auto sbe = SignalFor({0, kNvmlEventSingleBitEcc, 0}, {});
  ASSERT_TRUE(sbe.has_value());
  EXPECT_EQ(sbe->kind, "ecc-corrected");
  EXPECT_FALSE(sbe->report);
  EXPECT_FALSE(SignalFor({0, 0x4 /* P-state change: not asked for */, 0}, {}).has_value());
}

TEST(GpuSignal, TypeFromNvmlName) {
  EXPECT_EQ(GpuTypeOf("NVIDIA H100 80GB HBM3"), "H100");
  EXPECT_EQ(GpuTypeOf("Tesla V100-SXM2-16GB"), "V100");
  EXPECT_EQ(GpuTypeOf("NVIDIA A100-SXM4-40GB"), "A100");
  EXPECT_EQ(GpuTypeOf("NVIDIA H200"), "H200");
}

// A fake of our own event source: hands out queued events, then times out.
class FakeSource : public GpuEventSource {
 public:
  explicit FakeSource(std::deque<GpuEvent> events) : events_(std::move(events)) {}
  std::vector<GpuDevice> Devices() const override { return {{0, "NVIDIA H100 80GB HBM3"}}; }
  absl::StatusOr<std::optional<GpuEvent>> Wait(int timeout_ms) override {
    std::lock_guard<std::mutex> l(mu_);
    if (events_.empty()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(std::min(timeout_ms, 20)));
      return std::nullopt;
    }
    GpuEvent e = events_.front();
    events_.pop_front();
    return e;
  }

 private:
  std::mutex mu_;
  std::deque<GpuEvent> events_;
};

TEST(GpuWatcherLoop, DeliversMappedSignalsInOrder) {
  std::mutex mu;
  std::vector<GpuSignal> got;
  {
    GpuWatcher w(std::make_unique<FakeSource>(std::deque<GpuEvent>{{0, kNvmlEventXidCritical, 48},
                                                                   {0, 0x4, 0},
                                                                   {0, kNvmlEventDoubleBitEcc, 0}}),
                 [&](const GpuSignal& s) {
                   std::lock_guard<std::mutex> l(mu);
                   got.push_back(s);
                 });
    EXPECT_EQ(w.devices().size(), 1u);
    for (int i = 0; i < 100; ++i) {
      {
        std::lock_guard<std::mutex> l(mu);
        if (got.size() >= 2) break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].kind, "xid");
  EXPECT_EQ(got[0].xid, 48);
  EXPECT_EQ(got[1].kind, "ecc-uncorrectable");
}

TEST(GpuNvml, WithoutTheLibraryTheWatcherSaysWhy) {
  auto src = OpenNvml("libnvidia-ml-does-not-exist.so.1");
  ASSERT_FALSE(src.ok());
  EXPECT_NE(std::string(src.status().message()).find("cannot load libnvidia-ml-does-not-exist.so.1"), std::string::npos)
      << src.status();
}

TEST(GpuNvml, NoGpuOnThisMachine) {
  // This machine has no GPU: the real library is absent or finds no device; either way it fails
  // with a reason, and nothing is left loaded.
  auto src = OpenNvml();
  if (src.ok()) GTEST_SKIP() << "NVML found a GPU here: " << (*src)->Devices().size();
  EXPECT_FALSE(src.status().message().empty());
}

}  // namespace
}  // namespace cairn::daemon
