// sim_bench: how fast the scheduling brain decides, and how fast cairn-sim simulates.
//   placement: N nodes, M jobs placed one by one (Place + Bind): decisions/s, p50/p99/max
//              latency; plus the exhaustive Explain() over all nodes for a sample.
//   simulator: a trace (default: the 45-day us-east-1c trace) with J jobs, every strategy.
// Usage: sim_bench [--nodes 10000] [--jobs 100000] [--sim-jobs 1000] [--trace PATH]
// Figures and commands are recorded in docs/performance-scheduling.md.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "controller/cluster.h"
#include "controller/placement.h"
#include "sim/simulator.h"
#include "sim/trace.h"
#include "sim/workload.h"

namespace {

using Clock = std::chrono::steady_clock;
namespace ctl = cairn::controller;

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t i = std::min(v.size() - 1, static_cast<size_t>(p * (v.size() - 1) + 0.5));
  return v[i];
}

void PlacementBench(int nodes, int jobs) {
  ctl::Cluster cluster;
  cairn::sim::Rng rng(1);
  const char* types[] = {"V100", "A100", "T4", "H100"};
  const double price_per_gpu[] = {3.06, 4.10, 0.53, 12.3};
  for (int i = 0; i < nodes; ++i) {
    ctl::NodeSpec s;
    s.id = "node-" + std::to_string(i);
    int t = static_cast<int>(rng.Index(4));
    int gpus = rng.Index(10) < 7 ? 8 : 4;
    bool cpu_only = rng.Index(10) == 0;
    s.capacity = {12.0 * gpus, 96 * 1024 * static_cast<int64_t>(gpus), cpu_only ? 0 : gpus};
    s.gpu_type = cpu_only ? "" : types[t];
    s.market = rng.Index(2) ? ctl::Market::kSpot : ctl::Market::kOnDemand;
    double p = cpu_only ? 0.05 * s.capacity.cpus : price_per_gpu[t] * gpus;
    s.price_per_hour = s.market == ctl::Market::kSpot ? p * 0.3 : p;
    s.zone = "zone-" + std::to_string(rng.Index(6));
    s.cloud = "aws";
    if (!cluster.AddNode(s).ok()) std::abort();
    if (s.market == ctl::Market::kSpot) {
      (void)cluster.SetInterruptionRate(s.id, 0.02 * (1 + std::stoi(s.zone.substr(5))));
    }
  }
  size_t pools = 0;
  cluster.ForEachPool([&](const ctl::Cluster::Pool&) { ++pools; });
  ctl::Placer placer(cluster);
  std::vector<double> lat;
  lat.reserve(jobs);
  int placed = 0, rejected = 0, departed = 0;
  std::vector<std::string> bound;
  auto t0 = Clock::now();
  for (int i = 0; i < jobs; ++i) {
    // Once the cluster is about full, one job leaves for each that arrives (steady churn).
    if (i >= jobs / 3 && !bound.empty()) {
      size_t k = rng.Index(bound.size());
      (void)cluster.Unbind(bound[k], ctl::JobState::kDone);
      bound[k] = bound.back();
      bound.pop_back();
      ++departed;
    }
    ctl::JobSpec j;
    j.id = "job-" + std::to_string(i);
    int r = static_cast<int>(rng.Index(20));
    int gpus = r < 4 ? 0 : r < 14 ? 1 : r < 18 ? 2 : 4;
    j.request = {gpus == 0 ? 4.0 : 10.0 * gpus, (gpus == 0 ? 16 : 80) * 1024 * static_cast<int64_t>(std::max(1, gpus)), gpus};
    j.work_s = 3600 * (1 + rng.Index(48));
    j.checkpoint.interval_s = 600;
    j.checkpoint.pause_s = 5;
    j.checkpoint.restore_s = 60;
    j.checkpoint.on_notice = rng.Index(2);
    if (!cluster.AddJob(j).ok()) std::abort();
    ctl::PlacementRequest req;
    req.job = cluster.FindJob(j.id);
    auto a = Clock::now();
    auto p = placer.Place(req);
    if (p.ok()) {
      (void)cluster.Bind(j.id, p->node_id);
      bound.push_back(j.id);
      ++placed;
    } else {
      ++rejected;
    }
    lat.push_back(std::chrono::duration<double, std::micro>(Clock::now() - a).count());
  }
  double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  std::printf("placement: %d nodes (%zu pools), %d jobs: %d placed, %d rejected (no room), "
              "%d departed\n", nodes, pools, jobs, placed, rejected, departed);
  std::printf("  Place+Bind (departures included): %.0f decisions/s; latency p50 %.1f us, p99 %.1f us, max %.1f us; total %.2f s\n",
              jobs / secs, Percentile(lat, 0.5), Percentile(lat, 0.99),
              *std::max_element(lat.begin(), lat.end()), secs);
  // The exhaustive path (`cairn job explain`): every node scored and sorted.
  std::vector<double> ex;
  for (int i = 0; i < 200; ++i) {
    ctl::PlacementRequest req;
    req.job = cluster.FindJob("job-" + std::to_string(rng.Index(jobs)));
    auto a = Clock::now();
    ctl::Placement e = placer.Explain(req);
    ex.push_back(std::chrono::duration<double, std::milli>(Clock::now() - a).count());
    if (e.candidates.size() != static_cast<size_t>(nodes)) std::abort();
  }
  std::printf("  Explain (all %d nodes scored): p50 %.2f ms, p99 %.2f ms\n", nodes,
              Percentile(ex, 0.5), Percentile(ex, 0.99));
}

void SimBench(const std::string& path, int jobs) {
  cairn::sim::SpotTrace trace;
  if (!path.empty() && std::filesystem::exists(path)) {
    auto t = cairn::sim::LoadTrace(path);
    if (!t.ok()) {
      std::fprintf(stderr, "sim_bench: %s\n", std::string(t.status().message()).c_str());
      std::exit(1);
    }
    trace = *t;
  } else {
    // No trace: a synthetic 45-day one with the same tick (195 s) and ~50% availability.
    cairn::sim::Rng rng(3);
    std::vector<int> v;
    int cur = 1;
    for (int k = 0; k < 20158; ++k) {
      if (rng.Index(40) == 0) cur = 1 - cur;
      v.push_back(cur);
    }
    trace = cairn::sim::SyntheticTrace(195, v);
    std::printf("(trace %s not found: using a synthetic 45-day trace)\n", path.c_str());
  }
  cairn::sim::WorkloadOptions wl;
  wl.jobs = jobs;
  auto mix = cairn::sim::GenerateJobs(wl, trace.duration_s(), trace.instance.gpus);
  std::printf("simulator: %s, %.1f days, %d jobs\n", trace.path.c_str(), trace.duration_s() / 86400, jobs);
  double total = 0;
  for (cairn::sim::Strategy s : cairn::sim::AllStrategies()) {
    auto a = Clock::now();
    cairn::sim::SimResult r = cairn::sim::Simulate(trace, mix, s, {});
    double secs = std::chrono::duration<double>(Clock::now() - a).count();
    total += secs;
    std::printf("  %-13s %.3f s wall, %llu events (%.2f M events/s), cost $%.0f\n",
                std::string(cairn::sim::StrategyName(s)).c_str(), secs,
                static_cast<unsigned long long>(r.events), r.events / secs / 1e6, r.cost_usd);
  }
  std::printf("  all four strategies: %.2f s\n", total);
}

}  // namespace

int main(int argc, char** argv) {
  int nodes = 10000, jobs = 100000, sim_jobs = 1000;
  std::string trace = std::string(CAIRN_TRACES_DIR) +
                      "/availability/1-node/aws-02-15-2023/us-east-1c_v100_1.json";
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i];
    if (k == "--nodes") nodes = std::atoi(argv[i + 1]);
    else if (k == "--jobs") jobs = std::atoi(argv[i + 1]);
    else if (k == "--sim-jobs") sim_jobs = std::atoi(argv[i + 1]);
    else if (k == "--trace") trace = argv[i + 1];
    else {
      std::fprintf(stderr, "usage: sim_bench [--nodes N] [--jobs M] [--sim-jobs J] [--trace PATH]\n");
      return 2;
    }
  }
  PlacementBench(nodes, jobs);
  SimBench(trace, sim_jobs);
  return 0;
}
