#include "engine/restore/time_ns.h"

#include <time.h>

#include <cstdint>
#include <cstdio>

#include "common/clock.h"
#include "gtest/gtest.h"

namespace cairn::restore {
namespace {

// The offsets written, in ns: "monotonic SECS NSECS\nboottime SECS NSECS\n".
std::pair<int64_t, int64_t> Parse(const std::string& text) {
  long long ms = 0, mn = 0, bs = 0, bn = 0;
  EXPECT_EQ(std::sscanf(text.c_str(), "monotonic %lld %lld\nboottime %lld %lld\n", &ms, &mn, &bs, &bn), 4) << text;
  EXPECT_GE(mn, 0);
  EXPECT_LT(mn, 1000000000);
  return {ms * 1000000000 + mn, bs * 1000000000 + bn};
}

// Restored on the boot it was checkpointed on: the job's offsets as they were, negative ones
// written as the kernel wants them (whole seconds down, nanoseconds 0..1e9).
TEST(TimeNamespaceTest, TheSameBootKeepsTheOffsets) {
  image::TimeNamespace t;
  t.set_boot_id("this-boot");
  t.set_monotonic_offset_ns(-1500000000);
  t.set_boottime_offset_ns(7250000000);
  std::string text = TimeNamespaceOffsets(t, "this-boot");
  EXPECT_EQ(text, "monotonic -2 500000000\nboottime 7 250000000\n");
  EXPECT_EQ(Parse(text), std::make_pair(int64_t{-1500000000}, int64_t{7250000000}));
}

// On another boot the clocks go on from their checkpointed values plus the wall-clock time the
// job was away — whatever this machine's uptime.
TEST(TimeNamespaceTest, AnotherBootContinuesTheClocks) {
  constexpr int64_t kDay = 86400LL * 1000000000, kAway = 30LL * 1000000000;
  image::TimeNamespace t;
  t.set_boot_id("the-other-machine");
  t.set_monotonic_offset_ns(123);  // not used there
  t.set_monotonic_ns(ClockNs(CLOCK_MONOTONIC) + 3 * kDay);  // that machine had been up 3 days longer
  t.set_boottime_ns(ClockNs(CLOCK_BOOTTIME) + 3 * kDay + 5);
  t.set_realtime_ns(ClockNs(CLOCK_REALTIME) - kAway);
  auto [mono, boot] = Parse(TimeNamespaceOffsets(t, "this-boot"));
  // The job's clock here = this machine's + offset = where it was + 30 s (within the test's own run).
  EXPECT_NEAR(static_cast<double>(mono), static_cast<double>(3 * kDay + kAway), 1e9);
  EXPECT_NEAR(static_cast<double>(boot), static_cast<double>(3 * kDay + kAway), 1e9);

  // A wall clock set back since: the clocks do not go back, they go on from where they were.
  t.set_realtime_ns(ClockNs(CLOCK_REALTIME) + kDay);
  auto [mono2, boot2] = Parse(TimeNamespaceOffsets(t, "this-boot"));
  EXPECT_NEAR(static_cast<double>(mono2), static_cast<double>(3 * kDay), 1e9);
  EXPECT_NEAR(static_cast<double>(boot2), static_cast<double>(3 * kDay), 1e9);
}

}  // namespace
}  // namespace cairn::restore
