#include "controller/policy.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "controller/rules.h"

namespace cairn::controller {

absl::string_view TriggerName(Trigger t) {
  switch (t) {
    case Trigger::kSpotNotice: return "spot-notice";
    case Trigger::kNodeLost: return "node-lost";
    case Trigger::kGpuHealth: return "gpu-health";
    case Trigger::kJobHung: return "job-hung";
    case Trigger::kMemoryPressure: return "memory-pressure";
    case Trigger::kCapacityAdded: return "capacity-added";
    case Trigger::kCapacityReturned: return "capacity-returned";
    case Trigger::kScaleDown: return "scale-down";
    case Trigger::kFailurePrediction: return "failure-prediction";
    case Trigger::kDeadlineCheck: return "deadline-check";
  }
  return "?";
}

absl::string_view ActionName(Action a) {
  switch (a) {
    case Action::kCheckpoint: return "checkpoint";
    case Action::kMigrate: return "migrate";
    case Action::kRestore: return "restore";
    case Action::kDrainNode: return "drain";
    case Action::kSuspend: return "suspend";
    case Action::kResume: return "resume";
  }
  return "?";
}

std::vector<Decision> PolicyEngine::Handle(const Event& event, const PolicyContext& ctx) const {
  std::vector<Decision> out;
  for (const auto& rule : rules_) {
    if (rule->trigger() != event.trigger) continue;
    std::vector<Decision> d = rule->Evaluate(event, ctx);
    out.insert(out.end(), std::make_move_iterator(d.begin()), std::make_move_iterator(d.end()));
  }
  return out;
}

PolicyEngine PolicyEngine::Default() {
  PolicyEngine e;
  e.Add(std::make_unique<SpotNoticeRule>());
  e.Add(std::make_unique<NodeLostRule>());
  e.Add(std::make_unique<GpuHealthRule>());
  e.Add(std::make_unique<HungJobRule>());
  e.Add(std::make_unique<MemoryPressureRule>());
  e.Add(std::make_unique<CheaperCapacityRule>());
  e.Add(std::make_unique<ScaleDownRule>());
  e.Add(std::make_unique<ResumeRule>());
  e.Add(std::make_unique<DeadlineGuardRule>());
  e.Add(std::make_unique<FailurePredictionRule>());
  return e;
}

double RestartOverheadS(const Job& job, const PolicyConfig& cfg) {
  return cfg.launch_s + job.spec.checkpoint.restore_s;
}

double WorkDoneAt(const Job& job, double now) {
  double w = job.work_done_s;
  if (job.state == JobState::kRunning && now > job.progress_time) w += now - job.progress_time;
  return std::min(w, job.spec.work_s > 0 ? job.spec.work_s : w);
}

double DeadlineSlackS(const Job& job, double now, double perf, const PolicyConfig& cfg) {
  if (job.spec.kind != JobKind::kBatch || job.spec.sla.deadline <= 0) {
    return std::numeric_limits<double>::infinity();
  }
  double remaining = std::max(0.0, job.spec.work_s - WorkDoneAt(job, now)) / perf;
  const CheckpointPolicy& cp = job.spec.checkpoint;
  if (cp.interval_s > 0) remaining *= 1 + cp.pause_s / cp.interval_s;  // periodic pauses
  return job.spec.sla.deadline - now - remaining - RestartOverheadS(job, cfg);
}

namespace {
// The initial slack and the window it is spread over.
void SlackLine(const Job& job, double perf, const PolicyConfig& cfg, double* s0, double* window) {
  *window = std::max(1.0, job.spec.sla.deadline - job.spec.submit_time);
  double run = job.spec.work_s / perf;
  const CheckpointPolicy& cp = job.spec.checkpoint;
  if (cp.interval_s > 0) run *= 1 + cp.pause_s / cp.interval_s;
  *s0 = std::max(0.0, *window - run - RestartOverheadS(job, cfg));
}
}  // namespace

double WaitReserveS(const Job& job, double now, double perf, const PolicyConfig& cfg) {
  if (job.spec.kind != JobKind::kBatch || job.spec.sla.deadline <= 0) return 0;
  double s0, window;
  SlackLine(job, perf, cfg, &s0, &window);
  double left = std::clamp(job.spec.sla.deadline - now, 0.0, window);
  return cfg.deadline_reserve_s + cfg.slack_keep * s0 * left / window;
}

double WaitDeadline(const Job& job, double now, double perf, const PolicyConfig& cfg) {
  if (job.spec.kind != JobKind::kBatch || job.spec.sla.deadline <= 0) {
    return std::numeric_limits<double>::infinity();
  }
  // While waiting, slack falls one second per second and the reserve falls a = keep*s0/window
  // seconds per second; they meet at t = now + (slack - reserve) / (1 - a).
  double s0, window;
  SlackLine(job, perf, cfg, &s0, &window);
  double a = cfg.slack_keep * s0 / window;
  double gap = DeadlineSlackS(job, now, perf, cfg) - WaitReserveS(job, now, perf, cfg);
  if (gap <= 0) return now;
  return now + gap / std::max(1e-9, 1.0 - a);
}

double MoveDowntimeS(const Job& job) {
  const CheckpointPolicy& cp = job.spec.checkpoint;
  return std::max(cp.pause_s, cp.notice_checkpoint_s) + cp.restore_s;
}

double InterruptionDowntimeS(const Job& job, const PolicyConfig& cfg, double notice_s) {
  const CheckpointPolicy& cp = job.spec.checkpoint;
  double ck = std::max(cp.pause_s, cp.notice_checkpoint_s);
  if (!cp.on_notice) return cfg.launch_s + cp.restore_s;
  return std::max(0.0, cfg.launch_s - notice_s) + ck + cp.restore_s;
}

double DowntimeLeftS(const Job& job) {
  if (job.spec.sla.max_downtime_s <= 0) return std::numeric_limits<double>::infinity();
  return job.spec.sla.max_downtime_s - job.downtime_s;
}

}  // namespace cairn::controller
