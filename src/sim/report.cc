#include "sim/report.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace cairn::sim {

namespace {
const SimResult* Find(const TraceReport& r, absl::string_view name) {
  for (const SimResult& s : r.results) {
    if (s.strategy == name) return &s;
  }
  return nullptr;
}
}  // namespace

const SimResult* BestComparableBaseline(const TraceReport& r) {
  const SimResult* cairn = Find(r, "cairn");
  if (cairn == nullptr) return nullptr;
  const SimResult* best = nullptr;
  for (const SimResult& s : r.results) {
    if (s.strategy == "cairn") continue;
    if (s.deadlines_met > cairn->deadlines_met || s.services_sla_met > cairn->services_sla_met) continue;
    if (best == nullptr || s.cost_usd < best->cost_usd) best = &s;
  }
  return best;
}

std::string FormatTable(const TraceReport& r, const std::string& command) {
  const SpotTrace& t = *r.trace;
  int services = 0;
  for (const SimJobSpec& j : r.jobs) services += j.service;
  std::string out = absl::StrFormat(
      "trace %s\n  %s zone %s, %s (%d x %s), %.1f days, one value per %.0f s, reading '%s', spot "
      "usable in %.1f%% of ticks, %.0f s of notice\n  %zu jobs (%zu batch, %d services); on-demand $%.2f/h, spot "
      "$%.3f/h (%s)\n  reproduce: %s\n",
      t.path, t.cloud.empty() ? "?" : t.cloud, t.zone, t.instance.name, t.instance.gpus, t.instance.gpu_type,
      t.duration_s() / 86400, t.gap_s, ReadingName(t.reading), 100 * t.SpotShare(), r.notice_s, r.jobs.size(),
      r.jobs.size() - services, services, t.instance.on_demand_price, r.spot_price,
      t.prices.empty() ? "a share of on-demand: --spot-price-fraction" : "the mean of the trace's prices", command);
  const SimResult* od = Find(r, "on-demand");
  absl::StrAppendFormat(&out, "  %-16s %11s %8s %10s %8s %8s %9s %9s %9s %9s %7s %6s %5s\n", "strategy",
                        "cost $", "vs OD", "deadlines", "svc SLA", "goodput", "lost h",
                        "svc down h", "spot h", "OD h", "preempt", "moves", "fail");
  for (const SimResult& s : r.results) {
    std::string vs = od && od->cost_usd > 0
                         ? absl::StrFormat("%+.1f%%", 100 * (s.cost_usd / od->cost_usd - 1))
                         : "-";
    absl::StrAppendFormat(&out, "  %-16s %11.2f %8s %5d/%-4d %3d/%-4d %8.3f %9.1f %9.2f %9.1f %9.1f %7d %6d %5d\n",
                          s.strategy, s.cost_usd, vs, s.deadlines_met, s.batch_jobs,
                          s.services_sla_met, s.services, s.goodput(), s.lost_work_h,
                          s.service_downtime_h, s.spot_h, s.on_demand_h, s.preemptions,
                          s.migrations, s.node_failures);
  }
  const SimResult* cairn = Find(r, "cairn");
  const SimResult* best = BestComparableBaseline(r);
  if (cairn && best) {
    absl::StrAppendFormat(&out,
                          "  cairn vs best comparable baseline (%s, deadlines %d/%d, svc %d/%d): "
                          "$%.2f vs $%.2f, %.1f%% cheaper\n",
                          best->strategy, best->deadlines_met, best->batch_jobs,
                          best->services_sla_met, best->services, cairn->cost_usd, best->cost_usd,
                          100 * (1 - cairn->cost_usd / best->cost_usd));
  }
  if (cairn && !cairn->decisions_by_rule.empty()) {
    absl::StrAppend(&out, "  cairn decisions by rule:");
    for (const auto& [rule, n] : cairn->decisions_by_rule) absl::StrAppend(&out, " ", rule, "=", n);
    absl::StrAppend(&out, "\n");
  }
  return out;
}

std::string FormatJson(const std::vector<TraceReport>& reports) {
  nlohmann::json all = nlohmann::json::array();
  for (const TraceReport& r : reports) {
    nlohmann::json t;
    t["trace"] = r.trace->path;
    t["zone"] = r.trace->zone;
    t["cloud"] = r.trace->cloud;
    t["notice_s"] = r.notice_s;
    t["instance"] = r.trace->instance.name;
    t["reading"] = std::string(ReadingName(r.trace->reading));
    t["days"] = r.trace->duration_s() / 86400;
    t["jobs"] = r.jobs.size();
    t["on_demand_price"] = r.trace->instance.on_demand_price;
    t["spot_price"] = r.spot_price;
    nlohmann::json rs = nlohmann::json::array();
    for (const SimResult& s : r.results) {
      nlohmann::json x;
      x["strategy"] = s.strategy;
      x["cost_usd"] = s.cost_usd;
      x["batch_jobs"] = s.batch_jobs;
      x["deadlines_met"] = s.deadlines_met;
      x["deadline_attainment"] = s.deadline_attainment();
      x["services"] = s.services;
      x["services_sla_met"] = s.services_sla_met;
      x["goodput"] = s.goodput();
      x["useful_h"] = s.useful_h;
      x["paid_h"] = s.paid_h;
      x["lost_work_h"] = s.lost_work_h;
      x["service_downtime_h"] = s.service_downtime_h;
      x["spot_h"] = s.spot_h;
      x["on_demand_h"] = s.on_demand_h;
      x["preemptions"] = s.preemptions;
      x["migrations"] = s.migrations;
      x["node_failures"] = s.node_failures;
      x["events"] = s.events;
      x["decisions_by_rule"] = s.decisions_by_rule;
      rs.push_back(std::move(x));
    }
    t["results"] = std::move(rs);
    if (const SimResult* best = BestComparableBaseline(r)) {
      const SimResult* cairn = Find(r, "cairn");
      t["best_comparable_baseline"] = best->strategy;
      t["cairn_saving_vs_best"] = 1 - cairn->cost_usd / best->cost_usd;
    }
    all.push_back(std::move(t));
  }
  return all.dump(2);
}

}  // namespace cairn::sim
