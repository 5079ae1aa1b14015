#include "sim/workload.h"

#include <algorithm>

#include "absl/strings/str_format.h"

namespace cairn::sim {

uint64_t Rng::Next() {
  uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

double Rng::Uniform(double lo, double hi) {
  double u = static_cast<double>(Next() >> 11) * (1.0 / 9007199254740992.0);
  return lo + (hi - lo) * u;
}

size_t Rng::Index(size_t n) { return n == 0 ? 0 : static_cast<size_t>(Next() % n); }

std::vector<SimJobSpec> GenerateJobs(const WorkloadOptions& opt, double horizon_s, int gpus) {
  Rng rng(opt.seed * 0x2545F4914F6CDD1DULL + 17);
  std::vector<SimJobSpec> jobs;
  const double h = 3600;
  double max_work_h = std::max(opt.min_work_h, std::min(opt.max_work_h, horizon_s / h / 4));
  double lifetime_h = std::min(opt.service_lifetime_h, horizon_s / h / 3);
  for (int i = 0; i < opt.jobs; ++i) {
    SimJobSpec j;
    j.id = absl::StrFormat("job-%05d", i);
    j.service = rng.Uniform(0, 1) < opt.service_fraction;
    j.state_gb = rng.Uniform(opt.min_state_gb, opt.max_state_gb) * gpus;
    j.priority = static_cast<int>(rng.Index(3));
    if (j.service) {
      j.lifetime_s = lifetime_h * h;
      j.max_downtime_s = opt.service_max_downtime_s;
      j.arrival_s = rng.Uniform(0, std::max(0.0, horizon_s - j.lifetime_s - h));
      j.state_gb = std::max(2.0, j.state_gb / 4);  // a server's state: model + caches.
    } else {
      j.work_s = rng.Uniform(opt.min_work_h, max_work_h) * h;
      double factor = rng.Uniform(opt.min_deadline_factor, opt.max_deadline_factor);
      double window = j.work_s * factor;
      j.arrival_s = rng.Uniform(0, std::max(0.0, horizon_s - window - h));
      j.deadline_s = j.arrival_s + window;
    }
    jobs.push_back(std::move(j));
  }
  return jobs;
}

}  // namespace cairn::sim
