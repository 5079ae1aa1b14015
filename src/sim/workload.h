#pragma once
// Job mixes for the simulator: training jobs with deadlines and services with downtime limits,
// drawn from a seeded generator so a (trace, seed, jobs) triple always gives the same mix.

#include <cstdint>
#include <string>
#include <vector>

#include "sim/trace.h"

namespace cairn::sim {

// A small, portable PRNG (splitmix64): the same sequence on every platform and standard
// library, unlike std::uniform_*_distribution.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t Next();
  double Uniform(double lo, double hi);  // [lo, hi)
  size_t Index(size_t n);                // [0, n)

 private:
  uint64_t state_;
};

struct SimJobSpec {
  std::string id;
  bool service = false;
  double arrival_s = 0;
  double work_s = 0;       // batch: work on the trace's instance type.
  double deadline_s = 0;   // batch: absolute.
  double lifetime_s = 0;   // service: runs from arrival to arrival + lifetime.
  double max_downtime_s = 0;  // service: allowed total downtime.
  double state_gb = 0;     // checkpoint size.
  int priority = 0;
};

struct WorkloadOptions {
  int jobs = 100;
  uint64_t seed = 1;
  double service_fraction = 0.2;
  double min_work_h = 4;
  double max_work_h = 48;        // capped at a quarter of the trace.
  double min_deadline_factor = 1.3;  // deadline = arrival + work * factor.
  double max_deadline_factor = 2.5;
  double min_state_gb = 8;       // per GPU: model + optimizer + host state.
  double max_state_gb = 64;
  double service_lifetime_h = 72;  // capped at a third of the trace.
  double service_max_downtime_s = 1800;
};

// Draws the mix for a trace of `horizon_s` seconds and `gpus` GPUs per instance.
std::vector<SimJobSpec> GenerateJobs(const WorkloadOptions& opt, double horizon_s, int gpus);

}  // namespace cairn::sim
