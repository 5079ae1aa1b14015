// A clock's reading in nanoseconds.
#pragma once

#include <time.h>

#include <cstdint>

namespace cairn {

inline int64_t ClockNs(clockid_t clock) {
  timespec ts{};
  ::clock_gettime(clock, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

}  // namespace cairn
