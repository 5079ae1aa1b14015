#include "controller/placement.h"

#include <algorithm>
#include <cmath>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_format.h"
#include "common/cpu_levels.h"

namespace cairn::controller {

double PerfTable::Factor(absl::string_view gpu_type) const {
  auto it = factor.find(std::string(gpu_type));
  return it == factor.end() ? 1.0 : it->second;
}

PerfTable PerfTable::Default() {
  // Relative training throughput, V100 = 1.0 (rounded from public ResNet-50/BERT training
  // benchmarks; see docs/scheduling.md). Operators override these with measured factors.
  PerfTable t;
  t.factor = {{"K80", 0.2}, {"T4", 0.45}, {"V100", 1.0}, {"A10G", 0.9},
              {"L4", 0.8},  {"A100", 2.2}, {"H100", 4.0}, {"H200", 4.5}};
  return t;
}

namespace {

double RequestSlack(const Resources& req, const Resources& cap, const PackingWeights& w) {
  return Slack(req, cap, w);
}

bool Excluded(const PlacementRequest& r, const std::string& id) {
  return r.exclude_nodes.count(id) != 0;
}

// Why the node's CPU cannot run the job (engine/machine: a restore there would be refused, or
// the job would die of SIGILL); empty if it can, or if the node did not say what its CPU has.
std::string CpuRejection(const Job& job, const Node& n) {
  if (n.spec.cpu_level == 0 && n.spec.cpu_features.empty()) return "";
  if (job.spec.cpu_baseline > 0) {
    if (n.spec.cpu_level >= job.spec.cpu_baseline) return "";
    return absl::StrCat("its CPU is ", LevelName(n.spec.cpu_level), ", the job keeps to ",
                        LevelName(job.spec.cpu_baseline));
  }
  std::vector<std::string> missing = Missing(job.cpu_features, n.spec.cpu_features);
  if (missing.empty()) return "";
  if (missing.size() > 4) missing.resize(4), missing.push_back("...");
  return absl::StrCat("its CPU lacks ", absl::StrJoin(missing, ", "),
                      ", which the job may use (submit it with --cpu-baseline to move it between CPUs)");
}

// Why the job's service addresses cannot go on the node (the daemon would refuse to start or
// restore the job there: no interface in the address's subnet, or no device it names); empty if
// they can, or if the node did not say what its addresses are.
std::string AddressRejection(const Job& job, const Node& n) {
  for (const std::string& text : job.spec.addresses) {
    absl::StatusOr<IpPrefix> a = ParseIpPrefix(text);
    if (!a.ok()) continue;  // (refused at submit: CheckSubmittedJob parses each)
    if (std::string why = AddressMismatch(*a, n.spec.addresses, n.spec.devices); !why.empty()) return why;
  }
  return "";
}

// The first part of `req` that `have` lacks ("needs 4 GPU, 1 free"; `of_have` names what `have`
// is: "free", "in all"); empty when it fits.
std::string FitRejection(const Resources& req, const Resources& have, absl::string_view of_have = "free") {
  if (req.gpus > have.gpus) return absl::StrCat("needs ", req.gpus, " GPU, ", have.gpus, " ", of_have);
  if (req.memory_mb > have.memory_mb) {
    return absl::StrCat("needs ", req.memory_mb, " MB, ", have.memory_mb, " ", of_have);
  }
  if (req.cpus > have.cpus + 1e-9) return absl::StrFormat("needs %.1f CPUs, %.1f %s", req.cpus, have.cpus, of_have);
  return "";
}

// Why a node of this kind can never take the job, regardless of its free resources; empty if
// it can.
std::string PoolRejection(const Node& n, const PlacementRequest& r) {
  const JobSpec& js = r.job->spec;
  if (n.health != NodeHealth::kHealthy) return absl::StrCat("node ", HealthName(n.health));
  if (n.spec.market == Market::kSpot && !r.allow_spot) return "spot not allowed";
  if (n.spec.market == Market::kOnDemand && !r.allow_on_demand) return "on-demand not allowed";
  if (!js.gpu_type.empty() && js.gpu_type != n.spec.gpu_type) {
    return absl::StrCat("needs ", js.gpu_type, ", node has ",
                        n.spec.gpu_type.empty() ? "no GPU" : n.spec.gpu_type);
  }
  for (const auto& [k, v] : js.node_selector) {
    auto it = n.spec.labels.find(k);
    if (it == n.spec.labels.end() || it->second != v) return absl::StrCat("label ", k, "!=", v);
  }
  if (!js.request.FitsIn(n.spec.capacity)) {
    return absl::StrCat("larger than the node: ", FitRejection(js.request, n.spec.capacity, "in all"));
  }
  if (std::string why = CpuRejection(*r.job, n); !why.empty()) return why;
  if (std::string why = AddressRejection(*r.job, n); !why.empty()) return why;
  return "";
}


bool Better(const CandidateScore& a, uint64_t a_order, const CandidateScore& b, uint64_t b_order) {
  if (a.total != b.total) return a.total < b.total;
  return a_order < b_order;
}

}  // namespace

double Placer::InterruptionCostHours(const Job& job, const Node& node) const {
  const CheckpointPolicy& cp = job.spec.checkpoint;
  double rate = node.interruptions_per_hour;
  double lost_s;
  if (node.spec.market == Market::kSpot && cp.on_notice) {
    lost_s = 0;  // a reclaim notice leaves time to checkpoint; only the restore is lost.
  } else if (cp.interval_s > 0) {
    lost_s = cp.interval_s / 2;  // on average half an interval since the last checkpoint.
  } else if (job.spec.kind == JobKind::kBatch) {
    // No checkpoints: everything done so far, plus on average half of what runs before the
    // interruption.
    double until_next = rate > 0 ? 3600.0 / rate : job.RemainingWork();
    lost_s = job.work_done_s + std::min(job.RemainingWork(), until_next) / 2;
  } else {
    lost_s = 0;
  }
  return (lost_s + cp.restore_s) / 3600.0;
}

CandidateScore Placer::ScoreWithFree(const Node& n, const Resources& free,
                                     const PlacementRequest& r) const {
  const Job& job = *r.job;
  const JobSpec& js = job.spec;
  const Resources& cap = n.spec.capacity;
  CandidateScore c;
  c.node_id = n.spec.id;

  double gpu_share = cap.gpus > 0 ? static_cast<double>(js.request.gpus) / cap.gpus : 0;
  double cpu_share = cap.cpus > 0 ? js.request.cpus / cap.cpus : 0;
  double mem_share =
      cap.memory_mb > 0 ? static_cast<double>(js.request.memory_mb) / cap.memory_mb : 0;
  double host_share = std::max(cpu_share, mem_share);
  double dominant = std::max(gpu_share, host_share);
  c.price_share = n.spec.price_per_hour * dominant;
  c.perf = js.request.gpus > 0 ? perf_.Factor(n.spec.gpu_type) : 1.0;
  c.effective_price = c.perf > 0 ? c.price_share / c.perf : c.price_share;
  c.interruptions_per_hour = n.interruptions_per_hour;
  c.interruption_cost_h = InterruptionCostHours(job, n);
  c.risk = c.interruptions_per_hour * c.interruption_cost_h *
           (c.effective_price + js.downtime_cost_per_hour);
  c.stranding = cap.gpus > 0 ? weights_.stranding * n.spec.price_per_hour *
                                   std::max(0.0, host_share - gpu_share)
                             : 0;

  std::string why = PoolRejection(n, r);
  if (why.empty() && Excluded(r, n.spec.id)) why = "excluded (the node being left)";
  if (why.empty()) why = FitRejection(js.request, free);
  if (why.empty() && js.budget_usd > 0 && js.kind == JobKind::kBatch) {
    double projected = job.spent_usd + c.effective_price * job.RemainingWork() / 3600.0;
    if (projected > js.budget_usd) {
      why = absl::StrFormat("over budget: $%.2f projected > $%.2f", projected, js.budget_usd);
    }
  }
  c.feasible = why.empty();
  c.rejected_because = std::move(why);
  return c;
}

CandidateScore Placer::Score(const Node& n, const PlacementRequest& r) const {
  Resources free = n.Free();
  if (r.job->node_id == n.spec.id) free += r.job->spec.request;
  CandidateScore c = ScoreWithFree(n, free, r);
  const PackingWeights& w = cluster_.packing();
  double after = Slack(free, n.spec.capacity, w) - RequestSlack(r.job->spec.request, n.spec.capacity, w);
  c.packing = weights_.packing * n.spec.price_per_hour * std::max(0.0, after);
  c.total = c.effective_price + c.risk + c.packing + c.stranding;
  return c;
}

absl::StatusOr<Placement> Placer::Place(const PlacementRequest& r) const {
  const Job& job = *r.job;
  Placement best;
  uint64_t best_order = 0;
  bool found = false;
  auto consider = [&](const CandidateScore& c, uint64_t order) {
    if (!c.feasible) return;
    if (!found || Better(c, order, best.chosen, best_order)) {
      best.chosen = c;
      best.node_id = c.node_id;
      best_order = order;
      found = true;
    }
  };
  const PackingWeights& w = cluster_.packing();
  cluster_.ForEachPool([&](const Cluster::Pool& pool) {
    const Node& rep = *pool.representative;
    if (!PoolRejection(rep, r).empty()) return;
    double need = RequestSlack(job.spec.request, rep.spec.capacity, w) - 1e-9;
    // A node with free >= request in every dimension has slack >= need, so nothing before
    // lower_bound(need) can fit; the first fitting node after it is this pool's best fit.
    for (auto it = pool.by_slack.lower_bound({need, 0, 0}); it != pool.by_slack.end(); ++it) {
      const Node& n = cluster_.NodeAt(std::get<2>(*it));
      if (n.spec.id == job.node_id || Excluded(r, n.spec.id)) continue;
      if (!job.spec.request.FitsIn(n.Free())) continue;
      consider(Score(n, r), std::get<1>(*it));
      break;
    }
  });
  if (!job.node_id.empty() && !Excluded(r, job.node_id)) {
    if (const Node* own = cluster_.FindNode(job.node_id); own != nullptr) {
      consider(Score(*own, r), cluster_.OrderOf(own->spec.id));
    }
  }
  if (!found) {
    return absl::ResourceExhaustedError(
        absl::StrCat("place ", job.spec.id, ": no feasible node among ", cluster_.node_count(),
                     " (run `cairn job explain ", job.spec.id, "` for each node's reason)"));
  }
  return best;
}

Placement Placer::Explain(const PlacementRequest& r) const {
  Placement p;
  std::vector<std::pair<CandidateScore, uint64_t>> all;
  all.reserve(cluster_.node_count());
  cluster_.ForEachNode([&](const Node& n, uint64_t order) { all.emplace_back(Score(n, r), order); });
  std::sort(all.begin(), all.end(), [](const auto& a, const auto& b) {
    if (a.first.feasible != b.first.feasible) return a.first.feasible;
    if (a.first.feasible) return Better(a.first, a.second, b.first, b.second);
    return a.second < b.second;
  });
  for (auto& [c, order] : all) p.candidates.push_back(std::move(c));
  if (!p.candidates.empty() && p.candidates.front().feasible) {
    p.chosen = p.candidates.front();
    p.node_id = p.chosen.node_id;
  }
  return p;
}

std::string FormatExplain(const Job& job, const Placement& p) {
  std::string out = absl::StrFormat(
      "job %s (%s, %d GPU, %.1f CPU, %d MB, priority %d)\n", job.spec.id,
      JobKindName(job.spec.kind), job.spec.request.gpus, job.spec.request.cpus,
      job.spec.request.memory_mb, job.spec.priority);
  if (p.node_id.empty()) {
    absl::StrAppend(&out, "no feasible node\n");
  } else {
    absl::StrAppendFormat(&out, "placed on %s: lowest total $/h of progress\n", p.node_id);
  }
  absl::StrAppendFormat(&out, "%-24s %9s %5s %9s %8s %8s %8s %8s %8s %9s  %s\n", "node", "$/h share",
                        "perf", "eff $/h", "int/h", "int cost", "risk", "packing", "strand",
                        "total", "verdict");
  for (const CandidateScore& c : p.candidates) {
    absl::StrAppendFormat(&out, "%-24s %9.4f %5.2f %9.4f %8.4f %7.2fh %8.4f %8.4f %8.4f %9.4f  %s\n",
                          c.node_id, c.price_share, c.perf, c.effective_price,
                          c.interruptions_per_hour, c.interruption_cost_h, c.risk, c.packing,
                          c.stranding, c.total,
                          c.feasible ? (c.node_id == p.node_id ? "chosen" : "feasible")
                                     : c.rejected_because);
  }
  return out;
}

}  // namespace cairn::controller
