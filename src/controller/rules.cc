#include "controller/rules.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace cairn::controller {
namespace {

std::vector<std::string> JobsOn(const Cluster& c, const std::string& node_id) {
  const Node* n = c.FindNode(node_id);
  if (n == nullptr) return {};
  std::vector<std::string> ids = n->job_ids;
  std::sort(ids.begin(), ids.end());
  return ids;
}

absl::StatusOr<Placement> BestOther(const PolicyContext& ctx, const Job& job,
                                    const std::string& leave, bool allow_on_demand = true) {
  PlacementRequest r;
  r.job = &job;
  r.allow_on_demand = allow_on_demand;
  if (!leave.empty()) r.exclude_nodes.insert(leave);
  return ctx.placer.Place(r);
}

std::string Where(const Placement& p, const Cluster& c) {
  const Node* n = c.FindNode(p.node_id);
  return absl::StrFormat("%s (%s, $%.4f/h of progress)", p.node_id,
                         n ? MarketName(n->spec.market) : "?", p.chosen.total);
}

Decision Make(Action a, const Job& job, absl::string_view rule, std::string reason) {
  Decision d;
  d.action = a;
  d.job_id = job.spec.id;
  d.node_id = job.node_id;
  d.rule = std::string(rule);
  d.reason = std::move(reason);
  return d;
}

// A restore of `job`'s newest checkpoint before `before` (or from the beginning) on the best
// node other than `leave`; a suspension when none fits.
Decision RestoreLatest(const PolicyContext& ctx, const Job& job, const std::string& leave,
                       absl::string_view rule, const std::string& why, double before) {
  const CheckpointRecord* ck = job.LatestCheckpoint(before);
  double lost = WorkDoneAt(job, ctx.now) - (ck ? ck->work_s : 0);
  std::string from = ck ? absl::StrFormat("checkpoint of t=%.0f (loses %.0f s of work)", ck->time, lost)
                        : absl::StrFormat("the beginning, no checkpoint (loses %.0f s of work)", lost);
  auto p = BestOther(ctx, job, leave);
  if (!p.ok()) {
    Decision d = Make(Action::kSuspend, job, rule,
                      absl::StrCat(why, "; no other node fits: keep ", from, " in storage until capacity returns"));
    d.restore_from_time = ck ? ck->time : -1;
    d.suspend_reason = SuspendReason::kScaleDown;
    return d;
  }
  Decision d = Make(Action::kRestore, job, rule,
                    absl::StrCat(why, "; restore ", from, " on ", Where(*p, ctx.cluster)));
  d.target_node_id = p->node_id;
  d.restore_from_time = ck ? ck->time : -1;
  return d;
}

double Perf(const PolicyContext& ctx, const Job& job) {
  const Node* n = ctx.cluster.FindNode(job.node_id);
  if (n == nullptr || job.spec.request.gpus == 0) return 1.0;
  return ctx.placer.perf().Factor(n->spec.gpu_type);
}

double CheckpointSeconds(const CheckpointPolicy& cp) {
  return std::max(cp.pause_s, cp.notice_checkpoint_s);
}

}  // namespace

std::vector<Decision> SpotNoticeRule::Evaluate(const Event& e, const PolicyContext& ctx) const {
  if (e.trigger != trigger()) return {};
  std::vector<Decision> out;
  for (const std::string& id : JobsOn(ctx.cluster, e.node_id)) {
    const Job& job = *ctx.cluster.FindJob(id);
    const CheckpointPolicy& cp = job.spec.checkpoint;
    double ck_s = CheckpointSeconds(cp);
    if (!cp.on_notice || ck_s > e.notice_s) {
      std::string why = cp.on_notice
          ? absl::StrFormat("reclaim in %.0f s but a checkpoint takes %.0f s", e.notice_s, ck_s)
          : absl::StrFormat("reclaim in %.0f s; job does not checkpoint on notice", e.notice_s);
      out.push_back(RestoreLatest(ctx, job, e.node_id, name(), why,
                                  std::numeric_limits<double>::infinity()));
      continue;
    }
    std::string fits =
        absl::StrFormat("reclaim in %.0f s, checkpoint takes %.0f s and fits", e.notice_s, ck_s);
    if (job.spec.kind == JobKind::kBatch && job.spec.sla.deadline > 0 && ctx.config.wait_for_spot) {
      double perf = Perf(ctx, job);
      double slack = DeadlineSlackS(job, ctx.now + ck_s, perf, ctx.config);
      double reserve = WaitReserveS(job, ctx.now + ck_s, perf, ctx.config);
      if (slack > reserve) {
        // Prefer other spot capacity; otherwise wait for it rather than pay for on-demand.
        auto spot = BestOther(ctx, job, e.node_id, /*allow_on_demand=*/false);
        if (spot.ok()) {
          Decision d = Make(Action::kMigrate, job, name(),
                            absl::StrCat(fits, "; move to ", Where(*spot, ctx.cluster)));
          d.target_node_id = spot->node_id;
          out.push_back(std::move(d));
        } else {
          Decision d = Make(Action::kSuspend, job, name(),
                            absl::StrFormat("%s; slack %.0f s > wait reserve %.0f s: suspend to "
                                            "storage and wait for spot capacity",
                                            fits, slack, reserve));
          d.suspend_reason = SuspendReason::kWaitingForCheapCapacity;
          out.push_back(std::move(d));
        }
        continue;
      }
      fits = absl::StrFormat("%s; slack %.0f s <= wait reserve %.0f s, cannot wait", fits, slack,
                             reserve);
    }
    // A service whose downtime allowance could not absorb two more interruptions stays off spot.
    bool allow_spot = true;
    if (job.spec.kind == JobKind::kService && job.spec.sla.max_downtime_s > 0) {
      double per = InterruptionDowntimeS(job, ctx.config, e.notice_s);
      double left = DowntimeLeftS(job) - per;
      if (left < 2 * per) {
        allow_spot = false;
        fits = absl::StrFormat("%s; downtime allowance left %.0f s < 2 x %.0f s per interruption: "
                               "on-demand only", fits, left, per);
      }
    }
    PlacementRequest req;
    req.job = &job;
    req.exclude_nodes.insert(e.node_id);
    req.allow_spot = allow_spot;
    auto p = ctx.placer.Place(req);
    if (!p.ok()) {
      Decision d = Make(Action::kSuspend, job, name(),
                        absl::StrCat(fits, "; no other node fits: suspend to storage"));
      d.suspend_reason = SuspendReason::kScaleDown;
      out.push_back(std::move(d));
      continue;
    }
    Decision d = Make(Action::kMigrate, job, name(), absl::StrCat(fits, "; restore on ", Where(*p, ctx.cluster)));
    d.target_node_id = p->node_id;
    out.push_back(std::move(d));
  }
  return out;
}

std::vector<Decision> NodeLostRule::Evaluate(const Event& e, const PolicyContext& ctx) const {
  if (e.trigger != trigger()) return {};
  std::vector<Decision> out;
  for (const std::string& id : JobsOn(ctx.cluster, e.node_id)) {
    const Job& job = *ctx.cluster.FindJob(id);
    // A job group's rank comes back only with its whole group (the controller's group failover,
    // service/groups.cc): restored alone it would not match its peers.
    if (!job.spec.group.empty()) continue;
    out.push_back(RestoreLatest(ctx, job, e.node_id, name(),
                                absl::StrCat("node ", e.node_id, " lost (heartbeats stopped)"),
                                std::numeric_limits<double>::infinity()));
  }
  return out;
}

std::vector<Decision> GpuHealthRule::Evaluate(const Event& e, const PolicyContext& ctx) const {
  if (e.trigger != trigger()) return {};
  const PolicyConfig& cfg = ctx.config;
  bool fatal_xid = e.xid != 0 && cfg.fatal_xids.count(e.xid) != 0;
  bool ecc = e.ecc_uncorrectable >= cfg.ecc_threshold && e.ecc_uncorrectable > 0;
  if (!fatal_xid && !ecc) return {};
  std::string what = fatal_xid ? absl::StrCat("fatal Xid ", e.xid)
                               : absl::StrCat(e.ecc_uncorrectable, " uncorrectable ECC error(s) >= ",
                                              cfg.ecc_threshold);
  std::vector<Decision> out;
  bool gone = e.xid != 0 && cfg.gpu_gone_xids.count(e.xid) != 0;
  for (const std::string& id : JobsOn(ctx.cluster, e.node_id)) {
    const Job& job = *ctx.cluster.FindJob(id);
    if (gone) {
      out.push_back(RestoreLatest(ctx, job, e.node_id, name(),
                                  absl::StrCat(what, " on ", e.node_id, ": GPU unreachable, cannot checkpoint"),
                                  std::numeric_limits<double>::infinity()));
      continue;
    }
    auto p = BestOther(ctx, job, e.node_id);
    if (!p.ok()) {
      Decision d = Make(Action::kSuspend, job, name(),
                        absl::StrCat(what, " on ", e.node_id, ": checkpoint to storage, no other node fits"));
      d.suspend_reason = SuspendReason::kScaleDown;
      out.push_back(std::move(d));
      continue;
    }
    Decision d = Make(Action::kMigrate, job, name(),
                      absl::StrCat(what, " on ", e.node_id, ": checkpoint, restore on ", Where(*p, ctx.cluster)));
    d.target_node_id = p->node_id;
    out.push_back(std::move(d));
  }
  Decision drain;
  drain.action = Action::kDrainNode;
  drain.node_id = e.node_id;
  drain.rule = std::string(name());
  drain.reason = absl::StrCat(what, ": drain ", e.node_id, " after its jobs leave");
  out.push_back(std::move(drain));
  return out;
}

std::vector<Decision> HungJobRule::Evaluate(const Event& e, const PolicyContext& ctx) const {
  if (e.trigger != trigger()) return {};
  const Job* job = ctx.cluster.FindJob(e.job_id);
  if (job == nullptr || job->state != JobState::kRunning) return {};
  double stalled = ctx.now - e.last_progress_time;
  if (stalled < ctx.config.hang_timeout_s) return {};
  // Restore anywhere, its own node included: a hang is the job's state, not the node's.
  std::string why = absl::StrFormat("no progress for %.0f s >= %.0f s since t=%.0f", stalled,
                                    ctx.config.hang_timeout_s, e.last_progress_time);
  const CheckpointRecord* ck = job->LatestCheckpoint(e.last_progress_time);
  PlacementRequest r;
  r.job = job;
  auto p = ctx.placer.Place(r);
  Decision d = Make(Action::kRestore, *job, name(), "");
  d.restore_from_time = ck ? ck->time : -1;
  if (!p.ok()) {
    d.action = Action::kSuspend;
    d.suspend_reason = SuspendReason::kScaleDown;
    d.reason = absl::StrCat(why, "; no node fits: suspend");
    return {d};
  }
  d.target_node_id = p->node_id;
  d.reason = absl::StrCat(why, "; restore ",
                          ck ? absl::StrFormat("the last checkpoint before the hang (t=%.0f)", ck->time)
                             : std::string("from the beginning (no checkpoint before the hang)"),
                          " on ", Where(*p, ctx.cluster));
  return {d};
}

std::vector<Decision> MemoryPressureRule::Evaluate(const Event& e, const PolicyContext& ctx) const {
  if (e.trigger != trigger()) return {};
  const Job* job = ctx.cluster.FindJob(e.job_id);
  if (job == nullptr || job->state != JobState::kRunning) return {};
  if (e.memory_growth_mb_per_s <= 0 || e.memory_limit_mb <= 0) return {};
  double to_oom = std::max(0.0, (e.memory_limit_mb - e.memory_used_mb) / e.memory_growth_mb_per_s);
  const CheckpointPolicy& cp = job->spec.checkpoint;
  double move_s = CheckpointSeconds(cp) + cp.restore_s;
  double act_within = ctx.config.memory_safety * move_s;
  if (to_oom > act_within) return {};
  int64_t need = static_cast<int64_t>(std::ceil(
      (e.memory_used_mb + e.memory_growth_mb_per_s * 3600) * ctx.config.memory_headroom));
  std::string why = absl::StrFormat(
      "OOM predicted in %.0f s (%d of %d MB, +%.1f MB/s) < %.1f x move %.0f s", to_oom,
      e.memory_used_mb, e.memory_limit_mb, e.memory_growth_mb_per_s, ctx.config.memory_safety,
      move_s);
  Job bigger = *job;
  bigger.spec.request.memory_mb = std::max(need, job->spec.request.memory_mb);
  auto p = BestOther(ctx, bigger, job->node_id);
  if (!p.ok()) {
    return {Make(Action::kCheckpoint, *job, name(),
                 absl::StrFormat("%s; no node has %d MB free: checkpoint now so the OOM kill "
                                 "loses nothing", why, bigger.spec.request.memory_mb))};
  }
  Decision d = Make(Action::kMigrate, *job, name(),
                    absl::StrFormat("%s; migrate with a %d MB limit to %s", why,
                                    bigger.spec.request.memory_mb, Where(*p, ctx.cluster)));
  d.target_node_id = p->node_id;
  return {d};
}

std::vector<Decision> CheaperCapacityRule::Evaluate(const Event& e, const PolicyContext& ctx) const {
  if (e.trigger != trigger()) return {};
  std::vector<Decision> out;
  std::set<std::string> claimed;
  for (const std::string& id : ctx.cluster.SortedJobIds()) {
    const Job& job = *ctx.cluster.FindJob(id);
    if (job.state != JobState::kRunning || job.node_id.empty()) continue;
    if (!e.job_id.empty() && e.job_id != id) continue;
    if (ctx.Settling(id)) continue;  // its move would be dropped, and would keep the node from the next job
    const Node* cur_node = ctx.cluster.FindNode(job.node_id);
    if (cur_node == nullptr) continue;
    PlacementRequest r;
    r.job = &job;
    CandidateScore cur = ctx.placer.Score(*cur_node, r);
    r.exclude_nodes = claimed;
    r.exclude_nodes.insert(job.node_id);
    auto best = ctx.placer.Place(r);
    if (!best.ok()) continue;
    double per_h = cur.total - best->chosen.total;
    if (per_h <= 0) continue;
    double horizon_h = job.spec.kind == JobKind::kBatch
                           ? job.RemainingWork() / 3600.0 / best->chosen.perf
                           : ctx.config.service_horizon_h;
    if (best->chosen.interruptions_per_hour > 0) {
      horizon_h = std::min(horizon_h, 1.0 / best->chosen.interruptions_per_hour);
    }
    const CheckpointPolicy& cp = job.spec.checkpoint;
    double move_s = CheckpointSeconds(cp) + ctx.config.launch_s + cp.restore_s;
    double saving = per_h * horizon_h;
    double cost = move_s / 3600.0 *
                  (cur.price_share + best->chosen.price_share + job.spec.downtime_cost_per_hour);
    if (saving <= (1 + ctx.config.move_margin) * cost) continue;
    std::string deadline;
    if (job.spec.kind == JobKind::kService && job.spec.sla.max_downtime_s > 0) {
      // The move and the interruptions expected on the new node over the horizon must fit in
      // what is left of the downtime allowance.
      double expected = MoveDowntimeS(job) + best->chosen.interruptions_per_hour * horizon_h *
                                                  InterruptionDowntimeS(job, ctx.config, 120);
      double may_spend = ctx.config.downtime_spend * DowntimeLeftS(job);
      if (expected > may_spend) continue;
      deadline = absl::StrFormat("; expected downtime %.0f s <= %.2f x allowance left %.0f s",
                                 expected, ctx.config.downtime_spend, DowntimeLeftS(job));
    }
    if (job.spec.kind == JobKind::kBatch && job.spec.sla.deadline > 0) {
      double slack = DeadlineSlackS(job, ctx.now + move_s, best->chosen.perf, ctx.config);
      if (slack < ctx.config.deadline_reserve_s) continue;
      deadline = absl::StrFormat("; slack after the move %.0f s >= reserve %.0f s", slack,
                                 ctx.config.deadline_reserve_s);
    }
    Decision d = Make(Action::kMigrate, job, name(),
                      absl::StrFormat("saving $%.4f/h x %.2f h = $%.2f > (1+%.2f) x move cost "
                                      "%.0f s x $%.4f/h = $%.2f%s; move to %s",
                                      per_h, horizon_h, saving, ctx.config.move_margin, move_s,
                                      cur.price_share + best->chosen.price_share +
                                          job.spec.downtime_cost_per_hour,
                                      cost, deadline, Where(*best, ctx.cluster)));
    d.target_node_id = best->node_id;
    claimed.insert(best->node_id);
    out.push_back(std::move(d));
  }
  return out;
}

std::vector<Decision> ScaleDownRule::Evaluate(const Event& e, const PolicyContext& ctx) const {
  if (e.trigger != trigger() || e.gpus_to_free <= 0) return {};
  std::vector<const Job*> running;
  ctx.cluster.ForEachJob([&](const Job& j) {
    if (j.state == JobState::kRunning && j.spec.request.gpus > 0) running.push_back(&j);
  });
  std::sort(running.begin(), running.end(), [](const Job* a, const Job* b) {
    if (a->spec.priority != b->spec.priority) return a->spec.priority < b->spec.priority;
    if (a->spec.kind != b->spec.kind) return a->spec.kind == JobKind::kBatch;
    return a->spec.id < b->spec.id;
  });
  std::vector<Decision> out;
  int freed = 0;
  for (const Job* j : running) {
    if (freed >= e.gpus_to_free) break;
    freed += j->spec.request.gpus;
    Decision d = Make(Action::kSuspend, *j, name(),
                      absl::StrFormat("scale-down needs %d GPU(s): suspend %s job of priority %d "
                                      "(lowest running); %d of %d freed",
                                      e.gpus_to_free, JobKindName(j->spec.kind), j->spec.priority,
                                      freed, e.gpus_to_free));
    d.suspend_reason = SuspendReason::kScaleDown;
    out.push_back(std::move(d));
  }
  return out;
}

std::vector<Decision> ResumeRule::Evaluate(const Event& e, const PolicyContext& ctx) const {
  if (e.trigger != trigger()) return {};
  std::vector<const Job*> waiting;
  ctx.cluster.ForEachJob([&](const Job& j) {
    if (j.state == JobState::kSuspended) waiting.push_back(&j);
  });
  auto deadline = [](const Job* j) {
    return j->spec.sla.deadline > 0 ? j->spec.sla.deadline : std::numeric_limits<double>::infinity();
  };
  std::sort(waiting.begin(), waiting.end(), [&](const Job* a, const Job* b) {
    if (a->spec.priority != b->spec.priority) return a->spec.priority > b->spec.priority;
    if (deadline(a) != deadline(b)) return deadline(a) < deadline(b);
    return a->spec.id < b->spec.id;
  });
  std::vector<Decision> out;
  std::set<std::string> claimed;
  for (const Job* j : waiting) {
    bool cheap_only = j->suspended_for == SuspendReason::kWaitingForCheapCapacity;
    if (cheap_only) {
      double slack = DeadlineSlackS(*j, ctx.now, 1.0, ctx.config);
      if (slack <= WaitReserveS(*j, ctx.now, 1.0, ctx.config)) cheap_only = false;
    }
    PlacementRequest r;
    r.job = j;
    r.allow_on_demand = !cheap_only;
    r.exclude_nodes = claimed;
    auto p = ctx.placer.Place(r);
    if (!p.ok()) continue;
    Decision d = Make(Action::kResume, *j, name(),
                      absl::StrCat("capacity returned: resume ",
                                   cheap_only ? "on spot capacity, " : "", "priority ",
                                   j->spec.priority, " on ", Where(*p, ctx.cluster)));
    d.target_node_id = p->node_id;
    claimed.insert(p->node_id);
    out.push_back(std::move(d));
  }
  return out;
}

std::vector<Decision> DeadlineGuardRule::Evaluate(const Event& e, const PolicyContext& ctx) const {
  if (e.trigger != trigger()) return {};
  const Job* j = ctx.cluster.FindJob(e.job_id);
  if (j == nullptr || j->spec.kind != JobKind::kBatch || j->spec.sla.deadline <= 0) return {};
  if (j->state != JobState::kSuspended && j->state != JobState::kPending) return {};
  double slack = DeadlineSlackS(*j, ctx.now, 1.0, ctx.config);
  double reserve = WaitReserveS(*j, ctx.now, 1.0, ctx.config);
  if (slack > reserve) return {};
  // Spot only while the job could still absorb one more interruption and keep the reserve.
  double after_interruption = slack - RestartOverheadS(*j, ctx.config);
  PlacementRequest r;
  r.job = j;
  r.allow_spot = after_interruption >= ctx.config.deadline_reserve_s;
  auto p = ctx.placer.Place(r);
  if (!p.ok()) return {};
  Decision d = Make(Action::kResume, *j, name(),
                    absl::StrFormat("slack %.0f s <= wait reserve %.0f s (%.0f s reserve + %.2f of "
                                    "the uniform-progress line): resume now on %s%s",
                                    slack, reserve, ctx.config.deadline_reserve_s,
                                    ctx.config.slack_keep, Where(*p, ctx.cluster),
                                    r.allow_spot ? "" : absl::StrFormat(
                                        " (on-demand only: one more interruption would leave "
                                        "%.0f s < %.0f s)", after_interruption,
                                        ctx.config.deadline_reserve_s)));
  d.target_node_id = p->node_id;
  return {d};
}

PredictionVerdict EvaluatePrediction(const Job& job, double now, double p, double w) {
  PredictionVerdict v;
  const CheckpointPolicy& cp = job.spec.checkpoint;
  v.cost_s = cp.pause_s;
  double complete_s = CheckpointSeconds(cp);
  const CheckpointRecord* last = job.LatestCheckpoint(now + 1e-9);
  double last_work = last ? last->work_s : 0;
  double since = std::max(0.0, WorkDoneAt(job, now) - last_work);
  std::string basis;
  if (complete_s > w) {
    v.saved_s = 0;
    basis = absl::StrFormat("a checkpoint needs %.0f s > warning %.0f s, so saves 0 s", complete_s, w);
  } else if (cp.interval_s > 0 && last != nullptr &&
             last->time + cp.interval_s + cp.pause_s <= now + w) {
    v.saved_s = 0;
    basis = absl::StrFormat("the periodic checkpoint due at t=%.0f lands before the failure, so "
                            "a checkpoint now saves 0 s",
                            last->time + cp.interval_s + cp.pause_s);
  } else {
    v.saved_s = since;
    basis = absl::StrFormat("work since the last checkpoint = %.0f s", since);
  }
  v.expected_saved_s = p * v.saved_s;
  v.act = v.expected_saved_s > v.cost_s;
  v.arithmetic = absl::StrFormat("%s; expected saving p x saved = %.2f x %.0f s = %.1f s %s cost "
                                 "c = %.1f s: %s",
                                 basis, p, v.saved_s, v.expected_saved_s, v.act ? ">" : "<=",
                                 v.cost_s, v.act ? "checkpoint now" : "do nothing");
  return v;
}

std::vector<Decision> FailurePredictionRule::Evaluate(const Event& e, const PolicyContext& ctx) const {
  if (e.trigger != trigger()) return {};
  std::vector<Decision> out;
  for (const std::string& id : JobsOn(ctx.cluster, e.node_id)) {
    const Job& job = *ctx.cluster.FindJob(id);
    PredictionVerdict v = EvaluatePrediction(job, ctx.now, e.precision, e.warning_s);
    if (!v.act) continue;
    out.push_back(Make(Action::kCheckpoint, job, name(),
                       absl::StrFormat("failure of %s predicted in %.0f s (precision %.2f): %s",
                                       e.node_id, e.warning_s, e.precision, v.arithmetic)));
  }
  return out;
}

}  // namespace cairn::controller
