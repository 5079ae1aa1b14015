// cairn-sim: runs cairn's placement and policy code in virtual time against spot traces and
// compares it with the strategies people use today. See docs/scheduling.md.

#include <cstdio>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "sim/report.h"
#include "sim/simulator.h"
#include "sim/trace.h"
#include "sim/workload.h"

int main(int argc, char** argv) {
  using namespace cairn::sim;
  CLI::App app{"cairn-sim: compare scheduling strategies on spot capacity traces"};
  std::vector<std::string> traces;
  WorkloadOptions wl;
  SimOptions opt;
  std::string strategies = "all";
  std::string reading = "auto";
  bool json = false;
  app.add_option("--trace", traces, "trace file(s) (skypilot-org/spot-traces JSON)")->required();
  app.add_option("--jobs", wl.jobs, "jobs in the mix")->check(CLI::PositiveNumber);
  app.add_option("--seed", wl.seed, "seed for the job mix and the choice of reclaimed instances");
  app.add_option("--strategy", strategies, "all, or a list of on-demand,spot-restart,spot-ckpt30,uniform-progress,cairn");
  app.add_option("--reading", reading, "how to read trace values: auto, count, preempted-flag");
  app.add_option("--services", wl.service_fraction, "fraction of jobs that are services")->check(CLI::Range(0.0, 1.0));
  app.add_option("--spot-price-fraction", opt.spot_price_fraction, "spot price / on-demand price");
  app.add_option("--slack-keep", opt.policy.slack_keep, "cairn: share of the uniform-progress slack line to keep (0 = greedy)");
  app.add_option("--node-failure-rate", opt.node_failures_per_hour, "failures per node-hour (no notice)");
  app.add_option("--launch", opt.launch_s, "seconds to obtain and boot an instance");
  NoticeTimes notices;
  std::string cloud;
  app.add_option("--notice-aws", notices.aws_s, "seconds of interruption notice on AWS")->check(CLI::NonNegativeNumber);
  app.add_option("--notice-gcp", notices.gcp_s, "seconds of interruption notice on GCP")->check(CLI::NonNegativeNumber);
  app.add_option("--notice-azure", notices.azure_s, "seconds of interruption notice on Azure")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--cloud", cloud, "the cloud of traces whose path does not say it (aws, gcp, azure)")
      ->check(CLI::IsMember({"aws", "gcp", "azure"}));
  app.add_option("--log-decisions", opt.log_decisions, "print the first N cairn decisions with their reasons");
  app.add_flag("--json", json, "print JSON instead of tables");
  CLI11_PARSE(app, argc, argv);
  opt.seed = wl.seed;

  auto strategy_list = ParseStrategies(strategies);
  auto read = ParseReading(reading);
  if (!strategy_list.ok() || !read.ok()) {
    std::fprintf(stderr, "cairn-sim: %s\n",
                 std::string((!strategy_list.ok() ? strategy_list.status() : read.status()).message()).c_str());
    return 2;
  }
  std::string command = "cairn-sim";
  for (int i = 1; i < argc; ++i) command += std::string(" ") + argv[i];

  std::vector<SpotTrace> loaded;
  std::vector<double> notice_of;  // each trace's interruption notice (its cloud's)
  for (const std::string& path : traces) {
    auto t = LoadTrace(path, *read);
    if (!t.ok()) {
      std::fprintf(stderr, "cairn-sim: %s\n  (the public traces: https://github.com/skypilot-org/spot-traces)\n",
                   std::string(t.status().message()).c_str());
      return 1;
    }
    if (t->cloud.empty()) t->cloud = cloud;
    absl::StatusOr<double> notice = NoticeFor(*t, notices);
    if (!notice.ok()) {
      std::fprintf(stderr, "cairn-sim: %s\n", std::string(notice.status().message()).c_str());
      return 1;
    }
    loaded.push_back(std::move(*t));
    notice_of.push_back(*notice);
  }
  for (const std::string& w : TraceWarnings(loaded)) std::fprintf(stderr, "cairn-sim: warning: %s\n", w.c_str());
  std::vector<TraceReport> reports;
  for (size_t i = 0; i < loaded.size(); ++i) {
    const SpotTrace& t = loaded[i];
    TraceReport r;
    r.trace = &t;
    r.jobs = GenerateJobs(wl, t.duration_s(), t.instance.gpus);
    SimOptions for_trace = opt;
    for_trace.notice_s = r.notice_s = notice_of[i];
    // A trace with prices: their mean is the spot price (their variation in time is not modelled).
    if (!t.prices.empty()) for_trace.spot_price_fraction = t.MeanPrice() / t.instance.on_demand_price;
    r.spot_price = t.instance.on_demand_price * for_trace.spot_price_fraction;
    for (Strategy s : *strategy_list) r.results.push_back(Simulate(t, r.jobs, s, for_trace));
    if (!json) std::printf("%s\n", FormatTable(r, command).c_str());
    reports.push_back(std::move(r));
  }
  if (json) std::printf("%s\n", FormatJson(reports).c_str());
  return 0;
}
