#pragma once
// Placement: choose the node a job should run on, and say why.
//
// Every candidate gets a score in dollars per hour of the job's progress (lower is better):
//
//   total = effective_price + risk + packing + stranding
//   effective_price = price_share / perf          (what an hour of reference work costs here)
//   risk            = interruptions_per_hour * interruption_cost_h * (effective_price + downtime_cost_per_hour)
//   packing         = w_packing  * price * slack after placing   (best fit: fill nodes up)
//   stranding       = w_stranding * price * max(0, host share - GPU share)   (GPU nodes only)
//
// price_share is the node's price times the job's dominant share of the node; perf is the GPU
// type's throughput factor (PerfTable); interruption_cost_h is the work the job loses when the
// node goes away (since its last checkpoint) plus its restore time. docs/scheduling.md explains
// each term with examples.
//
// Thread safety: a Placer only reads its Cluster; it is as thread-safe as the Cluster's readers.

#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "controller/cluster.h"

namespace cairn::controller {

// Throughput of each GPU type relative to a reference GPU (factor 1.0). Unknown types are 1.0.
struct PerfTable {
  std::map<std::string, double> factor;
  double Factor(absl::string_view gpu_type) const;
  // V100 = 1.0. See docs/scheduling.md for the sources of the others.
  static PerfTable Default();
};

struct ScoreWeights {
  double packing = 0.05;
  double stranding = 1.0;
};

struct PlacementRequest {
  const Job* job = nullptr;  // REQUIRES: non-null, owned by the Placer's Cluster or the caller.
  bool allow_on_demand = true;
  bool allow_spot = true;
  std::set<std::string> exclude_nodes;  // e.g. the node a job is being moved off.
};

// One candidate's score, term by term, or why it was not a candidate.
struct CandidateScore {
  std::string node_id;
  bool feasible = false;
  std::string rejected_because;  // empty when feasible.
  double price_share = 0;        // $/h of the node this job occupies.
  double perf = 1;
  double effective_price = 0;    // $/h per reference-work hour.
  double interruptions_per_hour = 0;
  double interruption_cost_h = 0;  // lost work + restore per interruption, hours.
  double risk = 0;
  double packing = 0;
  double stranding = 0;
  double total = 0;
};

struct Placement {
  std::string node_id;  // empty when no node is feasible (Explain only).
  CandidateScore chosen;
  // Explain(): every node, the chosen first, then feasible by total, then the rejected.
  // Place(): empty.
  std::vector<CandidateScore> candidates;
};

class Placer {
 public:
  Placer(const Cluster& cluster, PerfTable perf = PerfTable::Default(), ScoreWeights weights = {})
      : cluster_(cluster), perf_(std::move(perf)), weights_(weights) {}

  // The best node for the request, using the cluster's pool index: cost grows with the number
  // of pools, not nodes. Errors: ResourceExhausted when no node is feasible.
  absl::StatusOr<Placement> Place(const PlacementRequest& request) const;

  // Scores every node, feasible or not, for `cairn job explain`. Chooses the same node as
  // Place() (same scores, same tie-break: lower total, then earlier registration).
  Placement Explain(const PlacementRequest& request) const;

  // One node's score for the request. A job's own node counts its allocation as free.
  CandidateScore Score(const Node& node, const PlacementRequest& request) const;

  // Hours of work-equivalent a job loses when `node` is interrupted under it.
  double InterruptionCostHours(const Job& job, const Node& node) const;

  const PerfTable& perf() const { return perf_; }

 private:
  // Scores all terms except packing; sets feasible/rejected_because from pool-level attributes
  // and capacity of `free`.
  CandidateScore ScoreWithFree(const Node& node, const Resources& free,
                               const PlacementRequest& request) const;

  const Cluster& cluster_;
  PerfTable perf_;
  ScoreWeights weights_;
};

// A human-readable table of a placement's candidates for `cairn job explain`.
std::string FormatExplain(const Job& job, const Placement& placement);

}  // namespace cairn::controller
