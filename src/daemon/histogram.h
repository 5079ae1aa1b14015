#pragma once
// A Prometheus histogram of durations in seconds: cumulative counts under fixed bounds, their
// sum and count, over the daemon's life (a scraper computes any quantile over any window from
// them with histogram_quantile(); a summary of the last N could not be aggregated across nodes).
// Not thread-safe: the caller holds a lock.

#include <array>
#include <cstdint>
#include <string>

namespace cairn::daemon {

class Histogram {
 public:
  // Bounds ("le") from 10 ms to 5 min: a checkpoint's freeze and its whole time both fit.
  static constexpr std::array<double, 13> kBounds = {0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300};

  void Observe(double seconds);
  uint64_t count() const { return count_; }
  double sum() const { return sum_; }
  // The exposition lines of metric `name` (with `labels`, e.g. `node="a"`, possibly empty):
  // NAME_bucket{...,le="B"} for each bound and "+Inf", NAME_sum, NAME_count.
  std::string Render(const std::string& name, const std::string& labels) const;

 private:
  std::array<uint64_t, kBounds.size()> buckets_{};  // each: observations <= its bound (not cumulative)
  uint64_t count_ = 0;
  double sum_ = 0;
};

}  // namespace cairn::daemon
