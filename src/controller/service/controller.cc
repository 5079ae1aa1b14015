#include "controller/service/controller.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <random>
#include <set>

#include <google/protobuf/util/message_differencer.h>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/log.h"
#include "common/status.h"
#include "common/stop_points.h"
#include "controller/placement.h"
#include "controller/service/convert.h"
#include "controller/service/job_spec_check.h"

namespace cairn::controller {
namespace {

constexpr char kNodes[] = "nodes/";
constexpr char kJobs[] = "jobs/";
constexpr char kEvents[] = "events/";
// The last leadership's term (decimal).
constexpr char kTerm[] = "term";

// The event that records decision `d` (its rule, action, job, nodes and reason) as `kind`.
api::Event DecisionEvent(const Decision& d, const char* kind) {
  api::Event ev;
  ev.set_kind(kind);
  ev.set_rule(d.rule);
  ev.set_action(std::string(ActionName(d.action)));
  ev.set_job_id(d.job_id);
  ev.set_node_id(d.node_id);
  ev.set_target_node_id(d.target_node_id);
  ev.set_reason(d.reason);
  return ev;
}

std::string EventKey(uint64_t seq) { return absl::StrFormat("%s%020u", kEvents, seq); }

// A job keeps its newest checkpoints only, in memory and in the store: the rules look at the
// newest one, or the newest before a hang.
constexpr size_t kKeptCheckpoints = 32;

// The decisions tracked in flight: those that start, move or stop a job on a node.
bool TrackedInFlight(Action a) {
  return a == Action::kMigrate || a == Action::kRestore || a == Action::kResume || a == Action::kSuspend;
}

std::optional<Action> ActionFromName(absl::string_view name) {
  for (Action a : {Action::kCheckpoint, Action::kMigrate, Action::kRestore, Action::kDrainNode, Action::kSuspend,
                   Action::kResume}) {
    if (ActionName(a) == name) return a;
  }
  return std::nullopt;
}

std::string Said(const ActionDispatcher::JobWhere& w) {
  if (w.kind == ActionDispatcher::JobWhere::kUnreachable) return absl::StrCat("cannot be asked (", w.state, ")");
  if (w.kind == ActionDispatcher::JobWhere::kAbsent) return "has no such job";
  return w.pid > 0 ? absl::StrFormat("says %s (pid %d)", w.state, w.pid) : absl::StrCat("says ", w.state);
}

void KeepNewestCheckpoints(Job* job) {
  if (job->checkpoints.size() > kKeptCheckpoints) {
    job->checkpoints.erase(job->checkpoints.begin(), job->checkpoints.end() - kKeptCheckpoints);
  }
}

std::string Describe(const NodeSpec& s) {
  std::string gpus = s.capacity.gpus > 0 ? absl::StrFormat(", %d %s", s.capacity.gpus, s.gpu_type) : "";
  return absl::StrFormat("%.1f CPU, %d MB%s, $%.4f/h %s, zone %s, cloud %s", s.capacity.cpus,
                         s.capacity.memory_mb, gpus, s.price_per_hour, MarketName(s.market),
                         s.zone.empty() ? "-" : s.zone, s.cloud.empty() ? "-" : s.cloud);
}

std::string Describe(const JobSpec& s) {
  std::string out = absl::StrFormat("%s, %.1f CPU, %d MB, %d GPU%s, priority %d", JobKindName(s.kind),
                                    s.request.cpus, s.request.memory_mb, s.request.gpus,
                                    s.gpu_type.empty() ? "" : " " + s.gpu_type, s.priority);
  if (s.sla.deadline > 0) absl::StrAppendFormat(&out, ", deadline %.0f", s.sla.deadline);
  if (s.sla.max_downtime_s > 0) absl::StrAppendFormat(&out, ", max downtime %.0f s", s.sla.max_downtime_s);
  if (s.budget_usd > 0) absl::StrAppendFormat(&out, ", budget $%.2f", s.budget_usd);
  return out;
}

std::string NewJobId() {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  return absl::StrFormat("job-%06x", rng() & 0xffffff);
}

bool SameShape(const NodeSpec& a, const NodeSpec& b) {
  return a.capacity.cpus == b.capacity.cpus && a.capacity.memory_mb == b.capacity.memory_mb &&
         a.capacity.gpus == b.capacity.gpus && a.gpu_type == b.gpu_type && a.market == b.market &&
         a.zone == b.zone && a.cloud == b.cloud && a.labels == b.labels;
}

}  // namespace

Controller::Controller(Store* store, ActionDispatcher* dispatcher, ControllerOptions options)
    : store_(store),
      dispatcher_(dispatcher),
      options_(std::move(options)),
      engine_(PolicyEngine::Default()) {}

double Controller::Now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// ---- Leadership and the model's life ----

void Controller::Tick() {
  absl::StatusOr<Leadership> l = store_->Campaign(options_.id);
  // A call carrying a decision out (a migration: minutes) holds the lock: the campaign above has
  // kept the lease meanwhile, the rest waits for the next tick.
  std::unique_lock<std::mutex> lock(mu_, std::try_to_lock);
  if (!lock.owns_lock()) return;
  if (!l.ok()) {
    CAIRN_LOG_WARN("controller {}: election round failed: {}", options_.id, l.status().ToString());
    return;
  }
  leader_id_ = l->leader_id;
  if (l->leader && !leader_) {
    leader_ = true;
    absl::Status s = NewTermLocked();
    if (s.ok()) s = LoadLocked();
    if (!s.ok()) {
      CAIRN_LOG_WARN("controller {}: leads but cannot load the store, resigning: {}", options_.id, s.ToString());
      DropLocked();
      store_->Resign();
      return;
    }
    CAIRN_LOG_WARN("controller {}: leading with {} nodes and {} jobs from {}", options_.id,
                   cluster_->node_count(), cluster_->job_count(), store_->Describe());
    api::Event ev;
    ev.set_kind("leader-elected");
    ev.set_reason(absl::StrFormat("controller %s leads (term %d, store %s): %d nodes, %d jobs loaded%s",
                                  options_.id, term_, store_->Describe(), cluster_->node_count(),
                                  cluster_->job_count(),
                                  in_flight_.empty() ? ""
                                                     : absl::StrFormat(", %d decisions in flight to resolve",
                                                                       in_flight_.size())));
    (void)RecordLocked(std::move(ev));
  } else if (!l->leader && leader_) {
    CAIRN_LOG_WARN("controller {}: no longer leads (leader: {})", options_.id,
                   l->leader_id.empty() ? "none" : l->leader_id);
    DropLocked();
  }
  if (leader_) {
    absl::Status s = CheckHeartbeatsLocked();
    if (!s.ok()) CAIRN_LOG_WARN("controller {}: liveness check: {}", options_.id, s.ToString());
  }
  if (leader_ && !reconcile_again_.empty()) {
    std::set<std::string> nodes;
    nodes.swap(reconcile_again_);
    for (const std::string& n : nodes) {
      if (cluster_ == nullptr || cluster_->FindNode(n) == nullptr) continue;
      absl::Status s = ReconcileNodeLocked(n);
      if (!s.ok()) CAIRN_LOG_WARN("controller {}: reconciling node {}: {}", options_.id, n, s.ToString());
    }
  }
  if (leader_ && !in_flight_.empty()) {
    absl::Status s = ResolveInFlightLocked();
    if (!s.ok()) CAIRN_LOG_WARN("controller {}: resolving decisions in flight: {}", options_.id, s.ToString());
  }
  if (leader_ && (!retry_.empty() || !pending_action_.empty())) {
    absl::Status s = RetryPendingLocked();
    if (!s.ok()) CAIRN_LOG_WARN("controller {}: decisions tried again: {}", options_.id, s.ToString());
  }
  if (leader_ && options_.deadline_check_s > 0 &&
      Clock::now() - last_deadline_check_ >= std::chrono::duration<double>(options_.deadline_check_s)) {
    last_deadline_check_ = Clock::now();
    absl::Status s = CheckDeadlinesLocked();
    if (!s.ok()) CAIRN_LOG_WARN("controller {}: deadline check: {}", options_.id, s.ToString());
  }
}

void Controller::Shutdown() {
  std::lock_guard<std::mutex> lock(mu_);
  DropLocked();
  store_->Resign();
}

void Controller::DropLocked() {
  leader_ = false;
  cluster_.reset();
  last_heartbeat_.clear();
  pending_action_.clear();
  retry_.clear();
  started_.clear();
  registered_seq_.clear();
  specs_.clear();
  in_flight_.clear();
  reconcile_again_.clear();
  deferred_noted_.clear();
  term_ = 0;
}

absl::Status Controller::RequireLeaderLocked() const {
  if (leader_) return absl::OkStatus();
  return absl::UnavailableError(absl::StrCat(
      "controller ", options_.id, " does not lead",
      leader_id_.empty() ? "; no leader is elected yet, retry shortly"
                         : absl::StrCat("; the leader is ", leader_id_, ": send this to its address"),
      " (`cairn --controller ADDR1,ADDR2,...` tries each)"));
}

absl::Status Controller::StoreFailedLocked(const absl::Status& s) {
  if (s.code() == absl::StatusCode::kFailedPrecondition) {
    DropLocked();
    return absl::UnavailableError(absl::StrCat("controller ", options_.id,
                                               " lost its leadership while writing: ", s.message()));
  }
  // The model may now hold what the store does not: reload it from the store.
  absl::Status reload = LoadLocked();
  if (!reload.ok()) DropLocked();
  return s;
}

absl::Status Controller::NewTermLocked() {
  // Stored (a fenced write: only the leader's succeeds) before anything is asked of a node in
  // this leadership's name.
  ASSIGN_OR_RETURN(std::optional<std::string> last, store_->Get(kTerm));
  uint64_t term = 0;
  if (last.has_value() && !absl::SimpleAtoi(*last, &term)) {
    return absl::DataLossError(absl::StrCat("store key ", kTerm, ": not a number: ", *last));
  }
  RETURN_IF_ERROR(store_->Put(kTerm, absl::StrCat(term + 1)));
  term_ = term + 1;
  dispatcher_->SetTerm(term_);
  return absl::OkStatus();
}

absl::Status Controller::LoadLocked() {
  cluster_ = std::make_unique<Cluster>();
  last_heartbeat_.clear();
  pending_action_.clear();
  retry_.clear();
  started_.clear();
  registered_seq_.clear();
  specs_.clear();
  in_flight_.clear();
  ASSIGN_OR_RETURN(auto nodes, store_->List(kNodes));
  std::vector<api::StoredNode> stored_nodes;
  for (const auto& [key, value] : nodes) {
    api::StoredNode sn;
    if (!sn.ParseFromString(value)) return absl::DataLossError(absl::StrCat("store key ", key, ": not a node record"));
    stored_nodes.push_back(std::move(sn));
  }
  std::sort(stored_nodes.begin(), stored_nodes.end(),
            [](const auto& a, const auto& b) { return a.registered_seq() < b.registered_seq(); });
  auto now = Clock::now();
  for (const api::StoredNode& sn : stored_nodes) {
    ASSIGN_OR_RETURN(NodeSpec spec, FromApi(sn.spec()));
    std::string id = spec.id;
    RETURN_IF_ERROR(cluster_->AddNode(std::move(spec)));
    RETURN_IF_ERROR(cluster_->SetInterruptionRate(id, sn.spec().interruptions_per_hour()));
    registered_seq_[id] = sn.registered_seq();
    // A new leader does not know when nodes last spoke: each gets a full timeout from now.
    last_heartbeat_[id] = now;
  }
  ASSIGN_OR_RETURN(auto jobs, store_->List(kJobs));
  for (const auto& [key, value] : jobs) {
    api::StoredJob sj;
    if (!sj.ParseFromString(value)) return absl::DataLossError(absl::StrCat("store key ", key, ": not a job record"));
    ASSIGN_OR_RETURN(JobSpec spec, FromApi(sj.spec()));
    spec.submit_time = sj.submit_time();
    std::string id = spec.id;
    RETURN_IF_ERROR(cluster_->AddJob(std::move(spec)));
    cluster_->MutableJob(id)->cpu_features.insert(sj.cpu_features().begin(), sj.cpu_features().end());
    // Bind before node health is restored below: a job stays bound to a lost node until a
    // decision about it is carried out.
    // Whatever the store says is bound is loaded so (a job followed to where it runs may exceed
    // the node's capacity or sit on a draining node): refusing it would leave no leader able to load.
    if (!sj.node_id().empty()) RETURN_IF_ERROR(cluster_->Bind(id, sj.node_id(), /*runs_there=*/true));
    Job* job = cluster_->MutableJob(id);
    job->state = JobStateFromName(sj.state());
    job->suspended_for = SuspendReasonFromName(sj.suspended_for());
    job->progress_time = sj.submit_time();
    if (!sj.pending_action().empty()) pending_action_[id] = sj.pending_action();
    specs_[id] = sj.spec();
    started_[id] = sj.started();
    if (sj.has_in_flight()) in_flight_[id] = sj.in_flight();
    for (const api::StoredCheckpoint& c : sj.checkpoints()) job->checkpoints.push_back({c.time(), c.work_s()});
    dispatcher_->KnowJob(*job);
  }
  for (const api::StoredNode& sn : stored_nodes) {
    RETURN_IF_ERROR(cluster_->SetNodeHealth(sn.spec().id(), HealthFromName(sn.health())));
  }
  next_seq_ = 1;
  first_seq_ = 1;
  ASSIGN_OR_RETURN(auto events, store_->List(kEvents));
  if (!events.empty()) {
    api::Event first, last;
    if (last.ParseFromString(events.back().second)) next_seq_ = last.seq() + 1;
    if (first.ParseFromString(events.front().second)) first_seq_ = first.seq();
  }
  // A new leader checks deadlines at once: the old one may have died just before its check.
  last_deadline_check_ = Clock::time_point{};
  return absl::OkStatus();
}

absl::Status Controller::SaveNodeLocked(const std::string& id) {
  const Node* n = cluster_->FindNode(id);
  if (n == nullptr) return absl::InternalError(absl::StrCat("save node ", id, ": not in the model"));
  api::StoredNode sn;
  *sn.mutable_spec() = ToApi(n->spec, n->interruptions_per_hour);
  sn.set_health(std::string(HealthName(n->health)));
  sn.set_registered_seq(registered_seq_[id]);
  absl::Status s = store_->Put(absl::StrCat(kNodes, id), sn.SerializeAsString());
  return s.ok() ? s : StoreFailedLocked(s);
}

absl::Status Controller::SaveJobLocked(const std::string& id) {
  const Job* j = cluster_->FindJob(id);
  if (j == nullptr) return absl::InternalError(absl::StrCat("save job ", id, ": not in the model"));
  api::StoredJob sj;
  // The spec as submitted (with the command, which only the node daemon reads).
  auto given = specs_.find(id);
  *sj.mutable_spec() = given != specs_.end() ? given->second : ToApi(j->spec);
  sj.set_state(std::string(JobStateName(j->state)));
  sj.set_node_id(j->node_id);
  sj.set_submit_time(j->spec.submit_time);
  sj.set_suspended_for(std::string(SuspendReasonName(j->suspended_for)));
  if (auto it = pending_action_.find(id); it != pending_action_.end()) sj.set_pending_action(it->second);
  sj.set_started(started_[id]);
  if (auto it = in_flight_.find(id); it != in_flight_.end()) *sj.mutable_in_flight() = it->second;
  for (const std::string& f : j->cpu_features) sj.add_cpu_features(f);
  for (const CheckpointRecord& c : j->checkpoints) {
    api::StoredCheckpoint* sc = sj.add_checkpoints();
    sc->set_time(c.time);
    sc->set_work_s(c.work_s);
  }
  absl::Status s = store_->Put(absl::StrCat(kJobs, id), sj.SerializeAsString());
  return s.ok() ? s : StoreFailedLocked(s);
}

absl::Status Controller::RecordLocked(api::Event ev, std::vector<api::Event>* out) {
  ev.set_seq(next_seq_);
  ev.set_time(Now());
  absl::Status s = store_->Put(EventKey(ev.seq()), ev.SerializeAsString());
  if (!s.ok()) return StoreFailedLocked(s);
  ++next_seq_;
  if (absl::Status pruned = PruneEventsLocked(); !pruned.ok()) {
    CAIRN_LOG_WARN("controller {}: pruning old events: {}", options_.id, pruned.ToString());
  }
  CAIRN_LOG_INFO("event seq={} kind={} rule={} action={} job={} node={} target={} reason=\"{}\" dispatch=\"{}\"",
                 ev.seq(), ev.kind(), ev.rule(), ev.action(), ev.job_id(), ev.node_id(),
                 ev.target_node_id(), ev.reason(), ev.dispatch());
  if (out != nullptr) out->push_back(std::move(ev));
  return absl::OkStatus();
}

// ---- Placement and policies ----

absl::Status Controller::PlaceLocked(const std::string& job_id, std::string* node_id, std::string* reason,
                                     api::Event* event) {
  const Job* job = cluster_->FindJob(job_id);
  Placer placer(*cluster_);
  PlacementRequest req;
  req.job = job;
  Placement all = placer.Explain(req);
  int feasible = 0;
  for (const CandidateScore& c : all.candidates) feasible += c.feasible ? 1 : 0;
  absl::StatusOr<Placement> p = placer.Place(req);
  event->set_job_id(job_id);
  if (!p.ok()) {
    event->set_kind("job-pending");
    *reason = absl::StrFormat("no feasible node among %d; the job waits for capacity (`cairn job explain %s` "
                              "gives each node's reason)", cluster_->node_count(), job_id);
    event->set_reason(*reason);
    return SaveJobLocked(job_id);
  }
  const CandidateScore& c = p->chosen;
  *reason = absl::StrFormat(
      "lowest total $%.4f/h of progress among %d feasible of %d nodes (effective price $%.4f/h, "
      "risk $%.4f/h, packing $%.4f/h, stranding $%.4f/h)",
      c.total, feasible, cluster_->node_count(), c.effective_price, c.risk, c.packing, c.stranding);
  for (const CandidateScore& other : all.candidates) {
    if (other.feasible && other.node_id != p->node_id) {
      absl::StrAppendFormat(reason, "; next best %s at $%.4f/h", other.node_id, other.total);
      break;
    }
  }
  RETURN_IF_ERROR(cluster_->Bind(job_id, p->node_id));
  Job* bound = cluster_->MutableJob(job_id);
  bound->progress_time = Now();
  // The binding is stored before anything is asked of the node, so a failed write leaves nothing
  // started that the store does not know about.
  started_[job_id] = false;
  pending_action_[job_id] = absl::StrCat("start on ", p->node_id);
  RETURN_IF_ERROR(SaveJobLocked(job_id));
  DispatchResult r = dispatcher_->StartJob(*bound, *cluster_->FindNode(p->node_id));
  if (r.done) {
    started_[job_id] = true;
    pending_action_.erase(job_id);
    RETURN_IF_ERROR(SaveJobLocked(job_id));
  }
  *node_id = p->node_id;
  event->set_kind("job-placed");
  event->set_node_id(p->node_id);
  event->set_reason(*reason);
  event->set_dispatch(r.note);
  return absl::OkStatus();
}

absl::Status Controller::PlacePendingLocked() {
  std::vector<const Job*> pending;
  cluster_->ForEachJob([&](const Job& j) {
    if (j.state == JobState::kPending) pending.push_back(&j);
  });
  std::sort(pending.begin(), pending.end(), [](const Job* a, const Job* b) {
    if (a->spec.priority != b->spec.priority) return a->spec.priority > b->spec.priority;
    return a->spec.submit_time < b->spec.submit_time;
  });
  std::vector<std::string> ids;
  for (const Job* j : pending) ids.push_back(j->spec.id);
  for (const std::string& id : ids) {
    std::string node, reason;
    api::Event ev;
    RETURN_IF_ERROR(PlaceLocked(id, &node, &reason, &ev));
    // A job that still does not fit was told so when it was submitted.
    if (!node.empty()) RETURN_IF_ERROR(RecordLocked(std::move(ev)));
  }
  return absl::OkStatus();
}

absl::Status Controller::HandleLocked(const Event& event, std::vector<api::Event>* out) {
  Placer placer(*cluster_);
  std::set<std::string> settling;
  for (const auto& [id, f] : in_flight_) settling.insert(id);
  PolicyContext ctx{*cluster_, placer, options_.policy, event.time, &settling};
  std::vector<Decision> decisions = engine_.Handle(event, ctx);
  for (const Decision& d : decisions) {
    if (const Job* j = d.job_id.empty() ? nullptr : cluster_->FindJob(d.job_id);
        j != nullptr && !j->spec.group.empty() && d.action != Action::kCheckpoint && d.action != Action::kDrainNode) {
      // A job group's rank moves, stops and comes back only with its whole group (groups.cc):
      // alone it would not match its peers.
      api::Event ev = DecisionEvent(d, "decision-skipped");
      ev.set_reason(absl::StrCat(d.reason, "; not carried out: job ", d.job_id, " is rank ", j->spec.rank,
                                 " of group ", j->spec.group, ", which moves only whole (cairn group checkpoint --stop, "
                                 "cairn group restore)"));
      RETURN_IF_ERROR(RecordLocked(std::move(ev), out));
      continue;
    }
    if (!d.job_id.empty() && in_flight_.count(d.job_id) != 0) {
      // Its previous decision is still being resolved (ResolveInFlightLocked): one at a time.
      CAIRN_LOG_WARN("controller {}: rule {} decided {} for job {}, whose {} is still in flight: not carried out",
                     options_.id, d.rule, std::string(ActionName(d.action)), d.job_id, in_flight_[d.job_id].action());
      continue;
    }
    RETURN_IF_ERROR(CarryLocked(d, out));
  }
  return absl::OkStatus();
}

absl::Status Controller::CarryLocked(const Decision& d, std::vector<api::Event>* out) {
  const bool tracked = dispatcher_->CarriesOut() && !d.job_id.empty() && TrackedInFlight(d.action) &&
                       cluster_->FindJob(d.job_id) != nullptr;
  if (tracked) {
    api::InFlight& f = in_flight_[d.job_id];
    f.set_action(std::string(ActionName(d.action)));
    f.set_rule(d.rule);
    f.set_from_node(d.node_id);
    f.set_to_node(d.target_node_id);
    f.set_since(Now());
    f.set_term(term_);
    f.set_restore_from_time(d.restore_from_time);
    f.set_reason(d.reason);
    f.set_suspend_reason(std::string(SuspendReasonName(d.suspend_reason)));
    // Stored before any node is asked: whoever leads next knows what may be under way.
    if (absl::Status s = SaveJobLocked(d.job_id); !s.ok()) {
      in_flight_.erase(d.job_id);
      return s;
    }
    FaultPoint("controller-in-flight");
  }
  DispatchResult r = dispatcher_->Carry(d);
  if (tracked) {
    FaultPoint("controller-carried");
    in_flight_.erase(d.job_id);  // stored with the outcome below
  }
  api::Event ev = DecisionEvent(d, "decision");
  ev.set_dispatch(r.note);
  if (!r.done && !d.job_id.empty()) {
    pending_action_[d.job_id] = absl::StrCat(ActionName(d.action),
                                             d.target_node_id.empty() ? "" : " to " + d.target_node_id, " (", d.rule, ")");
    if (std::string again = RetryLaterLocked(d, r); !again.empty()) ev.set_dispatch(absl::StrCat(r.note, "; ", again));
  }
  RETURN_IF_ERROR(RecordLocked(std::move(ev), out));
  if (r.done) {
    RETURN_IF_ERROR(ApplyLocked(d));
    if (!d.job_id.empty()) {
      pending_action_.erase(d.job_id);
      retry_.erase(d.job_id);
    }
  }
  if (!d.job_id.empty() && cluster_->FindJob(d.job_id) != nullptr) RETURN_IF_ERROR(SaveJobLocked(d.job_id));
  if (!d.node_id.empty() && cluster_->FindNode(d.node_id) != nullptr) RETURN_IF_ERROR(SaveNodeLocked(d.node_id));
  return absl::OkStatus();
}

std::string Controller::RetryLaterLocked(const Decision& d, const DispatchResult& r) {
  if (!dispatcher_->CarriesOut()) {
    retry_.erase(d.job_id);
    return "";
  }
  Retry& again = retry_[d.job_id];
  if (r.final) {  // kept, never due: its pending action stays shown, and is this leader's
    again = Retry{d, 1, Clock::time_point::max()};
    return "not tried again";
  }
  const bool same = again.tries > 0 && again.decision.action == d.action &&
                    again.decision.target_node_id == d.target_node_id && again.decision.node_id == d.node_id;
  again.tries = same ? again.tries + 1 : 1;
  again.decision = d;
  const double wait = std::min(kRetryMaxWaitS, options_.retry_first_s * std::pow(2.0, again.tries - 1));
  again.next = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(wait));
  const Job* j = cluster_->FindJob(d.job_id);
  if (j != nullptr && !j->node_id.empty() && LostLocked(j->node_id)) {
    return absl::StrFormat("decided again in %.1f s (try %d; %s is lost: until the job runs again)", wait, again.tries,
                           j->node_id);
  }
  if (again.tries > options_.retry_tries) {
    again.next = Clock::now();  // RetryPendingLocked drops it at once, saying so
    return "";
  }
  return absl::StrFormat("tried again in %.1f s (try %d of %d)", wait, again.tries, options_.retry_tries);
}

absl::Status Controller::ApplyLocked(const Decision& d, bool runs_there) {
  Job* job = d.job_id.empty() ? nullptr : cluster_->MutableJob(d.job_id);
  switch (d.action) {
    case Action::kCheckpoint:
      if (job != nullptr) {
        job->checkpoints.push_back({Now(), WorkDoneAt(*job, Now())});
        KeepNewestCheckpoints(job);
      }
      return absl::OkStatus();
    case Action::kDrainNode:
      return cluster_->SetNodeHealth(d.node_id, NodeHealth::kDraining);
    case Action::kSuspend:
      if (job == nullptr) return absl::OkStatus();
      if (!job->node_id.empty()) RETURN_IF_ERROR(cluster_->Unbind(d.job_id, JobState::kSuspended));
      job->suspended_for = d.suspend_reason;
      return absl::OkStatus();
    case Action::kMigrate:
    case Action::kRestore:
    case Action::kResume:
      if (job == nullptr) return absl::OkStatus();
      if (!job->node_id.empty()) RETURN_IF_ERROR(cluster_->Unbind(d.job_id, JobState::kPending));
      RETURN_IF_ERROR(cluster_->Bind(d.job_id, d.target_node_id, runs_there));
      job->suspended_for = SuspendReason::kNone;
      started_[d.job_id] = true;
      return absl::OkStatus();
  }
  return absl::OkStatus();
}

absl::Status Controller::CheckHeartbeatsLocked() {
  auto now = Clock::now();
  std::map<std::string, Clock::time_point> heard;
  {
    std::lock_guard<std::mutex> l(heard_mu_);
    heard = heard_;
  }
  std::vector<std::pair<std::string, double>> silent;
  cluster_->ForEachNode([&](const Node& n, uint64_t) {
    if (n.health == NodeHealth::kLost) return;
    Clock::time_point last = last_heartbeat_[n.spec.id];
    if (auto it = heard.find(n.spec.id); it != heard.end()) last = std::max(last, it->second);
    double quiet = std::chrono::duration<double>(now - last).count();
    if (quiet > options_.heartbeat_timeout_s) silent.emplace_back(n.spec.id, quiet);
  });
  for (const auto& [id, quiet] : silent) {
    RETURN_IF_ERROR(cluster_->SetNodeHealth(id, NodeHealth::kLost));
    RETURN_IF_ERROR(SaveNodeLocked(id));
    const Node* n = cluster_->FindNode(id);
    api::Event ev;
    ev.set_kind("node-lost");
    ev.set_node_id(id);
    ev.set_reason(absl::StrFormat("no heartbeat for %.1f s (timeout %.1f s); jobs on it: %s", quiet,
                                  options_.heartbeat_timeout_s,
                                  n->job_ids.empty() ? "none" : absl::StrJoin(n->job_ids, ", ")));
    RETURN_IF_ERROR(RecordLocked(std::move(ev)));
    // Job groups with a rank there come back whole first (the node-lost rule skips their ranks).
    // Whatever fails there, the node's other jobs are still handled.
    if (absl::Status st = FailOverGroupsLocked(id); !st.ok()) {
      CAIRN_LOG_WARN("controller {}: group failover for lost node {}: {}", options_.id, id, st.ToString());
    }
    Event e;
    e.trigger = Trigger::kNodeLost;
    e.time = Now();
    e.node_id = id;
    RETURN_IF_ERROR(HandleLocked(e));
  }
  return absl::OkStatus();
}

absl::Status Controller::ReconcileNodeLocked(const std::string& node_id) {
  using Where = ActionDispatcher::JobWhere;
  auto record = [&](const std::string& kind, const std::string& job_id, std::string reason,
                    std::string dispatch = "") -> absl::Status {
    api::Event ev;
    ev.set_kind(kind);
    ev.set_node_id(node_id);
    ev.set_job_id(job_id);
    ev.set_reason(std::move(reason));
    ev.set_dispatch(std::move(dispatch));
    return RecordLocked(std::move(ev));
  };
  if (!dispatcher_->CarriesOut()) return absl::OkStatus();
  absl::StatusOr<std::vector<std::pair<std::string, int>>> running = dispatcher_->RunningJobs(node_id);
  if (!running.ok()) {
    return record("fenced", "", absl::StrCat("cannot fence node ", node_id, ": ", running.status().message()));
  }
  std::set<std::string> here;
  for (const auto& [job_id, pid] : *running) {
    here.insert(job_id);
    const Job* j = cluster_->FindJob(job_id);
    // Jobs this controller never placed, or placed nowhere now, are left alone; a job whose
    // decision is in flight is ResolveInFlightLocked's.
    if (j == nullptr || j->node_id.empty() || in_flight_.count(job_id) != 0) continue;
    if (j->node_id == node_id) {
      if (!started_[job_id]) {
        started_[job_id] = true;
        pending_action_.erase(job_id);
        RETURN_IF_ERROR(SaveJobLocked(job_id));
        RETURN_IF_ERROR(record("job-found", job_id,
                               absl::StrFormat("job %s runs on %s (pid %d), where it was placed: its start is confirmed",
                                               job_id, node_id, pid)));
      }
      continue;
    }
    const std::string placed = j->node_id;
    Where w = dispatcher_->Locate(job_id, placed);
    if (w.kind == Where::kRunning) {
      // A partition healed: the job was restored on `placed` while this node was cut off.
      DispatchResult k = dispatcher_->Kill(job_id, node_id);
      RETURN_IF_ERROR(record("fenced", job_id,
                             absl::StrFormat("job %s still ran on %s (pid %d), which is not its node any more (%s, "
                                             "where it is placed, %s): %s",
                                             job_id, node_id, pid, placed, Said(w), k.note)));
      continue;
    }
    const bool placed_lost = LostLocked(placed);
    if (w.kind == Where::kBusy || (w.kind == Where::kUnreachable && !placed_lost)) {
      // Left running and looked at again next tick (the event once): the placed node is busy with
      // the job (migrating, perhaps to this very node, in doubt until the two daemons settle it;
      // checkpointing; restoring), or cannot be asked and is not lost.
      reconcile_again_.insert(node_id);
      if (deferred_noted_.insert(job_id + "@" + node_id).second) {
        RETURN_IF_ERROR(record("fence-deferred", job_id,
                               absl::StrFormat("job %s runs on %s (pid %d), but %s, where it is placed, %s: left "
                                               "running; decided once %s settles or answers",
                                               job_id, node_id, pid, placed, Said(w), placed)));
      }
      continue;
    }
    // This node's copy is the only one known: the model follows it (a move whose outcome the
    // controller that carried it out never stored).
    RETURN_IF_ERROR(cluster_->Unbind(job_id, JobState::kPending));
    RETURN_IF_ERROR(cluster_->Bind(job_id, node_id, /*runs_there=*/true));
    started_[job_id] = true;
    pending_action_.erase(job_id);
    RETURN_IF_ERROR(SaveJobLocked(job_id));
    RETURN_IF_ERROR(record("job-found", job_id,
                           absl::StrFormat("job %s runs on %s (pid %d), and %s, where it was placed, %s: it is "
                                           "placed on %s now",
                                           job_id, node_id, pid, placed, placed_lost ? "is lost" : Said(w), node_id)));
  }
  // Placed here, never confirmed started (the controller stopped before it knew, or the node was
  // not reachable then), and not running: started again.
  std::vector<std::string> unstarted;
  if (const Node* n = cluster_->FindNode(node_id); n != nullptr) {
    for (const std::string& id : n->job_ids) {
      if (!started_[id] && here.count(id) == 0 && in_flight_.count(id) == 0) unstarted.push_back(id);
    }
  }
  for (const std::string& id : unstarted) {
    Where w = dispatcher_->Locate(id, node_id);
    if (w.kind != Where::kAbsent) continue;  // it ran and ended, or is starting: not started twice
    DispatchResult r = dispatcher_->StartJob(*cluster_->FindJob(id), *cluster_->FindNode(node_id));
    if (r.done) {
      started_[id] = true;
      pending_action_.erase(id);
    }
    RETURN_IF_ERROR(SaveJobLocked(id));
    RETURN_IF_ERROR(record("job-placed", id,
                           absl::StrCat("placed on ", node_id, " earlier, never confirmed started, and ", node_id,
                                        " has no such job: started again"),
                           r.note));
  }
  return absl::OkStatus();
}

bool Controller::LostLocked(const std::string& node_id) const {
  const Node* n = cluster_->FindNode(node_id);
  return n == nullptr || n->health == NodeHealth::kLost;
}

absl::Status Controller::EndInFlightLocked(const std::string& job_id, const std::string& kind,
                                           const std::string& reason, const std::string& dispatch) {
  const api::InFlight f = in_flight_[job_id];
  in_flight_.erase(job_id);
  if (cluster_->FindJob(job_id) != nullptr) RETURN_IF_ERROR(SaveJobLocked(job_id));
  api::Event ev;
  ev.set_kind(kind);
  ev.set_rule(f.rule());
  ev.set_action(f.action());
  ev.set_job_id(job_id);
  ev.set_node_id(f.from_node());
  ev.set_target_node_id(f.to_node());
  ev.set_reason(reason);
  ev.set_dispatch(dispatch);
  return RecordLocked(std::move(ev));
}

absl::Status Controller::ResolveInFlightLocked() {
  using Where = ActionDispatcher::JobWhere;
  std::vector<std::string> ids;
  for (const auto& [id, f] : in_flight_) ids.push_back(id);
  for (const std::string& id : ids) {
    if (!leader_) break;
    auto it = in_flight_.find(id);
    if (it == in_flight_.end()) continue;
    const api::InFlight f = it->second;
    const std::string what = absl::StrFormat("%s of job %s%s%s (rule %s), decided by the leader of term %d %.0f s ago",
                                             f.action(), id, f.from_node().empty() ? "" : " from " + f.from_node(),
                                             f.to_node().empty() ? "" : " to " + f.to_node(), f.rule(), f.term(),
                                             Now() - f.since());
    std::optional<Action> action = ActionFromName(f.action());
    if (cluster_->FindJob(id) == nullptr || !action.has_value() || !dispatcher_->CarriesOut()) {
      RETURN_IF_ERROR(EndInFlightLocked(id, "decision-abandoned",
                                        absl::StrCat(what, ": abandoned: ",
                                                     !action.has_value() ? "unknown action"
                                                     : !dispatcher_->CarriesOut()
                                                         ? "this controller carries no decision out"
                                                         : "the job is gone")));
      continue;
    }
    Decision d;
    d.action = *action;
    d.job_id = id;
    d.node_id = f.from_node();
    d.target_node_id = f.to_node();
    d.restore_from_time = f.restore_from_time();
    d.suspend_reason = SuspendReasonFromName(f.suspend_reason());
    d.rule = f.rule();
    d.reason = f.reason();
    Where from = d.node_id.empty() ? Where{Where::kAbsent, "none", 0} : dispatcher_->Locate(id, d.node_id);
    if (d.action == Action::kSuspend) {
      if (from.kind == Where::kBusy || (from.kind == Where::kUnreachable && !LostLocked(d.node_id))) continue;  // ask again
      if (from.kind == Where::kRunning) {
        RETURN_IF_ERROR(EndInFlightLocked(
            id, "decision-abandoned",
            absl::StrCat(what, ": not carried out: ", d.node_id, " ", Said(from), "; the rules decide again")));
        pending_action_.erase(id);
        continue;
      }
      RETURN_IF_ERROR(ApplyLocked(d));
      pending_action_.erase(id);
      RETURN_IF_ERROR(EndInFlightLocked(
          id, "decision-resolved",
          absl::StrCat(what, ": carried out: ", d.node_id, " ", Said(from), " (its suspend checkpoint is on ",
                       d.node_id, ")")));
      continue;
    }
    // migrate, restore, resume: the target decides.
    Where to = dispatcher_->Locate(id, d.target_node_id);
    if (to.kind == Where::kRunning) {
      std::string also;
      if (from.kind == Where::kRunning && d.node_id != d.target_node_id) {
        // Never two: the target's copy is the decision's outcome.
        DispatchResult k = dispatcher_->Kill(id, d.node_id);
        also = absl::StrCat("; it also ran on ", d.node_id, ": ", k.note);
      }
      RETURN_IF_ERROR(ApplyLocked(d, /*runs_there=*/true));
      pending_action_.erase(id);
      RETURN_IF_ERROR(EndInFlightLocked(
          id, "decision-resolved", absl::StrCat(what, ": carried out: ", d.target_node_id, " ", Said(to), also)));
      continue;
    }
    if (to.kind == Where::kBusy || from.kind == Where::kBusy) {
      // A migration being settled, a restore: asked again every tick. Said once when it lasts,
      // so that a job held in doubt is not silent (the status shows its decision in flight).
      if (Now() - f.since() > 30 && waiting_noted_.insert(id).second) {
        api::Event ev;
        ev.set_kind("decision-waiting");
        ev.set_job_id(id);
        ev.set_node_id(to.kind == Where::kBusy ? d.target_node_id : d.node_id);
        ev.set_rule(f.rule());
        ev.set_reason(absl::StrCat(what, ": still waiting: ", to.kind == Where::kBusy ? d.target_node_id : d.node_id,
                                   " says the job is busy (", Said(to.kind == Where::kBusy ? to : from),
                                   "); asked again every tick"));
        RETURN_IF_ERROR(RecordLocked(std::move(ev)));
      }
      continue;
    }
    if (from.kind == Where::kRunning) {
      RETURN_IF_ERROR(EndInFlightLocked(
          id, "decision-abandoned",
          absl::StrCat(what, ": not carried out: the job still runs on ", d.node_id, " (", d.target_node_id, " ",
                       Said(to), "); the rules decide again on their next trigger")));
      pending_action_.erase(id);
      continue;
    }
    if (from.kind == Where::kUnreachable) {
      if (!LostLocked(d.node_id)) continue;  // it may still run there: ask again
      if (d.action == Action::kMigrate) {
        // A lost source cannot say whether it still runs the job: the node-lost rule decides for
        // its jobs (it was held back while this move was in flight).
        RETURN_IF_ERROR(EndInFlightLocked(
            id, "decision-abandoned",
            absl::StrCat(what, ": not carried out: ", d.node_id, " is lost and cannot say whether it still runs the job (",
                         d.target_node_id, " ", Said(to), "); the node-lost rule decides for it")));
        pending_action_.erase(id);
        Event e;
        e.trigger = Trigger::kNodeLost;
        e.time = Now();
        e.node_id = d.node_id;
        RETURN_IF_ERROR(HandleLocked(e));
        continue;
      }
    }
    if (to.kind == Where::kUnreachable) {
      if (!LostLocked(d.target_node_id)) continue;
      RETURN_IF_ERROR(EndInFlightLocked(
          id, "decision-abandoned",
          absl::StrCat(what, ": not carried out: ", d.target_node_id, " is lost and the job runs nowhere known",
                       d.node_id.empty() ? "" : absl::StrCat(" (", d.node_id, " ", Said(from), ")"),
                       "; the rules decide again on their next trigger")));
      pending_action_.erase(id);
      continue;
    }
    // The job runs on neither (a move stopped between its checkpoint and its restore, a restore
    // not begun): this leader carries it out. A move whose source no longer runs the job (it
    // stopped at its checkpoint) is restored from its newest stored checkpoint where it ran: the
    // source's record says why it stopped, while the target may hold an older record of the job
    // (a move the other way) and rightly refuses to run what it believes runs elsewhere.
    const std::string meant_for = d.target_node_id;  // where the decision meant the job to go
    if (d.action == Action::kMigrate) {
      d.action = Action::kRestore;
      d.restore_from_time = Now();
      d.target_node_id = d.node_id;
    }
    DispatchResult r = dispatcher_->Carry(d);
    std::string again;
    if (r.done) {
      RETURN_IF_ERROR(ApplyLocked(d));
      pending_action_.erase(id);
      retry_.erase(id);
    } else {
      pending_action_[id] = absl::StrCat(ActionName(d.action), " to ", d.target_node_id, " (", d.rule, ")");
      again = RetryLaterLocked(d, r);
    }
    RETURN_IF_ERROR(EndInFlightLocked(
        id, "decision-resumed",
        absl::StrCat(what, ": the job runs on neither ", d.node_id.empty() ? "" : d.node_id + " (" + Said(from) + ") nor ",
                     meant_for, " (", Said(to), "): carried out again by this leader (", ActionName(d.action),
                     d.target_node_id != meant_for ? absl::StrCat(" on ", d.target_node_id) : "",
                     r.done ? ", done)" : ", not done)"),
        again.empty() ? r.note : absl::StrCat(r.note, "; ", again)));
  }
  return absl::OkStatus();
}

absl::Status Controller::RetryPendingLocked() {
  if (!dispatcher_->CarriesOut()) return absl::OkStatus();
  auto drop = [&](const std::string& id, const std::string& why) -> absl::Status {
    api::Event ev;
    ev.set_kind("decision-dropped");
    ev.set_job_id(id);
    auto text = pending_action_.find(id);
    if (auto r = retry_.find(id); r != retry_.end()) {
      ev.set_node_id(r->second.decision.node_id);
      ev.set_rule(r->second.decision.rule);
    }
    ev.set_reason(absl::StrCat(text == pending_action_.end() ? "its decision" : text->second, ", not carried out: ",
                               why, "; dropped, the rules decide again on their next trigger"));
    pending_action_.erase(id);
    retry_.erase(id);
    RETURN_IF_ERROR(SaveJobLocked(id));
    return RecordLocked(std::move(ev));
  };
  // Pending actions of an earlier leader (this one does not know the decision behind them): a
  // job of a lost node is decided again at once; any other runs where it is, and its decision
  // is dropped, said once. A start waits for its node's registration (ReconcileNodeLocked).
  std::vector<std::string> inherited;
  for (const auto& [id, text] : pending_action_) {
    if (retry_.count(id) == 0 && in_flight_.count(id) == 0 && !absl::StartsWith(text, "start on ")) inherited.push_back(id);
  }
  for (const std::string& id : inherited) {
    const Job* j = cluster_->FindJob(id);
    if (j != nullptr && !j->node_id.empty() && LostLocked(j->node_id)) {
      Retry& r = retry_[id];
      r.decision.job_id = id;
      r.decision.node_id = j->node_id;
      r.next = Clock::now();
      continue;
    }
    if (j == nullptr) {
      pending_action_.erase(id);
      continue;
    }
    RETURN_IF_ERROR(drop(id, "decided by an earlier leader, which did not carry it out"));
  }
  const auto now = Clock::now();
  std::vector<std::string> due;
  for (const auto& [id, r] : retry_) {
    if (r.next <= now) due.push_back(id);
  }
  std::set<std::string> decided_again;  // lost nodes whose rule ran in this round
  for (const std::string& id : due) {
    auto it = retry_.find(id);
    if (it == retry_.end()) continue;  // settled by a decision of this round
    const Job* j = cluster_->FindJob(id);
    if (j == nullptr || pending_action_.count(id) == 0) {  // ended, or resolved another way
      retry_.erase(it);
      continue;
    }
    if (in_flight_.count(id) != 0) continue;  // ResolveInFlightLocked's
    if (!j->node_id.empty() && LostLocked(j->node_id)) {
      // Its node is gone: the node-lost rule decides again for every job still there, with the
      // capacity there is now (the target it chose may be full, lost or still silent).
      if (decided_again.insert(j->node_id).second) {
        Event e;
        e.trigger = Trigger::kNodeLost;
        e.time = Now();
        e.node_id = j->node_id;
        RETURN_IF_ERROR(HandleLocked(e));
      }
      continue;
    }
    const Retry r = it->second;
    const Decision& d = r.decision;
    std::string stale;
    const Node* to = d.target_node_id.empty() ? nullptr : cluster_->FindNode(d.target_node_id);
    if (j->node_id != d.node_id) {
      stale = absl::StrCat("the job is ", j->node_id.empty() ? "on no node" : "on " + j->node_id, " now, not on ",
                           d.node_id.empty() ? "no node" : d.node_id);
    } else if (!d.target_node_id.empty() && to == nullptr) {
      stale = absl::StrCat(d.target_node_id, " is gone");
    } else if (to != nullptr && to->health != NodeHealth::kHealthy) {
      stale = absl::StrCat(d.target_node_id, " is ", HealthName(to->health));
    } else if (to != nullptr && d.target_node_id != j->node_id && !j->spec.request.FitsIn(to->Free())) {
      stale = absl::StrCat("the job no longer fits on ", d.target_node_id);
    } else if (r.tries > options_.retry_tries) {
      stale = absl::StrCat("tried ", r.tries, " times");
    } else if ((d.action == Action::kRestore || d.action == Action::kResume) && !d.node_id.empty()) {
      // Its node answers again (it is no longer lost): a copy still running there is the job.
      ActionDispatcher::JobWhere w = dispatcher_->Locate(id, d.node_id);
      if (w.kind == ActionDispatcher::JobWhere::kRunning) stale = absl::StrCat("it runs on ", d.node_id, " again (", Said(w), ")");
    }
    if (!stale.empty()) {
      RETURN_IF_ERROR(drop(id, stale));
      continue;
    }
    RETURN_IF_ERROR(CarryLocked(d, nullptr));
  }
  return absl::OkStatus();
}

absl::Status Controller::CheckDeadlinesLocked() {
  std::vector<std::string> waiting;
  cluster_->ForEachJob([&](const Job& j) {
    if (j.spec.kind != JobKind::kBatch || j.spec.sla.deadline <= 0) return;
    if (j.state != JobState::kPending && j.state != JobState::kSuspended) return;
    // A decision already waits for a node to carry it out: deciding it again every round would
    // only repeat the same event.
    if (pending_action_.count(j.spec.id) != 0) return;
    waiting.push_back(j.spec.id);
  });
  for (const std::string& id : waiting) {
    Event e;
    e.trigger = Trigger::kDeadlineCheck;
    e.time = Now();
    e.job_id = id;
    RETURN_IF_ERROR(HandleLocked(e));
  }
  return absl::OkStatus();
}

absl::Status Controller::PruneEventsLocked() {
  if (options_.keep_events == 0) return absl::OkStatus();
  for (int n = 0; n < 4 && next_seq_ - first_seq_ > options_.keep_events; ++n) {
    absl::Status s = store_->Delete(EventKey(first_seq_));
    if (!s.ok()) return s.code() == absl::StatusCode::kFailedPrecondition ? StoreFailedLocked(s) : s;
    ++first_seq_;
  }
  return absl::OkStatus();
}

// ---- Calls ----

absl::Status Controller::RegisterNode(const api::RegisterNodeRequest& req, api::RegisterNodeResponse* resp) {
  std::lock_guard<std::mutex> lock(mu_);
  RETURN_IF_ERROR(RequireLeaderLocked());
  RETURN_IF_ERROR(Annotate(CheckNodeSpec(req.spec()), "register node " + req.spec().id()));
  ASSIGN_OR_RETURN(NodeSpec spec, FromApi(req.spec()));
  const std::string id = spec.id;
  api::Event ev;
  ev.set_node_id(id);
  if (const Node* old = cluster_->FindNode(id); old != nullptr) {
    if (!SameShape(old->spec, spec)) {
      if (!old->job_ids.empty()) {
        return absl::FailedPreconditionError(absl::StrCat(
            "node ", id, " re-registered with different resources, market, zone or labels while jobs ",
            absl::StrJoin(old->job_ids, ", "), " are bound to it; register it under a new id"));
      }
      RETURN_IF_ERROR(cluster_->RemoveNode(id));
      RETURN_IF_ERROR(cluster_->AddNode(spec));
    }
    bool was_lost = cluster_->FindNode(id)->health == NodeHealth::kLost;
    RETURN_IF_ERROR(cluster_->SetPrice(id, spec.price_per_hour));
    if (was_lost) RETURN_IF_ERROR(cluster_->SetNodeHealth(id, NodeHealth::kHealthy));
    ev.set_kind(was_lost ? "node-returned" : "node-reregistered");
    ev.set_reason(absl::StrCat(was_lost ? "registered again after being lost: " : "registered again: ",
                               Describe(spec)));
  } else {
    RETURN_IF_ERROR(cluster_->AddNode(spec));
    registered_seq_[id] = next_seq_;
    ev.set_kind("node-registered");
    ev.set_reason(Describe(spec));
  }
  RETURN_IF_ERROR(cluster_->SetInterruptionRate(id, req.spec().interruptions_per_hour()));
  dispatcher_->NodeRegistered(id, req.daemon_address(), req.daemon_token());
  if (!req.daemon_address().empty()) absl::StrAppend(ev.mutable_reason(), "; daemon at ", req.daemon_address());
  last_heartbeat_[id] = Clock::now();
  RETURN_IF_ERROR(SaveNodeLocked(id));
  RETURN_IF_ERROR(RecordLocked(std::move(ev)));
  RETURN_IF_ERROR(ReconcileNodeLocked(id));
  resp->set_heartbeat_interval_s(options_.heartbeat_interval_s);
  resp->set_heartbeat_timeout_s(options_.heartbeat_timeout_s);
  resp->set_controller_term(term_);
  RETURN_IF_ERROR(PlacePendingLocked());
  Event e;
  e.time = Now();
  e.node_id = id;
  e.trigger = Trigger::kCapacityAdded;
  RETURN_IF_ERROR(HandleLocked(e));
  e.trigger = Trigger::kCapacityReturned;
  return HandleLocked(e);
}

absl::Status Controller::Heartbeat(const api::HeartbeatRequest& req) {
  api::HeartbeatResponse ignored;
  return Heartbeat(req, &ignored);
}

absl::Status Controller::Heartbeat(const api::HeartbeatRequest& req, api::HeartbeatResponse* resp) {
  {
    // Timed on arrival: a call carrying a decision out may hold mu_ for minutes.
    std::lock_guard<std::mutex> l(heard_mu_);
    heard_[req.node_id()] = Clock::now();
  }
  std::lock_guard<std::mutex> lock(mu_);
  RETURN_IF_ERROR(RequireLeaderLocked());
  const Node* n = cluster_->FindNode(req.node_id());
  if (n == nullptr) {
    return absl::NotFoundError(absl::StrCat("heartbeat from node ", req.node_id(),
                                            ": not registered with this controller; register it first"));
  }
  resp->set_register_again(!dispatcher_->Reaches(req.node_id()));
  resp->set_controller_term(term_);
  auto now = Clock::now();
  double quiet = std::chrono::duration<double>(now - last_heartbeat_[req.node_id()]).count();
  last_heartbeat_[req.node_id()] = now;
  if (n->health != NodeHealth::kLost) return absl::OkStatus();
  RETURN_IF_ERROR(cluster_->SetNodeHealth(req.node_id(), NodeHealth::kHealthy));
  RETURN_IF_ERROR(SaveNodeLocked(req.node_id()));
  api::Event ev;
  ev.set_kind("node-returned");
  ev.set_node_id(req.node_id());
  ev.set_reason(absl::StrFormat("heartbeat after %.1f s of silence", quiet));
  RETURN_IF_ERROR(RecordLocked(std::move(ev)));
  RETURN_IF_ERROR(ReconcileNodeLocked(req.node_id()));
  return PlacePendingLocked();
}

absl::Status Controller::ReportSignal(const api::NodeSignal& req, api::ReportSignalResponse* resp) {
  std::lock_guard<std::mutex> lock(mu_);
  RETURN_IF_ERROR(RequireLeaderLocked());
  Event e;
  e.time = Now();
  e.node_id = req.node_id();
  e.job_id = req.job_id();
  if (req.kind() == api::NodeSignal::CHECKPOINT) return RecordCheckpointLocked(req, resp);
  if (req.kind() == api::NodeSignal::JOB_ENDED) return JobEndedLocked(req, resp);
  bool needs_node = true;
  switch (req.kind()) {
    case api::NodeSignal::SPOT_NOTICE:
      e.trigger = Trigger::kSpotNotice;
      e.notice_s = req.notice_s() > 0 ? req.notice_s() : 120;
      break;
    case api::NodeSignal::GPU_HEALTH:
      e.trigger = Trigger::kGpuHealth;
      e.xid = req.xid();
      e.ecc_uncorrectable = req.ecc_uncorrectable();
      break;
    case api::NodeSignal::JOB_HUNG:
      e.trigger = Trigger::kJobHung;
      e.last_progress_time = req.last_progress_time();
      needs_node = false;
      break;
    case api::NodeSignal::MEMORY_PRESSURE:
      e.trigger = Trigger::kMemoryPressure;
      e.memory_used_mb = req.memory_used_mb();
      e.memory_limit_mb = req.memory_limit_mb();
      e.memory_growth_mb_per_s = req.memory_growth_mb_per_s();
      needs_node = false;
      break;
    case api::NodeSignal::FAILURE_PREDICTION:
      e.trigger = Trigger::kFailurePrediction;
      e.precision = req.precision();
      e.warning_s = req.warning_s();
      break;
    default:
      return absl::InvalidArgumentError("signal: unknown kind; give one of SPOT_NOTICE, GPU_HEALTH, "
                                        "JOB_HUNG, MEMORY_PRESSURE, FAILURE_PREDICTION");
  }
  if (needs_node && cluster_->FindNode(e.node_id) == nullptr) {
    return absl::NotFoundError(absl::StrCat("signal ", TriggerName(e.trigger), ": unknown node `", e.node_id, "`"));
  }
  if (!needs_node && cluster_->FindJob(e.job_id) == nullptr) {
    return absl::NotFoundError(absl::StrCat("signal ", TriggerName(e.trigger), ": unknown job `", e.job_id, "`"));
  }
  api::Event ev;
  ev.set_kind("signal");
  ev.set_node_id(e.node_id);
  ev.set_job_id(e.job_id);
  ev.set_reason(absl::StrCat(TriggerName(e.trigger), " reported: ", req.ShortDebugString()));
  std::vector<api::Event> out;
  RETURN_IF_ERROR(RecordLocked(std::move(ev), &out));
  RETURN_IF_ERROR(HandleLocked(e, &out));
  if (e.trigger == Trigger::kSpotNotice) {
    // The cloud takes the node away: nothing new is placed or restored there from now on.
    if (const Node* n = cluster_->FindNode(e.node_id); n != nullptr && n->health == NodeHealth::kHealthy) {
      RETURN_IF_ERROR(cluster_->SetNodeHealth(e.node_id, NodeHealth::kDraining));
      RETURN_IF_ERROR(SaveNodeLocked(e.node_id));
      api::Event dr;
      dr.set_kind("node-draining");
      dr.set_node_id(e.node_id);
      dr.set_reason(absl::StrFormat("spot reclaim announced in %.0f s: nothing new is placed there", e.notice_s));
      RETURN_IF_ERROR(RecordLocked(std::move(dr), &out));
    }
  }
  for (api::Event& o : out) *resp->add_events() = std::move(o);
  return absl::OkStatus();
}

absl::Status Controller::RecordCheckpointLocked(const api::NodeSignal& req, api::ReportSignalResponse* resp) {
  Job* job = cluster_->MutableJob(req.job_id());
  if (job == nullptr) {
    return absl::NotFoundError(absl::StrCat("signal checkpoint: unknown job `", req.job_id(), "`"));
  }
  if (req.checkpoint_time() <= 0 || req.checkpoint_id().empty()) {
    return absl::InvalidArgumentError("signal checkpoint: give checkpoint_id and checkpoint_time (unix seconds)");
  }
  // Only the node the job is placed on speaks for it: a node cut off by a partition may still
  // checkpoint a copy the controller has since restored elsewhere.
  if (req.node_id() != job->node_id) {
    CAIRN_LOG_WARN("controller {}: checkpoint {} of job {} reported by node {}, but the job is placed on {}: ignored",
                   options_.id, req.checkpoint_id(), req.job_id(), req.node_id(),
                   job->node_id.empty() ? "no node" : job->node_id);
    return absl::OkStatus();
  }
  // A report the node repeats (a lost reply) is recorded once.
  for (const CheckpointRecord& c : job->checkpoints) {
    if (c.time == req.checkpoint_time()) return absl::OkStatus();
  }
  CheckpointRecord rec{req.checkpoint_time(), WorkDoneAt(*job, std::min(req.checkpoint_time(), Now()))};
  auto at = std::upper_bound(job->checkpoints.begin(), job->checkpoints.end(), rec.time,
                             [](double t, const CheckpointRecord& c) { return t < c.time; });
  job->checkpoints.insert(at, rec);
  KeepNewestCheckpoints(job);
  RETURN_IF_ERROR(SaveJobLocked(req.job_id()));
  api::Event ev;
  ev.set_kind("checkpoint");
  ev.set_node_id(req.node_id());
  ev.set_job_id(req.job_id());
  ev.set_reason(absl::StrFormat("checkpoint %s complete on %s at t=%.3f, in storage other nodes share", req.checkpoint_id(),
                                req.node_id(), req.checkpoint_time()));
  std::vector<api::Event> out;
  RETURN_IF_ERROR(RecordLocked(std::move(ev), &out));
  for (api::Event& o : out) *resp->add_events() = std::move(o);
  return absl::OkStatus();
}

absl::Status Controller::SubmitJob(const api::SubmitJobRequest& req, api::SubmitJobResponse* resp) {
  std::lock_guard<std::mutex> lock(mu_);
  RETURN_IF_ERROR(RequireLeaderLocked());
  RETURN_IF_ERROR(Annotate(CheckSubmittedJob(req.spec()), "submit"));
  if (dispatcher_->RunsCommands() && req.spec().command().empty()) {
    return absl::InvalidArgumentError(
        "submit: no command: the node daemons run the command a job names (cairn submit [OPTIONS] -- CMD ARGS...)");
  }
  api::JobSpec given = req.spec();
  if (given.id().empty()) {
    do given.set_id(NewJobId());
    while (cluster_->FindJob(given.id()) != nullptr);
  } else if (const Job* old = cluster_->FindJob(given.id()); old != nullptr) {
    // The same submission again (a client retrying after a lost reply or a leader change) gets
    // the job as it is; a different one under the same id is refused.
    if (!google::protobuf::util::MessageDifferencer::Equals(specs_[given.id()], given)) {
      return absl::AlreadyExistsError(absl::StrCat("submit ", given.id(),
                                                   ": a different job with this id exists; pick another id"));
    }
    resp->set_job_id(given.id());
    resp->set_node_id(old->node_id);
    resp->set_reason(old->node_id.empty() ? "already submitted; still waiting for a node"
                                          : absl::StrCat("already submitted; placed on ", old->node_id));
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(JobSpec spec, FromApi(given));
  spec.submit_time = Now();
  if (spec.sla.deadline > 0 && spec.sla.deadline <= spec.submit_time) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "submit %s: the deadline (%.0f) is already past (now %.0f)", spec.id, spec.sla.deadline, spec.submit_time));
  }
  const std::string id = spec.id;
  std::string what = Describe(spec);
  RETURN_IF_ERROR(cluster_->AddJob(std::move(spec)));
  specs_[id] = given;
  // Placement stores the job (bound or pending) in one write: until it succeeds the job does
  // not exist, so a failed submit can be retried as it was.
  std::string node, reason;
  api::Event placed;
  absl::Status s = PlaceLocked(id, &node, &reason, &placed);
  if (!s.ok()) {
    // Whatever failed, the model goes back to what the store holds.
    if (leader_ && !LoadLocked().ok()) DropLocked();
    return s;
  }
  api::Event ev;
  ev.set_kind("job-submitted");
  ev.set_job_id(id);
  ev.set_reason(what);
  RETURN_IF_ERROR(RecordLocked(std::move(ev)));
  RETURN_IF_ERROR(RecordLocked(std::move(placed)));
  resp->set_job_id(id);
  resp->set_node_id(node);
  resp->set_reason(reason);
  return absl::OkStatus();
}

namespace {
bool WaitsForNode(const Job& job) {
  return job.node_id.empty() && (job.state == JobState::kPending || job.state == JobState::kSuspended);
}
}  // namespace

std::string Controller::WhyWaiting(const Job& job) const {
  Placer placer(*cluster_);
  PlacementRequest pr;
  pr.job = &job;
  Placement p = placer.Explain(pr);
  if (!p.node_id.empty()) return "";  // a node can take it: placed at the next round
  if (p.candidates.empty()) return "no node is registered";
  std::string why = "no node fits: ";
  constexpr size_t kNamed = 3;
  for (size_t i = 0; i < p.candidates.size() && i < kNamed; ++i) {
    absl::StrAppend(&why, i == 0 ? "" : "; ", p.candidates[i].node_id, ": ", p.candidates[i].rejected_because);
  }
  if (p.candidates.size() > kNamed) absl::StrAppend(&why, "; and ", p.candidates.size() - kNamed, " more");
  return why;
}

api::JobStatus Controller::JobStatusLocked(const Job& job, bool explain_wait) const {
  api::JobStatus s;
  auto given = specs_.find(job.spec.id);
  *s.mutable_spec() = given != specs_.end() ? given->second : ToApi(job.spec);
  std::string state(JobStateName(job.state));
  if (job.state == JobState::kRunning) {
    auto it = started_.find(job.spec.id);
    if (it == started_.end() || !it->second) state = "placed";
  }
  s.set_state(state);
  s.set_node_id(job.node_id);
  s.set_submit_time(job.spec.submit_time);
  if (WaitsForNode(job)) {
    s.set_waiting(explain_wait ? WhyWaiting(job)
                               : absl::StrCat("not worked out here (too many jobs wait): cairn job explain ",
                                              job.spec.id, " says why"));
  }
  if (auto it = pending_action_.find(job.spec.id); it != pending_action_.end()) {
    s.set_pending_action(it->second);
  } else if (auto f = in_flight_.find(job.spec.id); f != in_flight_.end()) {
    // A decision being carried out, or found by this leader and not resolved yet.
    s.set_pending_action(absl::StrCat("in flight: ", f->second.action(),
                                      f->second.to_node().empty() ? "" : " to " + f->second.to_node(), " (",
                                      f->second.rule(), ")"));
  }
  return s;
}

absl::Status Controller::ClusterStatus(api::ClusterStatusResponse* resp) {
  std::lock_guard<std::mutex> lock(mu_);
  RETURN_IF_ERROR(RequireLeaderLocked());
  resp->set_controller_id(options_.id);
  resp->set_store(store_->Describe());
  resp->set_dispatcher(dispatcher_->Describe());
  auto now = Clock::now();
  cluster_->ForEachNode([&](const Node& n, uint64_t) {
    api::NodeStatus* s = resp->add_nodes();
    *s->mutable_spec() = ToApi(n.spec, n.interruptions_per_hour);
    s->set_health(std::string(HealthName(n.health)));
    Resources free = n.Free();
    s->set_free_cpus(free.cpus);
    s->set_free_memory_mb(free.memory_mb);
    s->set_free_gpus(free.gpus);
    for (const std::string& j : n.job_ids) s->add_job_ids(j);
    auto it = last_heartbeat_.find(n.spec.id);
    if (it != last_heartbeat_.end()) {
      s->set_seconds_since_heartbeat(std::chrono::duration<double>(now - it->second).count());
    }
  });
  // Why each waiting job waits costs a placement explain over every node: the first kExplained
  // are told, the rest point to `cairn job explain` (the status is taken under the lock).
  constexpr int kExplained = 200;
  int explained = 0;
  for (const std::string& id : cluster_->SortedJobIds()) {
    const Job& job = *cluster_->FindJob(id);
    *resp->add_jobs() = JobStatusLocked(job, !WaitsForNode(job) || ++explained <= kExplained);
  }
  return absl::OkStatus();
}

absl::Status Controller::ExplainJob(const api::ExplainJobRequest& req, api::ExplainJobResponse* resp) {
  std::lock_guard<std::mutex> lock(mu_);
  RETURN_IF_ERROR(RequireLeaderLocked());
  const Job* job = cluster_->FindJob(req.job_id());
  if (job == nullptr) {
    return absl::NotFoundError(absl::StrCat("explain: no job `", req.job_id(),
                                            "`; `cairn cluster status` lists the jobs"));
  }
  Placer placer(*cluster_);
  PlacementRequest pr;
  pr.job = job;
  Placement p = placer.Explain(pr);
  *resp->mutable_job() = JobStatusLocked(*job);
  resp->set_best_node_id(p.node_id);
  for (const CandidateScore& c : p.candidates) *resp->add_candidates() = ToApi(c);
  std::string text;
  if (!job->node_id.empty() && job->node_id != p.node_id) {
    text = absl::StrCat("job ", job->spec.id, " runs on ", job->node_id, "; placement would now choose ",
                        p.node_id.empty() ? "no node" : p.node_id,
                        " (whether moving pays is the cheaper-capacity rule's decision: `cairn events --job ",
                        job->spec.id, "`)\n");
  }
  absl::StrAppend(&text, FormatExplain(*job, p));
  if (auto it = pending_action_.find(job->spec.id); it != pending_action_.end()) {
    absl::StrAppend(&text, "pending action: ", it->second, "\n");
  }
  resp->set_text(text);
  return absl::OkStatus();
}

absl::Status Controller::ListEvents(const api::ListEventsRequest& req, api::ListEventsResponse* resp) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    RETURN_IF_ERROR(RequireLeaderLocked());
  }
  ASSIGN_OR_RETURN(auto events, store_->List(kEvents));
  std::vector<api::Event> out;
  for (const auto& [key, value] : events) {
    api::Event ev;
    if (!ev.ParseFromString(value)) return absl::DataLossError(absl::StrCat("store key ", key, ": not an event"));
    if (ev.seq() <= req.after_seq()) continue;
    if (!req.job_id().empty() && ev.job_id() != req.job_id()) continue;
    if (!req.node_id().empty() && ev.node_id() != req.node_id() && ev.target_node_id() != req.node_id()) continue;
    out.push_back(std::move(ev));
  }
  size_t first = req.limit() > 0 && out.size() > req.limit() ? out.size() - req.limit() : 0;
  for (size_t i = first; i < out.size(); ++i) *resp->add_events() = std::move(out[i]);
  return absl::OkStatus();
}

absl::Status Controller::ScaleDown(const api::ScaleDownRequest& req, api::ScaleDownResponse* resp) {
  std::lock_guard<std::mutex> lock(mu_);
  RETURN_IF_ERROR(RequireLeaderLocked());
  if (req.gpus() <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("scale-down: ", req.gpus(), " GPUs; give a number > 0"));
  }
  std::vector<api::Event> out;
  api::Event ev;
  ev.set_kind("scale-down-requested");
  ev.set_reason(absl::StrCat("free ", req.gpus(), " GPU(s)"));
  RETURN_IF_ERROR(RecordLocked(std::move(ev), &out));
  Event e;
  e.trigger = Trigger::kScaleDown;
  e.time = Now();
  e.gpus_to_free = req.gpus();
  RETURN_IF_ERROR(HandleLocked(e, &out));
  for (api::Event& o : out) *resp->add_events() = std::move(o);
  return absl::OkStatus();
}

absl::Status Controller::CancelJob(const api::CancelJobRequest& req, api::CancelJobResponse* resp) {
  std::lock_guard<std::mutex> lock(mu_);
  RETURN_IF_ERROR(RequireLeaderLocked());
  const Job* job = cluster_->FindJob(req.job_id());
  if (job == nullptr) {
    return absl::NotFoundError(absl::StrCat("cancel: no job `", req.job_id(),
                                            "`; `cairn cluster status` lists the jobs"));
  }
  api::Event ev;
  ev.set_kind("job-cancelled");
  ev.set_job_id(req.job_id());
  ev.set_node_id(job->node_id);
  if (!job->node_id.empty() && started_[req.job_id()]) {
    DispatchResult r = dispatcher_->StopJob(*job, *cluster_->FindNode(job->node_id));
    ev.set_dispatch(r.note);
    if (r.failed) {
      // The node was asked and could not stop it: the job still runs there, so it stays known.
      return absl::FailedPreconditionError(absl::StrCat("cancel ", req.job_id(), ": node ", job->node_id,
                                                        " did not stop it: ", r.note, "; try again"));
    }
    ev.set_reason(absl::StrCat("cancelled by the user; stopped on ", job->node_id));
  } else {
    ev.set_reason(job->node_id.empty() ? "cancelled by the user while waiting for a node"
                                       : absl::StrCat("cancelled by the user before it started on ", job->node_id));
  }
  // The store first: a failed delete leaves the job as the store has it.
  absl::Status s = store_->Delete(absl::StrCat(kJobs, req.job_id()));
  if (!s.ok()) return StoreFailedLocked(s);
  RETURN_IF_ERROR(cluster_->RemoveJob(req.job_id()));
  pending_action_.erase(req.job_id());
  started_.erase(req.job_id());
  specs_.erase(req.job_id());
  in_flight_.erase(req.job_id());
  std::vector<api::Event> out;
  RETURN_IF_ERROR(RecordLocked(std::move(ev), &out));
  for (api::Event& o : out) *resp->add_events() = std::move(o);
  // Its resources are free: jobs waiting for them may now fit.
  return PlacePendingLocked();
}

absl::Status Controller::RemoveNode(const api::RemoveNodeRequest& req, api::RemoveNodeResponse* resp) {
  std::lock_guard<std::mutex> lock(mu_);
  RETURN_IF_ERROR(RequireLeaderLocked());
  const Node* n = cluster_->FindNode(req.node_id());
  if (n == nullptr) {
    return absl::NotFoundError(absl::StrCat("remove node: no node `", req.node_id(),
                                            "`; `cairn cluster status` lists the nodes"));
  }
  if (!n->job_ids.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "remove node ", req.node_id(), ": jobs ", absl::StrJoin(n->job_ids, ", "),
        " are bound to it; cancel them (`cairn job cancel JOB`) or wait until they are moved, then remove it"));
  }
  absl::Status s = store_->Delete(absl::StrCat(kNodes, req.node_id()));
  if (!s.ok()) return StoreFailedLocked(s);
  RETURN_IF_ERROR(cluster_->RemoveNode(req.node_id()));
  last_heartbeat_.erase(req.node_id());
  registered_seq_.erase(req.node_id());
  api::Event ev;
  ev.set_kind("node-removed");
  ev.set_node_id(req.node_id());
  ev.set_reason("removed by the user; no job was bound to it");
  std::vector<api::Event> out;
  RETURN_IF_ERROR(RecordLocked(std::move(ev), &out));
  for (api::Event& o : out) *resp->add_events() = std::move(o);
  return absl::OkStatus();
}

api::LeaderResponse Controller::Leader() {
  std::lock_guard<std::mutex> lock(mu_);
  api::LeaderResponse r;
  r.set_leader(leader_);
  r.set_controller_id(options_.id);
  r.set_leader_id(leader_id_);
  return r;
}

}  // namespace cairn::controller
