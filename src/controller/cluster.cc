#include "controller/cluster.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace cairn::controller {

absl::string_view MarketName(Market m) { return m == Market::kSpot ? "spot" : "on-demand"; }

absl::string_view HealthName(NodeHealth h) {
  switch (h) {
    case NodeHealth::kHealthy: return "healthy";
    case NodeHealth::kDraining: return "draining";
    case NodeHealth::kLost: return "lost";
  }
  return "?";
}

absl::string_view JobKindName(JobKind k) { return k == JobKind::kBatch ? "batch" : "service"; }

absl::string_view JobStateName(JobState s) {
  switch (s) {
    case JobState::kPending: return "pending";
    case JobState::kRunning: return "running";
    case JobState::kSuspended: return "suspended";
    case JobState::kDone: return "done";
  }
  return "?";
}

const CheckpointRecord* Job::LatestCheckpoint(double before) const {
  const CheckpointRecord* best = nullptr;
  for (const CheckpointRecord& c : checkpoints) {
    if (c.time < before) best = &c;
  }
  return best;
}

double Slack(const Resources& free, const Resources& capacity, const PackingWeights& w) {
  double s = 0;
  if (capacity.gpus > 0) s += w.gpus * free.gpus / capacity.gpus;
  if (capacity.memory_mb > 0) s += w.memory * static_cast<double>(free.memory_mb) / capacity.memory_mb;
  if (capacity.cpus > 0) s += w.cpus * free.cpus / capacity.cpus;
  return s;
}

std::string Cluster::PoolKey(const Node& n) const {
  // Every attribute placement reads except free resources; two nodes with equal keys score the
  // same up to their packing term.
  std::string key = absl::StrFormat("%s|%d|%s|%s|%.9g|%.9g|%.6g|%d|%d|%.12g", n.spec.gpu_type,
                                    static_cast<int>(n.spec.market), n.spec.zone, n.spec.cloud,
                                    n.spec.price_per_hour, n.spec.capacity.cpus,
                                    static_cast<double>(n.spec.capacity.memory_mb),
                                    n.spec.capacity.gpus, static_cast<int>(n.health),
                                    n.interruptions_per_hour);
  for (const auto& [k, v] : n.spec.labels) absl::StrAppend(&key, "|", k, "=", v);
  // The CPU decides which jobs may go there (placement's CpuRejection).
  absl::StrAppend(&key, "|cpu", n.spec.cpu_level);
  for (const std::string& f : n.spec.cpu_features) absl::StrAppend(&key, ",", f);
  // And its addresses, which jobs with a service address (placement's AddressRejection).
  absl::StrAppend(&key, "|addr");
  for (const IpPrefix& a : n.spec.addresses) absl::StrAppend(&key, ",", IpPrefixText(a));
  for (const std::string& d : n.spec.devices) absl::StrAppend(&key, ",@", d);
  return key;
}

void Cluster::IndexInsert(size_t slot) {
  Slot& s = slots_[slot];
  s.pool_key = PoolKey(*s.node);
  s.slack = Slack(s.node->Free(), s.node->spec.capacity, packing_);
  Pool& pool = pools_[s.pool_key];
  if (pool.representative == nullptr) pool.representative = s.node.get();
  pool.by_slack.emplace(s.slack, s.order, slot);
}

void Cluster::IndexErase(size_t slot) {
  Slot& s = slots_[slot];
  auto it = pools_.find(s.pool_key);
  if (it == pools_.end()) return;
  Pool& pool = it->second;
  pool.by_slack.erase({s.slack, s.order, slot});
  if (pool.by_slack.empty()) {
    pools_.erase(it);
  } else if (pool.representative == s.node.get()) {
    pool.representative = slots_[std::get<2>(*pool.by_slack.begin())].node.get();
  }
}

Node* Cluster::MutableNode(absl::string_view id, size_t* slot) {
  auto it = index_.find(id);
  if (it == index_.end()) return nullptr;
  if (slot) *slot = it->second;
  return slots_[it->second].node.get();
}

const Node* Cluster::FindNode(absl::string_view id) const {
  auto it = index_.find(id);
  return it == index_.end() ? nullptr : slots_[it->second].node.get();
}

const Job* Cluster::FindJob(absl::string_view id) const {
  auto it = jobs_.find(id);
  return it == jobs_.end() ? nullptr : &it->second;
}

Job* Cluster::MutableJob(absl::string_view id) {
  auto it = jobs_.find(id);
  return it == jobs_.end() ? nullptr : &it->second;
}

absl::Status Cluster::AddNode(NodeSpec spec) {
  if (spec.id.empty()) return absl::InvalidArgumentError("add node: empty node id");
  if (spec.capacity.cpus < 0 || spec.capacity.memory_mb < 0 || spec.capacity.gpus < 0 ||
      spec.price_per_hour < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("add node ", spec.id, ": negative capacity or price"));
  }
  if (index_.contains(spec.id)) {
    return absl::AlreadyExistsError(absl::StrCat("add node ", spec.id, ": already registered"));
  }
  size_t slot;
  if (!free_slots_.empty()) {
    slot = free_slots_.back();
    free_slots_.pop_back();
  } else {
    slot = slots_.size();
    slots_.emplace_back();
  }
  Slot& s = slots_[slot];
  s.node = std::make_unique<Node>();
  s.node->spec = std::move(spec);
  s.order = next_order_++;
  index_.emplace(s.node->spec.id, slot);
  IndexInsert(slot);
  return absl::OkStatus();
}

absl::Status Cluster::RemoveNode(absl::string_view node_id) {
  size_t slot;
  Node* n = MutableNode(node_id, &slot);
  if (n == nullptr) return absl::NotFoundError(absl::StrCat("remove node ", node_id, ": unknown node"));
  if (!n->job_ids.empty()) {
    return absl::FailedPreconditionError(absl::StrCat("remove node ", node_id, ": ",
                                                      n->job_ids.size(), " job(s) still bound"));
  }
  IndexErase(slot);
  index_.erase(n->spec.id);
  slots_[slot].node.reset();
  free_slots_.push_back(slot);
  return absl::OkStatus();
}

absl::Status Cluster::SetNodeHealth(absl::string_view node_id, NodeHealth health) {
  size_t slot;
  Node* n = MutableNode(node_id, &slot);
  if (n == nullptr) return absl::NotFoundError(absl::StrCat("set health ", node_id, ": unknown node"));
  IndexErase(slot);
  n->health = health;
  IndexInsert(slot);
  return absl::OkStatus();
}

absl::Status Cluster::SetInterruptionRate(absl::string_view node_id, double per_hour) {
  size_t slot;
  Node* n = MutableNode(node_id, &slot);
  if (n == nullptr) return absl::NotFoundError(absl::StrCat("set rate ", node_id, ": unknown node"));
  if (n->interruptions_per_hour == per_hour) return absl::OkStatus();
  IndexErase(slot);
  n->interruptions_per_hour = per_hour;
  IndexInsert(slot);
  return absl::OkStatus();
}

absl::Status Cluster::SetPrice(absl::string_view node_id, double price_per_hour) {
  size_t slot;
  Node* n = MutableNode(node_id, &slot);
  if (n == nullptr) return absl::NotFoundError(absl::StrCat("set price ", node_id, ": unknown node"));
  IndexErase(slot);
  n->spec.price_per_hour = price_per_hour;
  IndexInsert(slot);
  return absl::OkStatus();
}

absl::Status Cluster::AddJob(JobSpec spec) {
  if (spec.id.empty()) return absl::InvalidArgumentError("add job: empty job id");
  if (spec.request.cpus < 0 || spec.request.memory_mb < 0 || spec.request.gpus < 0 ||
      spec.work_s < 0) {
    return absl::InvalidArgumentError(absl::StrCat("add job ", spec.id, ": negative request"));
  }
  if (jobs_.contains(spec.id)) {
    return absl::AlreadyExistsError(absl::StrCat("add job ", spec.id, ": already submitted"));
  }
  std::string id = spec.id;
  Job job;
  job.spec = std::move(spec);
  jobs_.emplace(std::move(id), std::move(job));
  return absl::OkStatus();
}

absl::Status Cluster::RemoveJob(absl::string_view job_id) {
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return absl::NotFoundError(absl::StrCat("remove job ", job_id, ": unknown job"));
  if (!it->second.node_id.empty()) {
    absl::Status st = Unbind(job_id, JobState::kDone);
    if (!st.ok()) return st;
  }
  jobs_.erase(it);
  return absl::OkStatus();
}

absl::Status Cluster::Bind(absl::string_view job_id, absl::string_view node_id, bool runs_there) {
  Job* job = MutableJob(job_id);
  if (job == nullptr) return absl::NotFoundError(absl::StrCat("bind ", job_id, ": unknown job"));
  size_t slot;
  Node* n = MutableNode(node_id, &slot);
  if (n == nullptr) {
    return absl::NotFoundError(absl::StrCat("bind ", job_id, " to ", node_id, ": unknown node"));
  }
  if (!job->node_id.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("bind ", job_id, " to ", node_id, ": already bound to ", job->node_id));
  }
  if (n->health != NodeHealth::kHealthy && !runs_there) {
    return absl::FailedPreconditionError(absl::StrCat("bind ", job_id, " to ", node_id,
                                                      ": node is ", HealthName(n->health)));
  }
  if (!job->spec.request.FitsIn(n->Free()) && !runs_there) {
    return absl::ResourceExhaustedError(
        absl::StrCat("bind ", job_id, " to ", node_id, ": request does not fit the free resources"));
  }
  IndexErase(slot);
  n->allocated += job->spec.request;
  n->job_ids.push_back(job->spec.id);
  IndexInsert(slot);
  job->node_id = n->spec.id;
  job->state = JobState::kRunning;
  // Its processes choose their code by the CPU they start on: from now on they need it.
  if (job->cpu_features.empty() && job->spec.cpu_baseline == 0) job->cpu_features = n->spec.cpu_features;
  return absl::OkStatus();
}

absl::Status Cluster::Unbind(absl::string_view job_id, JobState next) {
  Job* job = MutableJob(job_id);
  if (job == nullptr) return absl::NotFoundError(absl::StrCat("unbind ", job_id, ": unknown job"));
  if (job->node_id.empty()) {
    return absl::FailedPreconditionError(absl::StrCat("unbind ", job_id, ": not bound"));
  }
  size_t slot;
  Node* n = MutableNode(job->node_id, &slot);
  if (n != nullptr) {
    IndexErase(slot);
    n->allocated -= job->spec.request;
    n->job_ids.erase(std::remove(n->job_ids.begin(), n->job_ids.end(), job->spec.id),
                     n->job_ids.end());
    IndexInsert(slot);
  }
  job->node_id.clear();
  job->state = next;
  return absl::OkStatus();
}

std::vector<std::string> Cluster::SortedJobIds() const {
  std::vector<std::string> ids;
  ids.reserve(jobs_.size());
  for (const auto& [id, job] : jobs_) ids.push_back(id);
  std::sort(ids.begin(), ids.end());
  return ids;
}

}  // namespace cairn::controller
