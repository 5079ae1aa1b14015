#include "sim/simulator.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <queue>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "controller/cluster.h"
#include "controller/placement.h"
#include "controller/rules.h"

namespace cairn::sim {

namespace ctl = ::cairn::controller;

absl::string_view StrategyName(Strategy s) {
  switch (s) {
    case Strategy::kOnDemand: return "on-demand";
    case Strategy::kSpotRestart: return "spot-restart";
    case Strategy::kSpotCheckpoint: return "spot-ckpt30";
    case Strategy::kUniformProgress: return "uniform-progress";
    case Strategy::kCairn: return "cairn";
  }
  return "?";
}

std::vector<Strategy> AllStrategies() {
  return {Strategy::kOnDemand, Strategy::kSpotRestart, Strategy::kSpotCheckpoint, Strategy::kUniformProgress,
          Strategy::kCairn};
}

absl::StatusOr<std::vector<Strategy>> ParseStrategies(absl::string_view s) {
  const std::vector<Strategy> all = AllStrategies();
  if (s == "all") return all;
  std::vector<Strategy> out;
  for (absl::string_view part : absl::StrSplit(s, ',')) {
    bool found = false;
    for (Strategy st : all) {
      if (part == StrategyName(st)) {
        out.push_back(st);
        found = true;
      }
    }
    if (!found) {
      return absl::InvalidArgumentError(absl::StrCat(
          "unknown strategy '", part, "' (use all, on-demand, spot-restart, spot-ckpt30, uniform-progress, cairn)"));
    }
  }
  return out;
}

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// When the spot capacity offered to new placements changes. Capacity that the trace says will
// disappear within the notice window is not offered; a decrease at t reclaims at t + notice.
struct CapPoint {
  double t;
  int cap;
};

std::vector<CapPoint> CapacityTimeline(const SpotTrace& tr, int scale, double notice) {
  const size_t n = tr.values.size();
  const double g = tr.gap_s;
  auto units = [&](long k) { return k < 0 ? 0 : tr.Units(static_cast<size_t>(k)) * scale; };
  auto eff = [&](double t) {
    long first = static_cast<long>(std::floor(t / g + 1e-9));
    long last = static_cast<long>(std::floor((t + notice) / g + 1e-9));
    int m = std::numeric_limits<int>::max();
    for (long k = first; k <= last; ++k) m = std::min(m, units(k));
    return m;
  };
  std::vector<double> cand;
  cand.reserve(2 * n + 4);
  cand.push_back(0);
  for (size_t j = 0; j <= n; ++j) {
    double tj = static_cast<double>(j) * g;
    cand.push_back(tj);
    if (tj - notice > 0) cand.push_back(tj - notice);
  }
  std::sort(cand.begin(), cand.end());
  cand.erase(std::unique(cand.begin(), cand.end()), cand.end());
  std::vector<CapPoint> out;
  int prev = -1;
  for (double t : cand) {
    int c = eff(t);
    if (c != prev) out.push_back({t, c});
    prev = c;
  }
  return out;
}

enum class Kind { kArrive, kCapacity, kReady, kFinish, kReclaim, kGuard, kServiceEnd, kNodeFail };

struct Ev {
  double t;
  uint64_t seq;
  Kind kind;
  int job;
  uint64_t ver;
  int aux;
  bool operator>(const Ev& o) const { return t != o.t ? t > o.t : seq > o.seq; }
};

enum class Phase { kNotArrived, kWaiting, kStarting, kRunning, kDone };

struct SJ {
  const SimJobSpec* in = nullptr;
  Phase phase = Phase::kNotArrived;
  std::string node;
  bool spot = false;
  bool doomed = false;
  double reclaim_at = kInf;
  double price = 0;
  double billed_from = 0;
  double work0 = 0;       // work at the start of this running segment (restored).
  double seg_start = 0;
  double available_at = 0;  // its last checkpoint is complete and may be restored.
  double restore_s = 0;     // node ready -> running.
  double interval = 0;      // periodic checkpoints in this run.
  double pause = 0;
  double notice_ckpt_s = 0;
  uint64_t ver = 0;
  bool sticky_od = false;
  double down_since = -1;
  // accounting
  double cost = 0, lost = 0, down = 0, spot_s = 0, od_s = 0;
  double finish = -1;
};

class Sim {
 public:
  Sim(const SpotTrace& tr, const std::vector<SimJobSpec>& jobs, Strategy st, const SimOptions& o)
      : tr_(tr), st_(st), o_(o), placer_(cluster_, PerfFor(tr)), rng_(o.seed) {
    engine_ = ctl::PolicyEngine::Default();
    cfg_ = o.policy;
    cfg_.launch_s = o.launch_s;
    od_price_ = tr.instance.on_demand_price;
    spot_price_ = od_price_ * o.spot_price_fraction;
    int n = static_cast<int>(jobs.size());
    scale_ = std::max(1, (n + tr.nominal_pool - 1) / std::max(1, tr.nominal_pool));
    jobs_.resize(jobs.size());
    for (size_t i = 0; i < jobs.size(); ++i) {
      jobs_[i].in = &jobs[i];
      by_id_[jobs[i].id] = static_cast<int>(i);
      Push(jobs[i].arrival_s, Kind::kArrive, static_cast<int>(i), 0);
    }
    timeline_ = CapacityTimeline(tr, scale_, o.notice_s);
    for (size_t i = 0; i < timeline_.size(); ++i) {
      Push(timeline_[i].t, Kind::kCapacity, -1, 0, static_cast<int>(i));
    }
    EnsureIdleOnDemand();
  }

  SimResult Run() {
    remaining_ = static_cast<int>(jobs_.size());
    while (!q_.empty() && remaining_ > 0) {
      Ev e = q_.top();
      q_.pop();
      now_ = e.t;
      ++events_;
      if (e.job >= 0 && e.kind != Kind::kArrive && e.kind != Kind::kServiceEnd &&
          jobs_[e.job].ver != e.ver) {
        continue;  // superseded
      }
      switch (e.kind) {
        case Kind::kArrive: OnArrive(e.job); break;
        case Kind::kCapacity: OnCapacity(timeline_[e.aux]); break;
        case Kind::kReady: OnReady(e.job); break;
        case Kind::kFinish: OnFinish(e.job); break;
        case Kind::kReclaim: OnReclaim(e.job); break;
        case Kind::kGuard: OnGuard(e.job); break;
        case Kind::kServiceEnd: OnServiceEnd(e.job); break;
        case Kind::kNodeFail: OnNodeFail(e.job); break;
      }
    }
    return Collect();
  }

 private:
  static ctl::PerfTable PerfFor(const SpotTrace& tr) {
    // Work is measured on the trace's own instance type.
    ctl::PerfTable p;
    p.factor[tr.instance.gpu_type] = 1.0;
    return p;
  }

  void Push(double t, Kind k, int job, uint64_t ver, int aux = 0) {
    q_.push(Ev{t, seq_++, k, job, ver, aux});
  }

  bool Baseline() const {
    return st_ == Strategy::kSpotRestart || st_ == Strategy::kSpotCheckpoint || st_ == Strategy::kUniformProgress;
  }
  bool Uniform() const { return st_ == Strategy::kUniformProgress; }

  // ---- the job's work model --------------------------------------------------------------
  double WorkAt(const SJ& j, double t) const {
    if (j.phase != Phase::kRunning || t <= j.seg_start) return j.work0;
    double e = t - j.seg_start, w;
    if (j.interval > 0) {
      double cyc = j.interval + j.pause;
      double k = Cycles(e, cyc);
      w = j.work0 + k * j.interval + std::min(e - k * cyc, j.interval);
    } else {
      w = j.work0 + e;
    }
    return j.in->service ? w : std::min(w, j.in->work_s);
  }
  // Whole checkpoint cycles of length `cyc` in `e` seconds of a segment; one that ends at `e`
  // counts (times are sums of doubles: a guard set for a cycle's end may land a hair before it).
  static double Cycles(double e, double cyc) { return std::floor(e / cyc + 1e-9); }
  double CheckpointAt(const SJ& j, double t) const {
    if (j.phase != Phase::kRunning || j.interval <= 0 || t <= j.seg_start) return j.work0;
    double k = Cycles(t - j.seg_start, j.interval + j.pause);
    return std::min(j.work0 + k * j.interval, j.in->work_s);
  }
  double FinishTime(const SJ& j) const {
    double need = std::max(0.0, j.in->work_s - j.work0);
    double ck = j.interval > 0 ? std::max(0.0, std::ceil(need / j.interval - 1e-9) - 1) : 0;
    return j.seg_start + need + ck * j.pause;
  }

  // ---- the controller's view -------------------------------------------------------------
  void AddControllerJob(int i) {
    SJ& j = jobs_[i];
    const SimJobSpec& in = *j.in;
    ctl::JobSpec s;
    s.id = in.id;
    s.request = {8 * static_cast<double>(tr_.instance.gpus),
                 61 * 1024 * static_cast<int64_t>(tr_.instance.gpus), tr_.instance.gpus};
    s.priority = in.priority;
    s.kind = in.service ? ctl::JobKind::kService : ctl::JobKind::kBatch;
    s.sla.deadline = in.deadline_s;
    s.sla.max_downtime_s = in.max_downtime_s;
    s.work_s = in.work_s;
    s.submit_time = in.arrival_s;
    s.gpu_type = tr_.instance.gpu_type;
    s.downtime_cost_per_hour = in.service ? o_.service_downtime_cost_per_hour : 0;
    // A p3.16xlarge has 25 Gbit/s against a p3.2xlarge's 10: its transfers are 2.5x faster.
    double bw = tr_.instance.gpus >= 8 ? 2.5 : 1.0;
    double read = in.state_gb / (o_.restore_gbps * bw);
    switch (st_) {
      case Strategy::kOnDemand:
      case Strategy::kSpotRestart:
        j.restore_s = o_.init_s;
        break;
      case Strategy::kSpotCheckpoint:
      case Strategy::kUniformProgress:
        j.interval = o_.app_checkpoint_interval_s;
        j.pause = in.state_gb / (o_.app_write_gbps * bw);
        j.restore_s = o_.init_s + read;
        break;
      case Strategy::kCairn:
        j.interval = o_.cairn_interval_s;
        j.pause = o_.cairn_pause_s;
        j.notice_ckpt_s = o_.cairn_pause_s + in.state_gb / (o_.upload_gbps * bw);
        j.restore_s = read;
        break;
    }
    if (in.service) {
      j.interval = 0;  // services are not paused periodically
      if (st_ != Strategy::kCairn) j.restore_s = o_.warmup_s;
    }
    s.checkpoint.interval_s = j.interval;
    s.checkpoint.pause_s = j.pause;
    s.checkpoint.notice_checkpoint_s = j.notice_ckpt_s;
    s.checkpoint.on_notice = st_ == Strategy::kCairn;
    s.checkpoint.bytes = static_cast<int64_t>(in.state_gb * 1e9);
    s.checkpoint.restore_s = j.restore_s;
    (void)cluster_.AddJob(std::move(s));
  }

  // Brings the controller's copy of every live job up to `now_` before a policy reads it.
  void SyncAll() {
    for (size_t i = 0; i < jobs_.size(); ++i) {
      if (jobs_[i].phase != Phase::kNotArrived && jobs_[i].phase != Phase::kDone) Sync(static_cast<int>(i));
    }
  }
  void Sync(int i) {
    SJ& j = jobs_[i];
    ctl::Job* cj = cluster_.MutableJob(j.in->id);
    cj->work_done_s = WorkAt(j, now_);
    cj->progress_time = j.phase == Phase::kRunning ? now_ : std::max(now_, j.available_at);
    cj->spent_usd = j.cost;
    cj->downtime_s = j.down + (j.down_since >= 0 ? now_ - j.down_since : 0);
    cj->checkpoints.clear();
    double ck = j.phase == Phase::kRunning ? CheckpointAt(j, now_) : j.work0;
    cj->checkpoints.push_back({std::min(now_, j.available_at), ck});
  }

  // ---- nodes -----------------------------------------------------------------------------
  ctl::NodeSpec Spec(bool spot) {
    ctl::NodeSpec s;
    s.id = absl::StrCat(spot ? "spot-" : "od-", tr_.zone, "-", next_node_++);
    s.capacity = {8 * static_cast<double>(tr_.instance.gpus),
                  61 * 1024 * static_cast<int64_t>(tr_.instance.gpus), tr_.instance.gpus};
    s.gpu_type = tr_.instance.gpu_type;
    s.price_per_hour = spot ? spot_price_ : od_price_;
    s.market = spot ? ctl::Market::kSpot : ctl::Market::kOnDemand;
    s.zone = tr_.zone;
    s.cloud = "aws";
    return s;
  }
  void EnsureIdleOnDemand() {
    if (idle_od_ > 0) return;
    ctl::NodeSpec s = Spec(false);
    (void)cluster_.AddNode(s);
    ++idle_od_;
  }
  // Keeps idle spot nodes = offered capacity - live spot jobs, but materializes no more of
  // them than there are live jobs off spot that could take one (the rest exist only as a
  // number), so a zone offering a thousand instances costs a thousand nodes only when a
  // thousand jobs want them.
  void RebalanceSpot() {
    int demand = 0;
    for (const SJ& j : jobs_) {
      if (j.phase != Phase::kNotArrived && j.phase != Phase::kDone && (j.node.empty() || !j.spot)) ++demand;
    }
    int want = std::max(0, std::min(cap_ - live_spot_, demand));
    while (static_cast<int>(idle_spot_.size()) < want) {
      ctl::NodeSpec s = Spec(true);
      std::string id = s.id;
      (void)cluster_.AddNode(std::move(s));
      (void)cluster_.SetInterruptionRate(id, rate_);
      idle_spot_.push_back(id);
    }
    while (static_cast<int>(idle_spot_.size()) > want) {
      (void)cluster_.RemoveNode(idle_spot_.back());
      idle_spot_.pop_back();
    }
  }
  void UpdateRate(double r) {
    rate_ = r;
    for (const std::string& id : idle_spot_) (void)cluster_.SetInterruptionRate(id, r);
    for (SJ& j : jobs_) {
      if (!j.node.empty() && j.spot && !j.doomed) (void)cluster_.SetInterruptionRate(j.node, r);
    }
  }

  absl::StatusOr<std::string> Choose(int i, bool allow_spot, bool allow_od) {
    const ctl::Job* cj = cluster_.FindJob(jobs_[i].in->id);
    ctl::PlacementRequest r;
    r.job = cj;
    r.allow_spot = allow_spot;
    r.allow_on_demand = allow_od;
    auto p = placer_.Place(r);
    if (!p.ok()) return p.status();
    return p->node_id;
  }

  // Binds job i to node and starts it: ready after the later of launch and its checkpoint
  // being complete, plus its restore.
  void Start(int i, const std::string& node_id) {
    SJ& j = jobs_[i];
    const ctl::Node* n = cluster_.FindNode(node_id);
    bool spot = n->spec.market == ctl::Market::kSpot;
    if (spot) {
      idle_spot_.erase(std::remove(idle_spot_.begin(), idle_spot_.end(), node_id), idle_spot_.end());
      ++live_spot_;
    } else {
      --idle_od_;
    }
    absl::Status st = cluster_.Bind(j.in->id, node_id);
    if (!st.ok()) std::fprintf(stderr, "cairn-sim: internal: %s\n", std::string(st.message()).c_str());
    j.node = node_id;
    j.spot = spot;
    j.doomed = false;
    j.price = n->spec.price_per_hour;
    j.billed_from = now_;
    j.phase = Phase::kStarting;
    ++j.ver;
    double ready = std::max(now_ + o_.launch_s, j.available_at) + j.restore_s;
    Push(ready, Kind::kReady, i, j.ver);
    if (o_.node_failures_per_hour > 0) {
      double u = fail_rng_.Uniform(0, 1);
      Push(now_ - std::log(1 - u) * 3600 / o_.node_failures_per_hour, Kind::kNodeFail, i, j.ver);
    }
    if (!spot) EnsureIdleOnDemand();
  }

  // Stops billing job i's node at `until` and gives the node back.
  void Release(int i, double until, ctl::JobState next) {
    SJ& j = jobs_[i];
    double d = std::max(0.0, until - j.billed_from);
    j.cost += j.price * d / 3600;
    (j.spot ? j.spot_s : j.od_s) += d;
    (void)cluster_.Unbind(j.in->id, next);
    (void)cluster_.RemoveNode(j.node);
    if (j.spot && !j.doomed) {
      --live_spot_;
      RebalanceSpot();
    }
    j.node.clear();
    j.doomed = false;
    ++j.ver;
  }

  void Wait(int i, ctl::SuspendReason why) {
    SJ& j = jobs_[i];
    j.phase = Phase::kWaiting;
    ctl::Job* cj = cluster_.MutableJob(j.in->id);
    cj->state = ctl::JobState::kSuspended;
    cj->suspended_for = why;
    if (j.in->service) {
      if (j.down_since < 0) j.down_since = now_;
      return;
    }
    ++j.ver;
    double t = now_;
    if (st_ == Strategy::kCairn) {
      Sync(i);
      t = ctl::WaitDeadline(*cj, std::max(now_, j.available_at), 1.0, cfg_);
    } else {
      t = now_ + std::max(0.0, BaselineSlack(j) - o_.baseline_reserve_s);
      // Waiting, it falls behind the line then (looked at a minute later: on the line is not behind).
      if (Uniform()) t = std::min(t, std::max(BehindAt(j), now_) + 60);
    }
    if (std::isfinite(t)) Push(std::max(t, now_), Kind::kGuard, i, j.ver);
  }

  // The same arithmetic as controller::DeadlineSlackS, with the baseline's own restart.
  double BaselineSlack(const SJ& j) const { return SlackFrom(j, j.work0); }
  // The same with `done` of its work kept.
  double SlackFrom(const SJ& j, double done) const {
    double run = j.in->work_s - done;
    if (j.interval > 0) run *= 1 + j.pause / j.interval;
    return j.in->deadline_s - now_ - run - o_.launch_s - j.restore_s;
  }

  // ---- Uniform Progress --------------------------------------------------------------------
  // The line of uniform progress: the work a job has to have done by `t` to finish at its
  // deadline working at one rate from its arrival.
  double Line(const SJ& j, double t) const {
    double span = j.in->deadline_s - j.in->arrival_s;
    return span <= 0 ? j.in->work_s : j.in->work_s * (t - j.in->arrival_s) / span;
  }
  // When a job that does no work from now on falls behind the line.
  double BehindAt(const SJ& j) const {
    double span = j.in->deadline_s - j.in->arrival_s;
    if (span <= 0 || j.in->work_s <= 0) return now_;
    return j.in->arrival_s + span * WorkAt(j, now_) / j.in->work_s;
  }
  // How far ahead of the line a job on on-demand must be to leave it: a switch costs a launch
  // and a restore, and the job must not fall behind again at once.
  double SwitchMargin(const SJ& j) const { return o_.launch_s + j.restore_s + j.interval; }

  // A waiting job: the safety net first, then spot if there is some, then on-demand if it is
  // behind the line; else it waits (Wait's guard wakes it when it falls behind).
  // Whether the slack is down to the reserve (to the second: Wait's guard comes exactly then). A
  // running job's slack counts the work its latest checkpoint holds, not its segment's start.
  bool SafetyNet(const SJ& j) const {
    double done = j.phase == Phase::kRunning ? CheckpointAt(j, now_) : j.work0;
    return SlackFrom(j, done) <= o_.baseline_reserve_s + 1;
  }

  void UniformPlace(int i) {
    SJ& j = jobs_[i];
    if (j.sticky_od || SafetyNet(j)) {
      j.sticky_od = true;
      StartAny(i, false);
      return;
    }
    if (auto n = Choose(i, true, false); n.ok()) {
      Start(i, *n);
      return;
    }
    if (WorkAt(j, now_) < Line(j, now_)) {
      StartAny(i, false);
      return;
    }
    Wait(i, ctl::SuspendReason::kWaitingForCheapCapacity);
  }

  void UniformGuard(int i) {
    SJ& j = jobs_[i];
    if (j.phase == Phase::kWaiting) {
      UniformPlace(i);
      return;
    }
    if (j.phase != Phase::kRunning || j.spot || j.sticky_od || j.in->service) return;
    // On on-demand, at one of its checkpoints.
    if (SafetyNet(j)) {
      j.sticky_od = true;  // the safety net: it stays to the end
      return;
    }
    if (WorkAt(j, now_) - Line(j, now_) >= SwitchMargin(j)) {
      // Ahead: to spot if there is some, else it waits. It leaves with the checkpoint it has just
      // written (the guard comes as each one is complete): nothing is lost.
      auto n = Choose(i, true, false);
      double w = WorkAt(j, now_), ck = CheckpointAt(j, now_);
      j.lost += w - ck;  // (none: the guard comes as a checkpoint completes)
      j.work0 = ck;
      j.available_at = now_;
      ++migrations_;
      Release(i, now_, ctl::JobState::kSuspended);
      j.phase = Phase::kWaiting;
      if (n.ok() && cluster_.FindNode(*n)) {
        Start(i, *n);
      } else {
        Wait(i, ctl::SuspendReason::kWaitingForCheapCapacity);
      }
      return;
    }
    Push(now_ + j.interval + j.pause, Kind::kGuard, i, j.ver);
  }

  // ---- events ----------------------------------------------------------------------------
  void OnArrive(int i) {
    SJ& j = jobs_[i];
    AddControllerJob(i);
    j.phase = Phase::kWaiting;
    j.available_at = now_;
    if (st_ != Strategy::kOnDemand) RebalanceSpot();
    if (j.in->service) Push(now_ + j.in->lifetime_s, Kind::kServiceEnd, i, 0);
    if (st_ == Strategy::kOnDemand) {
      StartAny(i, false);
    } else if (j.in->service) {
      StartAny(i, true);
    } else if (Uniform()) {
      UniformPlace(i);
    } else if (Baseline()) {
      BaselinePlace(i);
    } else {
      CairnPlace(i);
    }
  }

  void StartAny(int i, bool allow_spot) {
    auto n = Choose(i, allow_spot, true);
    if (n.ok()) Start(i, *n);
  }

  void BaselinePlace(int i) {
    SJ& j = jobs_[i];
    if (j.sticky_od || BaselineSlack(j) <= o_.baseline_reserve_s) {
      j.sticky_od = true;
      StartAny(i, false);
      return;
    }
    auto n = Choose(i, true, false);
    if (n.ok()) {
      Start(i, *n);
    } else {
      Wait(i, ctl::SuspendReason::kWaitingForCheapCapacity);
    }
  }

  void CairnPlace(int i) {
    // A waiting batch job: the deadline guard decides whether it may wait; otherwise it takes
    // spot capacity when there is some and waits for it when there is none.
    Sync(i);
    ctl::Job* cj = cluster_.MutableJob(jobs_[i].in->id);
    cj->state = ctl::JobState::kSuspended;
    cj->suspended_for = ctl::SuspendReason::kWaitingForCheapCapacity;
    ctl::Event e;
    e.trigger = ctl::Trigger::kDeadlineCheck;
    e.time = now_;
    e.job_id = jobs_[i].in->id;
    if (Apply(engine_.Handle(e, Ctx())) > 0) return;
    auto n = Choose(i, true, false);
    if (n.ok()) {
      Start(i, *n);
    } else {
      Wait(i, ctl::SuspendReason::kWaitingForCheapCapacity);
    }
  }

  void OnReady(int i) {
    SJ& j = jobs_[i];
    j.phase = Phase::kRunning;
    j.seg_start = now_;
    ctl::Job* cj = cluster_.MutableJob(j.in->id);
    cj->state = ctl::JobState::kRunning;
    if (j.in->service) {
      if (j.down_since >= 0) j.down += now_ - j.down_since;
      j.down_since = -1;
      return;
    }
    Push(FinishTime(j), Kind::kFinish, i, j.ver);
    // Uniform progress on on-demand looks again at each of its checkpoints: ahead, it leaves.
    if (Uniform() && !j.spot && !j.sticky_od) Push(now_ + j.interval + j.pause, Kind::kGuard, i, j.ver);
  }

  void OnFinish(int i) {
    SJ& j = jobs_[i];
    Release(i, now_, ctl::JobState::kDone);
    j.phase = Phase::kDone;
    j.finish = now_;
    j.work0 = j.in->work_s;
    --remaining_;
  }

  void OnServiceEnd(int i) {
    SJ& j = jobs_[i];
    if (j.phase == Phase::kDone) return;
    if (!j.node.empty()) Release(i, now_, ctl::JobState::kDone);
    if (j.down_since >= 0) j.down += now_ - j.down_since;
    j.down_since = -1;
    j.phase = Phase::kDone;
    j.finish = now_;
    ++j.ver;
    --remaining_;
  }

  void OnGuard(int i) {
    SJ& j = jobs_[i];
    if (Uniform()) {
      UniformGuard(i);
      return;
    }
    if (j.phase != Phase::kWaiting) return;
    if (Baseline()) {
      j.sticky_od = true;
      StartAny(i, false);
      return;
    }
    Sync(i);
    ctl::Event e;
    e.trigger = ctl::Trigger::kDeadlineCheck;
    e.time = now_;
    e.job_id = j.in->id;
    if (Apply(engine_.Handle(e, Ctx())) == 0) {
      // Not yet (rounding): look again a little later.
      ++j.ver;
      Push(now_ + 60, Kind::kGuard, i, j.ver);
    }
  }

  void OnCapacity(const CapPoint& p) {
    if (cap_ > 0) avail_h_ += (now_ - last_cap_t_) / 3600.0;
    last_cap_t_ = now_;
    int old = cap_;
    cap_ = p.cap;
    if (cap_ < old) {
      RebalanceSpot();
      int excess = live_spot_ - cap_;
      if (excess > 0) {
        ++drops_;
        // Interruptions per instance-hour, with a prior of one per ten hours.
        UpdateRate((drops_ + 1.0) / (avail_h_ + 10.0));
        std::vector<int> live;
        for (size_t i = 0; i < jobs_.size(); ++i) {
          if (!jobs_[i].node.empty() && jobs_[i].spot && !jobs_[i].doomed) live.push_back(static_cast<int>(i));
        }
        for (int k = 0; k < excess && !live.empty(); ++k) {
          size_t pick = rng_.Index(live.size());
          int v = live[pick];
          live.erase(live.begin() + static_cast<long>(pick));
          Doom(v, now_ + o_.notice_s);
        }
      }
    } else if (cap_ > old) {
      RebalanceSpot();
      OnCapacityReturned();
    }
  }

  void Doom(int i, double reclaim_at) {
    SJ& j = jobs_[i];
    j.doomed = true;
    j.reclaim_at = reclaim_at;
    --live_spot_;
    ++preemptions_;
    (void)cluster_.SetNodeHealth(j.node, ctl::NodeHealth::kDraining);
    if (st_ == Strategy::kCairn) {
      Sync(i);
      ctl::Event e;
      e.trigger = ctl::Trigger::kSpotNotice;
      e.time = now_;
      e.node_id = j.node;
      e.notice_s = reclaim_at - now_;
      if (Apply(engine_.Handle(e, Ctx())) > 0) return;
    }
    Push(reclaim_at, Kind::kReclaim, i, j.ver);
  }

  // A node dies without warning (heartbeats stop).
  void OnNodeFail(int i) {
    SJ& j = jobs_[i];
    if (j.node.empty()) return;
    ++failures_;
    if (st_ == Strategy::kCairn) {
      Sync(i);
      ctl::Event e;
      e.trigger = ctl::Trigger::kNodeLost;
      e.time = now_;
      e.node_id = j.node;
      if (Apply(engine_.Handle(e, Ctx())) > 0) return;
    }
    Interrupt(i);
  }

  // The reclaim itself: everything since the last checkpoint is lost.
  void OnReclaim(int i) {
    SJ& j = jobs_[i];
    if (j.node.empty() || !j.doomed) return;
    Interrupt(i);
  }

  void Interrupt(int i) {
    SJ& j = jobs_[i];
    double w = WorkAt(j, now_), ck = CheckpointAt(j, now_);
    if (!j.in->service) j.lost += w - ck;
    j.work0 = ck;
    j.available_at = now_;
    if (j.in->service && j.down_since < 0) j.down_since = now_;
    Release(i, now_, ctl::JobState::kSuspended);
    j.phase = Phase::kWaiting;
    if (st_ == Strategy::kOnDemand) {
      StartAny(i, false);
    } else if (j.in->service) {
      StartAny(i, true);
    } else if (Uniform()) {
      UniformPlace(i);
    } else if (Baseline()) {
      BaselinePlace(i);
    } else {
      CairnPlace(i);
    }
  }

  void OnCapacityReturned() {
    if (Baseline()) {
      std::vector<int> waiting;
      for (size_t i = 0; i < jobs_.size(); ++i) {
        const SJ& j = jobs_[i];
        if (j.phase == Phase::kWaiting && !j.in->service && !j.sticky_od) waiting.push_back(static_cast<int>(i));
      }
      std::sort(waiting.begin(), waiting.end(), [&](int a, int b) {
        const SimJobSpec &x = *jobs_[a].in, &y = *jobs_[b].in;
        if (x.priority != y.priority) return x.priority > y.priority;
        if (x.deadline_s != y.deadline_s) return x.deadline_s < y.deadline_s;
        return x.id < y.id;
      });
      for (int i : waiting) {
        if (idle_spot_.empty()) break;
        if (Uniform()) {
          UniformPlace(i);
        } else {
          BaselinePlace(i);
        }
      }
      return;
    }
    if (st_ != Strategy::kCairn) return;
    SyncAll();
    ctl::Event e;
    e.trigger = ctl::Trigger::kCapacityReturned;
    e.time = now_;
    Apply(engine_.Handle(e, Ctx()));
    if (idle_spot_.empty()) return;
    SyncAll();
    e.trigger = ctl::Trigger::kCapacityAdded;
    Apply(engine_.Handle(e, Ctx()));
  }

  ctl::PolicyContext Ctx() { return ctl::PolicyContext{cluster_, placer_, cfg_, now_}; }

  int Index(const std::string& id) const { return by_id_.at(id); }

  // Carries out the controller's decisions; returns how many it acted on.
  int Apply(const std::vector<ctl::Decision>& ds) {
    int acted = 0;
    for (const ctl::Decision& d : ds) {
      if (d.job_id.empty()) continue;
      int i = Index(d.job_id);
      SJ& j = jobs_[i];
      ++by_rule_[d.rule];
      if (logged_ < o_.log_decisions) {
        ++logged_;
        std::fprintf(stderr, "t=%9.0f %-8s %-16s %s: %s\n", now_, std::string(ctl::ActionName(d.action)).c_str(),
                     d.rule.c_str(), d.job_id.c_str(), d.reason.c_str());
      }
      switch (d.action) {
        case ctl::Action::kMigrate: Move(i, d.target_node_id); ++acted; break;
        case ctl::Action::kSuspend: Suspend(i, d.suspend_reason); ++acted; break;
        case ctl::Action::kRestore: RestoreAfterReclaim(i, d.target_node_id); ++acted; break;
        case ctl::Action::kResume:
          if (j.phase == Phase::kWaiting && !d.target_node_id.empty() && cluster_.FindNode(d.target_node_id)) {
            Start(i, d.target_node_id);
            ++acted;
          }
          break;
        case ctl::Action::kCheckpoint:
        case ctl::Action::kDrainNode:
          break;
      }
    }
    return acted;
  }

  // When a job on a doomed node must stop: it may keep working until its checkpoint has to
  // start to be complete by the reclaim.
  double StopBy(const SJ& j) const {
    return j.doomed ? std::max(now_, j.reclaim_at - j.notice_ckpt_s) : kInf;
  }

  // Checkpoint-and-restore to `target`. The job keeps running on its node while the target
  // boots (or until a reclaim forces the checkpoint), then checkpoints, then restores.
  void Move(int i, const std::string& target) {
    SJ& j = jobs_[i];
    double stop = std::min(now_ + std::max(0.0, o_.launch_s - j.notice_ckpt_s), StopBy(j));
    double w = WorkAt(j, stop);
    double done = stop + j.notice_ckpt_s;
    if (j.in->service && j.phase == Phase::kRunning) j.down_since = stop;
    j.work0 = w;
    j.available_at = done;
    ++migrations_;
    Release(i, done, ctl::JobState::kSuspended);
    j.phase = Phase::kWaiting;
    Start(i, target);
  }

  void Suspend(int i, ctl::SuspendReason why) {
    SJ& j = jobs_[i];
    double stop = j.doomed ? StopBy(j) : now_;
    double w = WorkAt(j, stop);
    double done = stop + j.notice_ckpt_s;
    if (j.in->service && j.phase == Phase::kRunning) j.down_since = stop;
    j.work0 = w;
    j.available_at = done;
    Release(i, done, ctl::JobState::kSuspended);
    Wait(i, why);
  }

  // The notice is too short to checkpoint: run to the reclaim, lose what the last periodic
  // checkpoint did not capture, and restore that checkpoint on `target`, which boots meanwhile.
  void RestoreAfterReclaim(int i, const std::string& target) {
    SJ& j = jobs_[i];
    double until = j.doomed ? j.reclaim_at : now_;
    double w = WorkAt(j, until), ck = CheckpointAt(j, until);
    if (!j.in->service) j.lost += w - ck;
    if (j.in->service && j.phase == Phase::kRunning) j.down_since = until;
    j.work0 = ck;
    j.available_at = until;
    Release(i, until, ctl::JobState::kSuspended);
    j.phase = Phase::kWaiting;
    if (!target.empty() && cluster_.FindNode(target)) {
      Start(i, target);
    } else {
      Wait(i, ctl::SuspendReason::kWaitingForCheapCapacity);
    }
  }

  SimResult Collect() {
    SimResult r;
    r.strategy = std::string(StrategyName(st_));
    for (const SJ& j : jobs_) {
      r.cost_usd += j.cost;
      r.paid_h += (j.spot_s + j.od_s) / 3600;
      r.spot_h += j.spot_s / 3600;
      r.on_demand_h += j.od_s / 3600;
      if (j.in->service) {
        ++r.services;
        if (j.down <= j.in->max_downtime_s) {
          ++r.services_sla_met;
        } else if (o_.log_decisions > 0) {
          std::fprintf(stderr, "%s: %s missed its downtime limit: %.0f s > %.0f s\n",
                       r.strategy.c_str(), j.in->id.c_str(), j.down, j.in->max_downtime_s);
        }
        r.service_downtime_h += j.down / 3600;
        r.useful_h += std::max(0.0, j.in->lifetime_s - j.down) / 3600;
      } else {
        ++r.batch_jobs;
        if (j.finish >= 0 && j.finish <= j.in->deadline_s + 1e-6) ++r.deadlines_met;
        r.useful_h += (j.finish >= 0 ? j.in->work_s : 0) / 3600;
        r.lost_work_h += j.lost / 3600;
      }
    }
    r.preemptions = preemptions_;
    r.node_failures = failures_;
    r.migrations = migrations_;
    r.events = events_;
    r.decisions_by_rule = by_rule_;
    return r;
  }

  const SpotTrace& tr_;
  Strategy st_;
  SimOptions o_;
  ctl::PolicyConfig cfg_;
  ctl::Cluster cluster_;
  ctl::Placer placer_;
  ctl::PolicyEngine engine_;
  Rng rng_;
  std::vector<SJ> jobs_;
  std::vector<CapPoint> timeline_;
  std::priority_queue<Ev, std::vector<Ev>, std::greater<Ev>> q_;
  uint64_t seq_ = 0, events_ = 0;
  double now_ = 0;
  double od_price_ = 0, spot_price_ = 0;
  int scale_ = 1;
  int cap_ = 0, live_spot_ = 0, idle_od_ = 0;
  std::vector<std::string> idle_spot_;
  uint64_t next_node_ = 0;
  double rate_ = 0.1, avail_h_ = 0, last_cap_t_ = 0;
  int drops_ = 0;
  int preemptions_ = 0, migrations_ = 0, remaining_ = 0, logged_ = 0, failures_ = 0;
  Rng fail_rng_{0x5eed};
  std::map<std::string, int> by_rule_;
  absl::flat_hash_map<std::string, int> by_id_;
};

}  // namespace

SimResult Simulate(const SpotTrace& trace, const std::vector<SimJobSpec>& jobs, Strategy strategy,
                   const SimOptions& options) {
  Sim sim(trace, jobs, strategy, options);
  return sim.Run();
}

}  // namespace cairn::sim
