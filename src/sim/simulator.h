#pragma once
// cairn-sim's core: a discrete-event simulation in virtual time of one zone's spot capacity
// (a trace) plus unlimited on-demand capacity, running a job mix under one strategy.
//
// The cairn strategy is not re-implemented here: the simulator keeps a controller::Cluster in
// step with its virtual cloud, asks controller::Placer where jobs go, and turns events (spot
// notices, capacity returning, deadline checks) into controller::Event values that the
// controller's own PolicyEngine answers. The simulator only carries the decisions out and
// accounts time and money. The baselines use the same Placer with market restrictions.
//
// Deterministic: the same trace, jobs, strategy and options give the same result.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "controller/policy.h"
#include "sim/trace.h"
#include "sim/workload.h"

namespace cairn::sim {

enum class Strategy {
  kOnDemand,        // on-demand only: no interruptions, list price.
  kSpotRestart,     // spot; a preempted job restarts from scratch.
  kSpotCheckpoint,  // spot; application checkpoints every 30 min (SkyPilot managed-job style).
  // Uniform Progress ("Can't Be Late", NSDI'24), with the same application checkpoints: spot
  // whenever there is some; without it, on-demand only while the job is behind the line of
  // uniform progress to its deadline (waiting while ahead); from on-demand back to spot, or to
  // waiting, once it is ahead by the cost of a switch; on-demand for good when its slack is down
  // to a restart (the safety net).
  kUniformProgress,
  kCairn,           // cairn's policies (see docs/scheduling.md).
};
absl::string_view StrategyName(Strategy s);
std::vector<Strategy> AllStrategies();
// "all" or a comma-separated list of names.
absl::StatusOr<std::vector<Strategy>> ParseStrategies(absl::string_view s);

struct SimOptions {
  uint64_t seed = 1;
  double spot_price_fraction = 0.30;  // spot price = this x on-demand price.
  double notice_s = 120;              // AWS interruption notice.
  double launch_s = 180;              // request to booted instance.
  double init_s = 60;                 // framework start-up of a job started from its code.
  double warmup_s = 300;              // a service started cold (load model, fill caches).
  double app_checkpoint_interval_s = 1800;
  double app_write_gbps = 0.5;        // an application writing its own checkpoint (pause).
  double restore_gbps = 1.0;          // reading a checkpoint back, any strategy.
  double cairn_interval_s = 600;
  double cairn_pause_s = 5;           // device-to-host snapshot; the upload runs in background.
  double upload_gbps = 1.25;          // a whole-state upload on a notice (10 Gbit/s).
  double service_downtime_cost_per_hour = 50;
  double baseline_reserve_s = 600;
  double node_failures_per_hour = 0;  // every bound node, spot or on-demand: dies without notice.    // baselines' deadline guard: slack kept beyond a restart.
  controller::PolicyConfig policy;    // cairn's rules.
  int log_decisions = 0;              // print this many cairn decisions with reasons to stderr.
};

struct SimResult {
  std::string strategy;
  double cost_usd = 0;
  int batch_jobs = 0;
  int deadlines_met = 0;
  int services = 0;
  int services_sla_met = 0;
  double useful_h = 0;   // batch work completed + service uptime.
  double paid_h = 0;     // instance-hours billed.
  double lost_work_h = 0;
  double service_downtime_h = 0;
  double spot_h = 0;
  double on_demand_h = 0;
  int preemptions = 0;   // reclaims that hit a job.
  int migrations = 0;    // moves by checkpoint and restore.
  int node_failures = 0;
  uint64_t events = 0;
  std::map<std::string, int> decisions_by_rule;  // cairn only.

  double goodput() const { return paid_h > 0 ? useful_h / paid_h : 0; }
  double deadline_attainment() const {
    return batch_jobs > 0 ? static_cast<double>(deadlines_met) / batch_jobs : 1.0;
  }
  double service_attainment() const {
    return services > 0 ? static_cast<double>(services_sla_met) / services : 1.0;
  }
};

// Runs `jobs` under `strategy` against `trace`. Spot capacity at a tick is the trace's units
// times ceil(jobs / trace.nominal_pool): a 1-node trace says whether the zone can supply an
// instance to anyone who asks, and a 16-node trace is scaled up to the job count.
SimResult Simulate(const SpotTrace& trace, const std::vector<SimJobSpec>& jobs, Strategy strategy,
                   const SimOptions& options);

}  // namespace cairn::sim
