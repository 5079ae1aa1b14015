#pragma once
// Health of one job from periodic samples: exited (code or signal), hung (neither its CPU time
// nor its heartbeat file moved for hang_after_s), memory pressure (cgroup usage against its limit
// at or above a ratio, or the limit predicted to be reached within oom_horizon_s at the growth
// rate fitted over the last minute). Pure logic over samples, so it is tested without processes.
//
// Thread safety: none; the daemon keeps one tracker per job under its lock.

#include <deque>
#include <optional>
#include <string>
#include <utility>

#include "daemon.pb.h"

namespace cairn::daemon {

struct HealthSample {
  double now = 0;                          // seconds, monotonic
  std::optional<double> cpu_seconds;
  std::optional<double> heartbeat_mtime;   // of the heartbeat file, when configured and present
  std::optional<int64_t> memory_bytes;
  std::optional<int64_t> memory_limit;
  std::optional<double> psi_some_avg10;
};

class HealthTracker {
 public:
  explicit HealthTracker(api::HealthConfig config) : config_(std::move(config)) {}

  // Takes a sample of a running job; returns its health (state running, hung or memory-pressure).
  api::Health Update(const HealthSample& s);
  // Marks the job ended. exit_known false: it ended while not our child (status unknown).
  static api::Health Exited(bool exit_known, int exit_code, int signal);

 private:
  api::HealthConfig config_;
  std::optional<double> last_cpu_, last_beat_;
  double last_progress_ = -1;
  std::deque<std::pair<double, double>> memory_;  // (now, bytes) over the last minute
};

// The least-squares slope of bytes over time, in bytes per second; 0 with fewer than three
// samples or less than `min_span_s` seconds between the first and the last.
double GrowthRate(const std::deque<std::pair<double, double>>& samples, double min_span_s);

}  // namespace cairn::daemon
