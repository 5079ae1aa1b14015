#pragma once
// The rules cairn ships. Each is trigger -> condition -> action; docs/scheduling.md has the
// same list with examples. All read the cluster through PolicyContext and change nothing.

#include <string>
#include <vector>

#include "controller/policy.h"

namespace cairn::controller {

#define CAIRN_DECLARE_RULE(Class, Name, Trig)                                          \
  class Class : public Rule {                                                          \
   public:                                                                             \
    absl::string_view name() const override { return Name; }                           \
    Trigger trigger() const override { return Trigger::Trig; }                         \
    std::vector<Decision> Evaluate(const Event& e, const PolicyContext& ctx) const override; \
  }

// Spot notice -> if a checkpoint fits in the notice window: checkpoint now, then either wait
// for spot (a batch job whose slack exceeds its wait reserve) or restore on the best other
// node; otherwise restore the latest checkpoint on the best other node.
CAIRN_DECLARE_RULE(SpotNoticeRule, "spot-notice", kSpotNotice);
// Node lost -> restore each of its jobs' latest checkpoint on the best other node.
CAIRN_DECLARE_RULE(NodeLostRule, "node-lost", kNodeLost);
// GPU health event -> if the Xid is fatal or uncorrectable ECC errors reach the threshold:
// migrate every job (or restore its latest checkpoint if the GPU is gone), then drain the node.
CAIRN_DECLARE_RULE(GpuHealthRule, "gpu-health", kGpuHealth);
// Hung job -> if no progress for hang_timeout_s: restore the last checkpoint taken before
// the hang began.
CAIRN_DECLARE_RULE(HungJobRule, "hung-job", kJobHung);
// Memory pressure -> if the OOM is predicted sooner than memory_safety x the time to move:
// migrate to a node with room for the use predicted an hour ahead; else checkpoint.
CAIRN_DECLARE_RULE(MemoryPressureRule, "memory-pressure", kMemoryPressure);
// Cheaper capacity -> migrate a running job when the saving over its remaining run time
// exceeds (1 + move_margin) x the cost of moving, and its deadline still holds.
CAIRN_DECLARE_RULE(CheaperCapacityRule, "cheaper-capacity", kCapacityAdded);
// Scale-down -> suspend the lowest-priority running jobs (batch before services) until
// gpus_to_free GPUs are free.
CAIRN_DECLARE_RULE(ScaleDownRule, "scale-down", kScaleDown);
// Capacity returned -> resume suspended jobs, highest priority and earliest deadline first;
// jobs waiting for cheap capacity only onto spot unless their deadline needs on-demand.
CAIRN_DECLARE_RULE(ResumeRule, "resume", kCapacityReturned);
// Deadline check -> a waiting batch job whose slack fell to its wait reserve resumes on the
// best node, on-demand included.
CAIRN_DECLARE_RULE(DeadlineGuardRule, "deadline-guard", kDeadlineCheck);
// Failure prediction -> checkpoint when precision x work saved > checkpoint cost.
CAIRN_DECLARE_RULE(FailurePredictionRule, "failure-prediction", kFailurePrediction);

#undef CAIRN_DECLARE_RULE

// The failure-prediction arithmetic, exposed for tests and `cairn job explain`.
struct PredictionVerdict {
  bool act = false;
  double saved_s = 0;          // work a checkpoint now saves if the failure happens.
  double expected_saved_s = 0; // precision * saved_s
  double cost_s = 0;           // the checkpoint's pause, paid whether or not it happens.
  std::string arithmetic;      // the comparison, with numbers.
};

// For a job running at `now` with a prediction of precision `p` and warning `w` seconds:
// saved = work since the last checkpoint, or 0 when the checkpoint cannot finish inside the
// warning (c > w) or a periodic checkpoint completes before the failure anyway;
// act iff p * saved > c.
PredictionVerdict EvaluatePrediction(const Job& job, double now, double precision,
                                     double warning_s);

}  // namespace cairn::controller
