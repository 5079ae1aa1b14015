#pragma once
// Policies: each one an explicit trigger -> condition -> action rule. A rule reads the cluster
// (never changes it) and returns decisions; the caller (the controller, or the simulator)
// carries them out. Every decision names its rule and carries a reason with the numbers that
// made the condition true, so an operator can check the arithmetic. docs/scheduling.md lists
// every rule.
//
// Thread safety: rules are stateless and const; a PolicyEngine may be shared once built.

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "controller/cluster.h"
#include "controller/placement.h"

namespace cairn::controller {

enum class Trigger {
  kSpotNotice,         // the cloud will reclaim node_id in notice_s seconds.
  kNodeLost,           // node_id's heartbeats stopped.
  kGpuHealth,          // node_id reported a GPU Xid / uncorrectable ECC event.
  kJobHung,            // job_id made no progress since last_progress_time.
  kMemoryPressure,     // job_id's memory use approaches its cgroup limit.
  kCapacityAdded,      // a node joined or got cheaper (node_id).
  kCapacityReturned,   // capacity became available again: resume suspended jobs.
  kScaleDown,          // free gpus_to_free GPUs.
  kFailurePrediction,  // a predictor says node_id fails in warning_s, with precision.
  kDeadlineCheck,      // re-evaluate a waiting batch job's deadline (job_id).
};
absl::string_view TriggerName(Trigger t);

// One event. Only the fields its trigger names are read.
struct Event {
  Trigger trigger = Trigger::kSpotNotice;
  double time = 0;
  std::string node_id;
  std::string job_id;
  double notice_s = 120;  // kSpotNotice (AWS gives two minutes).
  int xid = 0;            // kGpuHealth
  int ecc_uncorrectable = 0;
  double last_progress_time = 0;  // kJobHung
  int64_t memory_used_mb = 0;     // kMemoryPressure
  int64_t memory_limit_mb = 0;
  double memory_growth_mb_per_s = 0;
  int gpus_to_free = 0;   // kScaleDown
  double precision = 0;   // kFailurePrediction: P(failure happens | predicted).
  double warning_s = 0;   // kFailurePrediction: time from prediction to failure.
};

enum class Action {
  kCheckpoint,  // take a checkpoint now (the job keeps running where it is).
  kMigrate,     // checkpoint, then restore on target_node_id; the source is released.
  kRestore,     // restore the checkpoint taken at restore_from_time on target_node_id
                // (restore_from_time < 0: no checkpoint, start from the beginning).
  kDrainNode,   // take node_id out of placement.
  kSuspend,     // checkpoint to storage and release the node.
  kResume,      // restore a suspended job on target_node_id.
};
absl::string_view ActionName(Action a);

struct Decision {
  Action action = Action::kCheckpoint;
  std::string job_id;
  std::string node_id;         // where the job is (or the node acted on).
  std::string target_node_id;  // kMigrate, kRestore, kResume.
  double restore_from_time = -1;
  SuspendReason suspend_reason = SuspendReason::kNone;  // kSuspend.
  std::string rule;
  std::string reason;
};

// Knobs every rule reads. Defaults are the documented ones.
struct PolicyConfig {
  double launch_s = 180;          // to obtain and boot a replacement node.
  double hang_timeout_s = 600;    // no progress for this long = hung.
  double memory_safety = 2.0;     // act when time to OOM < memory_safety * time to move.
  double memory_headroom = 1.25;  // target memory >= headroom * use predicted an hour ahead.
  double move_margin = 0.2;       // cheaper capacity: saving > (1 + margin) * cost of moving.
  double service_horizon_h = 24;  // how far ahead a service's savings are counted.
  // A planned move of a service may spend at most this share of its remaining downtime
  // allowance (move + interruptions expected on the new node), so the allowance is never
  // spent down by a run of individually affordable moves.
  double downtime_spend = 0.25;
  double deadline_reserve_s = 600;  // slack kept beyond one restart, for batch deadlines.
  // Fraction of the uniform-progress slack line a waiting job keeps (0 = greedy: wait until
  // only the reserve is left; 1 = never fall below the line). See docs/scheduling.md.
  double slack_keep = 0.5;
  bool wait_for_spot = true;      // batch jobs with slack may wait for spot instead of on-demand.
  std::set<int> fatal_xids = {48, 63, 64, 74, 79, 92, 94, 95};
  std::set<int> gpu_gone_xids = {79};  // the GPU fell off the bus: no checkpoint possible.
  int ecc_threshold = 1;
};

struct PolicyContext {
  const Cluster& cluster;
  const Placer& placer;
  const PolicyConfig& config;
  double now = 0;
  // Jobs with a decision still being carried out or resolved: the controller takes no other
  // decision for them, so a rule that shares out room (a node claimed by one move is not offered
  // to the next) leaves them out before it does.
  const std::set<std::string>* settling = nullptr;
  bool Settling(const std::string& job_id) const { return settling != nullptr && settling->count(job_id) != 0; }
};

class Rule {
 public:
  virtual ~Rule() = default;
  virtual absl::string_view name() const = 0;
  virtual Trigger trigger() const = 0;
  // Decisions for `event`, in the order to carry them out. Empty when the event is not this
  // rule's trigger or its condition does not hold.
  virtual std::vector<Decision> Evaluate(const Event& event, const PolicyContext& ctx) const = 0;
};

class PolicyEngine {
 public:
  void Add(std::unique_ptr<Rule> rule) { rules_.push_back(std::move(rule)); }
  // Every rule whose trigger matches, in the order they were added.
  std::vector<Decision> Handle(const Event& event, const PolicyContext& ctx) const;
  const std::vector<std::unique_ptr<Rule>>& rules() const { return rules_; }
  // All the rules in rules.h.
  static PolicyEngine Default();

 private:
  std::vector<std::unique_ptr<Rule>> rules_;
};

// --- Deadline arithmetic shared by the rules and the simulator. ---

// Seconds from a ready replacement node to the job running again, plus obtaining the node.
double RestartOverheadS(const Job& job, const PolicyConfig& cfg);

// Work the job has done by `now`, extrapolating from its last progress report when running.
double WorkDoneAt(const Job& job, double now);

// A batch job's slack: how long it could stop and still finish by its deadline on a node of
// throughput `perf`, after one restart. +inf without a deadline.
double DeadlineSlackS(const Job& job, double now, double perf, const PolicyConfig& cfg);

// The slack a waiting batch job must keep: one restart plus the reserve plus slack_keep of the
// uniform-progress line (the job's initial slack, shrinking linearly to 0 at its deadline).
double WaitReserveS(const Job& job, double now, double perf, const PolicyConfig& cfg);

// When a job waiting from `now` (not progressing) reaches its wait reserve; `now` if already
// there; +inf without a deadline.
double WaitDeadline(const Job& job, double now, double perf, const PolicyConfig& cfg);

// Time a job is not running when it is moved on purpose: the target boots while it runs, so
// only the final checkpoint and the restore count.
double MoveDowntimeS(const Job& job);

// Time a job is not running after an interruption with `notice_s` of warning: whatever of the
// boot the notice does not cover, plus the checkpoint and the restore.
double InterruptionDowntimeS(const Job& job, const PolicyConfig& cfg, double notice_s);

// What is left of a service's downtime allowance; +inf without one.
double DowntimeLeftS(const Job& job);

}  // namespace cairn::controller
