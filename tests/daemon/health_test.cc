// The health rules over hand-made samples: hung needs both the CPU time and the heartbeat file
// to stand still; memory pressure compares usage with the cgroup limit.

#include "daemon/health.h"

#include <gtest/gtest.h>

namespace cairn::daemon {
namespace {

api::HealthConfig Config(double hang_after, const std::string& beat = "", double ratio = 0) {
  api::HealthConfig c;
  c.set_hang_after_s(hang_after);
  c.set_heartbeat_file(beat);
  c.set_memory_pressure_ratio(ratio);
  return c;
}

HealthSample At(double now, double cpu) {
  HealthSample s;
  s.now = now;
  s.cpu_seconds = cpu;
  return s;
}

TEST(Health, HungOnlyAfterNoCpuProgressForTheWholeWindow) {
  HealthTracker t(Config(5));
  EXPECT_EQ(t.Update(At(0, 1.0)).state(), "running");
  EXPECT_EQ(t.Update(At(3, 1.0)).state(), "running");
  EXPECT_EQ(t.Update(At(4, 2.0)).state(), "running");  // progress resets the window
  EXPECT_EQ(t.Update(At(8.9, 2.0)).state(), "running");
  api::Health h = t.Update(At(9.0, 2.005));  // below the noise floor: no progress
  EXPECT_EQ(h.state(), "hung");
  EXPECT_NEAR(h.seconds_since_progress(), 5.0, 1e-9);
  EXPECT_EQ(t.Update(At(10, 3.0)).state(), "running");  // recovers
}

TEST(Health, AHeartbeatFileKeepsAnIdleJobAlive) {
  HealthTracker t(Config(2, "/beat"));
  HealthSample s = At(0, 1.0);
  s.heartbeat_mtime = 100;
  EXPECT_EQ(t.Update(s).state(), "running");
  for (double now = 1; now <= 6; now += 1) {
    s = At(now, 1.0);
    s.heartbeat_mtime = 100 + now;
    EXPECT_EQ(t.Update(s).state(), "running") << now;
  }
  s = At(9, 1.0);
  s.heartbeat_mtime = 106;  // stopped beating at 6
  EXPECT_EQ(t.Update(s).state(), "hung");
}

TEST(Health, HangDetectionOffByDefault) {
  HealthTracker t(Config(0));
  t.Update(At(0, 1));
  EXPECT_EQ(t.Update(At(1000, 1)).state(), "running");
}

TEST(Health, MemoryPressureAgainstTheLimit) {
  HealthTracker t(Config(0, "", 0.8));
  HealthSample s = At(0, 1);
  s.memory_bytes = 70;
  s.memory_limit = 100;
  api::Health h = t.Update(s);
  EXPECT_EQ(h.state(), "running");
  EXPECT_NEAR(h.memory_ratio(), 0.7, 1e-9);
  s.memory_bytes = 85;
  EXPECT_EQ(t.Update(s).state(), "memory-pressure");
  s.memory_limit.reset();  // no limit: no pressure, whatever the usage
  EXPECT_EQ(t.Update(s).state(), "running");
}

// A job growing toward its limit is reported before it gets near the ratio: the growth rate is
// fitted over the samples and the time to the limit compared with the horizon.
TEST(Health, PredictedTimeToOomFromTheGrowthRate) {
  api::HealthConfig c = Config(0, "", 0.9);
  c.set_oom_horizon_s(60);
  HealthTracker t(c);
  constexpr int64_t kMiB = 1 << 20;
  HealthSample s = At(0, 1);
  s.memory_limit = 1000 * kMiB;
  api::Health h;
  // 2 MiB/s from 100 MiB: 900 MiB left, 450 s to go: far beyond the horizon.
  for (int i = 0; i <= 10; ++i) {
    s.now = i;
    s.memory_bytes = (100 + 2 * i) * kMiB;
    h = t.Update(s);
  }
  EXPECT_EQ(h.state(), "running");
  EXPECT_NEAR(h.memory_growth_bytes_per_s(), 2.0 * kMiB, 1e-6 * kMiB);
  EXPECT_NEAR(h.seconds_to_oom(), (1000.0 - 120) / 2, 1e-6);
  // Then 20 MiB/s: the fit over the last minute catches up and the limit is under a minute away,
  // while usage is still far below the 90% ratio.
  for (int i = 11; i <= 30; ++i) {
    s.now = i;
    s.memory_bytes = (120 + 20 * (i - 10)) * kMiB;
    h = t.Update(s);
  }
  EXPECT_LT(h.memory_ratio(), 0.9);
  EXPECT_EQ(h.state(), "memory-pressure") << h.DebugString();
  EXPECT_GT(h.seconds_to_oom(), 0);
  EXPECT_LE(h.seconds_to_oom(), 60);
  EXPECT_NE(h.detail().find("limit reached in"), std::string::npos) << h.detail();
  // Flat usage: no prediction, no pressure.
  HealthTracker flat(c);
  for (int i = 0; i <= 20; ++i) {
    s.now = i;
    s.memory_bytes = 500 * kMiB;
    h = flat.Update(s);
  }
  EXPECT_EQ(h.state(), "running");
  EXPECT_EQ(h.seconds_to_oom(), 0);
  // Too little history (under 5 s): no prediction yet.
  HealthTracker young(c);
  for (int i = 0; i <= 3; ++i) {
    s.now = i;
    s.memory_bytes = (100 + 200 * i) * kMiB;
    h = young.Update(s);
  }
  EXPECT_EQ(h.seconds_to_oom(), 0);
}

TEST(Health, ExitedSaysHowOrThatItIsUnknown) {
  EXPECT_EQ(HealthTracker::Exited(true, 3, 0).detail(), "exited with code 3");
  EXPECT_EQ(HealthTracker::Exited(true, 0, 9).detail(), "killed by signal 9");
  EXPECT_FALSE(HealthTracker::Exited(false, 0, 0).exit_known());
}

}  // namespace
}  // namespace cairn::daemon
