#include "controller/service/convert.h"

#include "absl/strings/str_cat.h"
#include "common/cpu_levels.h"

namespace cairn::controller {

absl::StatusOr<NodeSpec> FromApi(const api::NodeSpec& in) {
  auto bad = [&](absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat("node ", in.id().empty() ? "(no id)" : in.id(), ": ", what));
  };
  if (in.id().empty()) return bad("empty node id; give the node a name");
  if (in.cpus() <= 0) return bad("cpus must be > 0");
  if (in.memory_mb() <= 0) return bad("memory_mb must be > 0");
  if (in.gpus() < 0) return bad("gpus must be >= 0");
  if (in.gpus() > 0 && in.gpu_type().empty()) return bad("a node with GPUs needs a gpu_type");
  if (in.price_per_hour() < 0) return bad("price_per_hour must be >= 0");
  if (in.interruptions_per_hour() < 0) return bad("interruptions_per_hour must be >= 0");
  NodeSpec s;
  s.id = in.id();
  s.capacity = {in.cpus(), in.memory_mb(), in.gpus()};
  s.gpu_type = in.gpu_type();
  s.price_per_hour = in.price_per_hour();
  s.market = in.spot() ? Market::kSpot : Market::kOnDemand;
  s.zone = in.zone();
  s.cloud = in.cloud();
  s.labels.insert(in.labels().begin(), in.labels().end());
  if (in.cpu_level() < 0 || in.cpu_level() > 4) return bad("cpu_level must be 0 (unknown) or 1..4");
  s.cpu_level = in.cpu_level();
  s.cpu_features.insert(in.cpu_features().begin(), in.cpu_features().end());
  if (in.addresses_size() > 1024) return bad("more than 1024 addresses");
  for (const std::string& a : in.addresses()) {
    absl::StatusOr<IpPrefix> p = ParseIpPrefix(a);
    if (!p.ok()) return bad(absl::StrCat("address ", p.status().message()));
    s.addresses.push_back(*p);
  }
  if (in.devices_size() > 1024) return bad("more than 1024 devices");
  s.devices.insert(in.devices().begin(), in.devices().end());
  return s;
}

absl::StatusOr<JobSpec> FromApi(const api::JobSpec& in) {
  auto bad = [&](absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat("job ", in.id().empty() ? "(new)" : in.id(), ": ", what));
  };
  if (in.cpus() < 0 || in.memory_mb() < 0 || in.gpus() < 0) return bad("negative resources");
  if (in.cpus() == 0 && in.memory_mb() == 0 && in.gpus() == 0) {
    return bad("no resources requested; give cpus, memory_mb or gpus");
  }
  if (in.service() && in.deadline() > 0) return bad("a deadline is for batch jobs; services take max_downtime_s");
  if (!in.service() && in.max_downtime_s() > 0) return bad("max_downtime_s is for services; batch jobs take a deadline");
  if (in.budget_usd() < 0 || in.work_s() < 0 || in.max_downtime_s() < 0) return bad("negative budget, work or downtime");
  const api::CheckpointPolicy& c = in.checkpoint();
  if (c.interval_s() < 0 || c.pause_s() < 0 || c.notice_checkpoint_s() < 0 || c.bytes() < 0 || c.restore_s() < 0) {
    return bad("negative checkpoint policy value");
  }
  JobSpec s;
  s.id = in.id();
  s.request = {in.cpus(), in.memory_mb(), in.gpus()};
  s.priority = in.priority();
  s.kind = in.service() ? JobKind::kService : JobKind::kBatch;
  s.sla.deadline = in.deadline();
  s.sla.max_downtime_s = in.max_downtime_s();
  s.checkpoint = {c.interval_s(), c.pause_s(), c.notice_checkpoint_s(), c.bytes(), c.restore_s(), c.on_notice()};
  s.budget_usd = in.budget_usd();
  s.work_s = in.work_s();
  s.downtime_cost_per_hour = in.downtime_cost_per_hour();
  s.gpu_type = in.gpu_type();
  s.node_selector.insert(in.node_selector().begin(), in.node_selector().end());
  s.command.assign(in.command().begin(), in.command().end());
  s.user = in.user();
  s.group = in.group();
  s.rank = in.rank();
  s.addresses.assign(in.addresses().begin(), in.addresses().end());
  if (!in.cpu_baseline().empty()) {
    absl::StatusOr<int> level = ParseBaseline(in.cpu_baseline());
    if (!level.ok()) return bad(level.status().message());
    s.cpu_baseline = *level;
  }
  return s;
}

api::NodeSpec ToApi(const NodeSpec& s, double interruptions_per_hour) {
  api::NodeSpec o;
  o.set_id(s.id);
  o.set_cpus(s.capacity.cpus);
  o.set_memory_mb(s.capacity.memory_mb);
  o.set_gpus(s.capacity.gpus);
  o.set_gpu_type(s.gpu_type);
  o.set_price_per_hour(s.price_per_hour);
  o.set_spot(s.market == Market::kSpot);
  o.set_zone(s.zone);
  o.set_cloud(s.cloud);
  o.mutable_labels()->insert(s.labels.begin(), s.labels.end());
  o.set_interruptions_per_hour(interruptions_per_hour);
  o.set_cpu_level(s.cpu_level);
  for (const std::string& f : s.cpu_features) o.add_cpu_features(f);
  for (const IpPrefix& a : s.addresses) o.add_addresses(IpPrefixText(a));
  for (const std::string& d : s.devices) o.add_devices(d);
  return o;
}

api::JobSpec ToApi(const JobSpec& s) {
  api::JobSpec o;
  o.set_id(s.id);
  o.set_cpus(s.request.cpus);
  o.set_memory_mb(s.request.memory_mb);
  o.set_gpus(s.request.gpus);
  o.set_gpu_type(s.gpu_type);
  o.set_priority(s.priority);
  o.set_service(s.kind == JobKind::kService);
  o.set_deadline(s.sla.deadline);
  o.set_max_downtime_s(s.sla.max_downtime_s);
  api::CheckpointPolicy* c = o.mutable_checkpoint();
  c->set_interval_s(s.checkpoint.interval_s);
  c->set_pause_s(s.checkpoint.pause_s);
  c->set_notice_checkpoint_s(s.checkpoint.notice_checkpoint_s);
  c->set_bytes(s.checkpoint.bytes);
  c->set_restore_s(s.checkpoint.restore_s);
  c->set_on_notice(s.checkpoint.on_notice);
  o.set_budget_usd(s.budget_usd);
  o.set_work_s(s.work_s);
  o.set_downtime_cost_per_hour(s.downtime_cost_per_hour);
  o.mutable_node_selector()->insert(s.node_selector.begin(), s.node_selector.end());
  for (const std::string& a : s.command) o.add_command(a);
  o.set_user(s.user);
  o.set_group(s.group);
  o.set_rank(s.rank);
  for (const std::string& a : s.addresses) o.add_addresses(a);
  if (s.cpu_baseline > 0) o.set_cpu_baseline(LevelName(s.cpu_baseline));
  return o;
}

api::Candidate ToApi(const CandidateScore& c) {
  api::Candidate o;
  o.set_node_id(c.node_id);
  o.set_feasible(c.feasible);
  o.set_rejected_because(c.rejected_because);
  o.set_price_share(c.price_share);
  o.set_perf(c.perf);
  o.set_effective_price(c.effective_price);
  o.set_interruptions_per_hour(c.interruptions_per_hour);
  o.set_interruption_cost_h(c.interruption_cost_h);
  o.set_risk(c.risk);
  o.set_packing(c.packing);
  o.set_stranding(c.stranding);
  o.set_total(c.total);
  return o;
}

NodeHealth HealthFromName(absl::string_view n) {
  if (n == "draining") return NodeHealth::kDraining;
  if (n == "lost") return NodeHealth::kLost;
  return NodeHealth::kHealthy;
}

JobState JobStateFromName(absl::string_view n) {
  if (n == "running") return JobState::kRunning;
  if (n == "suspended") return JobState::kSuspended;
  if (n == "done") return JobState::kDone;
  return JobState::kPending;
}

SuspendReason SuspendReasonFromName(absl::string_view n) {
  if (n == "waiting-for-cheap-capacity") return SuspendReason::kWaitingForCheapCapacity;
  if (n == "scale-down") return SuspendReason::kScaleDown;
  return SuspendReason::kNone;
}

absl::string_view SuspendReasonName(SuspendReason r) {
  switch (r) {
    case SuspendReason::kWaitingForCheapCapacity: return "waiting-for-cheap-capacity";
    case SuspendReason::kScaleDown: return "scale-down";
    case SuspendReason::kNone: return "";
  }
  return "";
}

}  // namespace cairn::controller
