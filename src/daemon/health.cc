#include "daemon/health.h"

#include "absl/strings/str_format.h"

namespace cairn::daemon {
namespace {

constexpr double kGrowthWindowS = 60;  // the growth rate is fitted over this much history
constexpr double kMinSpanS = 5;        // and only once it spans this much

}  // namespace

double GrowthRate(const std::deque<std::pair<double, double>>& samples, double min_span_s) {
  if (samples.size() < 3 || samples.back().first - samples.front().first < min_span_s) return 0;
  double n = static_cast<double>(samples.size()), st = 0, sb = 0;
  for (const auto& [t, b] : samples) {
    st += t;
    sb += b;
  }
  double mt = st / n, mb = sb / n, cov = 0, var = 0;
  for (const auto& [t, b] : samples) {
    cov += (t - mt) * (b - mb);
    var += (t - mt) * (t - mt);
  }
  return var > 0 ? cov / var : 0;
}

api::Health HealthTracker::Update(const HealthSample& s) {
  // Progress: CPU time grew (by more than 10 ms, above sampling noise) or the heartbeat file moved.
  bool moved = last_progress_ < 0;
  if (s.cpu_seconds && (!last_cpu_ || *s.cpu_seconds > *last_cpu_ + 0.01)) {
    moved = true;
    last_cpu_ = s.cpu_seconds;
  }
  if (s.heartbeat_mtime && (!last_beat_ || *s.heartbeat_mtime != *last_beat_)) {
    moved = moved || last_beat_.has_value();
    last_beat_ = s.heartbeat_mtime;
  }
  if (moved) last_progress_ = s.now;

  api::Health h;
  h.set_state("running");
  h.set_cpu_seconds(s.cpu_seconds.value_or(0));
  h.set_seconds_since_progress(s.now - last_progress_);
  h.set_memory_bytes(s.memory_bytes.value_or(0));
  h.set_memory_limit_bytes(s.memory_limit.value_or(0));
  if (s.memory_bytes && s.memory_limit && *s.memory_limit > 0) {
    h.set_memory_ratio(static_cast<double>(*s.memory_bytes) / static_cast<double>(*s.memory_limit));
  }
  h.set_psi_some_avg10(s.psi_some_avg10.value_or(0));
  if (s.memory_bytes) {
    memory_.emplace_back(s.now, static_cast<double>(*s.memory_bytes));
    while (!memory_.empty() && memory_.front().first < s.now - kGrowthWindowS) memory_.pop_front();
  }
  double growth = GrowthRate(memory_, kMinSpanS);
  h.set_memory_growth_bytes_per_s(growth);
  if (growth > 0 && h.memory_limit_bytes() > h.memory_bytes()) {
    h.set_seconds_to_oom(static_cast<double>(h.memory_limit_bytes() - h.memory_bytes()) / growth);
  }
  double horizon = config_.oom_horizon_s() == 0 ? 120 : config_.oom_horizon_s();
  bool oom_soon = horizon > 0 && h.seconds_to_oom() > 0 && h.seconds_to_oom() <= horizon;
  double ratio_limit = config_.memory_pressure_ratio() > 0 ? config_.memory_pressure_ratio() : 0.9;
  if (config_.hang_after_s() > 0 && h.seconds_since_progress() >= config_.hang_after_s()) {
    h.set_state("hung");
    h.set_detail(absl::StrFormat("no CPU progress%s for %.1f s (limit %.1f s)",
                                 config_.heartbeat_file().empty() ? "" : " and no heartbeat-file update",
                                 h.seconds_since_progress(), config_.hang_after_s()));
  } else if (h.memory_ratio() >= ratio_limit || oom_soon) {
    h.set_state("memory-pressure");
    h.set_detail(absl::StrFormat("memory %.1f MiB of %.1f MiB limit (%.0f%%, threshold %.0f%%)",
                                 static_cast<double>(h.memory_bytes()) / (1 << 20),
                                 static_cast<double>(h.memory_limit_bytes()) / (1 << 20), h.memory_ratio() * 100,
                                 ratio_limit * 100));
    if (h.seconds_to_oom() > 0) {
      absl::StrAppendFormat(h.mutable_detail(), "; growing %.2f MiB/s: limit reached in %.0f s%s",
                            growth / (1 << 20), h.seconds_to_oom(),
                            oom_soon ? absl::StrFormat(" (within the %.0f s horizon)", horizon) : "");
    }
  } else {
    h.set_detail(absl::StrFormat("cpu %.2f s, memory %.1f MiB", h.cpu_seconds(),
                                 static_cast<double>(h.memory_bytes()) / (1 << 20)));
  }
  return h;
}

api::Health HealthTracker::Exited(bool exit_known, int exit_code, int signal) {
  api::Health h;
  h.set_state("exited");
  h.set_exit_known(exit_known);
  h.set_exit_code(exit_code);
  h.set_signal(signal);
  if (!exit_known) {
    h.set_detail("ended while the daemon was not its parent (adopted after a restart): status unknown");
  } else if (signal != 0) {
    h.set_detail(absl::StrFormat("killed by signal %d", signal));
  } else {
    h.set_detail(absl::StrFormat("exited with code %d", exit_code));
  }
  return h;
}

}  // namespace cairn::daemon
