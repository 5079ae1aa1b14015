#include "engine/restore/time_ns.h"

#include <time.h>

#include <algorithm>
#include <cstdint>

#include "absl/strings/str_format.h"
#include "common/clock.h"

namespace cairn::restore {
namespace {

// "NAME SECS NSECS\n" with 0 <= NSECS < 1e9 (the kernel's format; SECS may be negative).
std::string Line(const char* name, int64_t offset_ns) {
  int64_t secs = offset_ns / 1000000000, nsecs = offset_ns % 1000000000;
  if (nsecs < 0) secs -= 1, nsecs += 1000000000;
  return absl::StrFormat("%s %d %d\n", name, secs, nsecs);
}

}  // namespace

std::string TimeNamespaceOffsets(const image::TimeNamespace& t, const std::string& boot_id) {
  int64_t monotonic = t.monotonic_offset_ns(), boottime = t.boottime_offset_ns();
  if (boot_id != t.boot_id()) {
    int64_t away = std::max<int64_t>(0, ClockNs(CLOCK_REALTIME) - t.realtime_ns());
    monotonic = t.monotonic_ns() + away - ClockNs(CLOCK_MONOTONIC);
    boottime = t.boottime_ns() + away - ClockNs(CLOCK_BOOTTIME);
  }
  return Line("monotonic", monotonic) + Line("boottime", boottime);
}

}  // namespace cairn::restore
