#include "sim/simulator.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "sim/report.h"
#include "sim/trace.h"
#include "sim/workload.h"

namespace cairn::sim {
namespace {

// Four days in 5-minute ticks: spot for 6 hours, gone for 2, repeating.
SpotTrace Synthetic() {
  std::vector<int> v;
  for (int k = 0; k < 4 * 24 * 12; ++k) v.push_back((k % 96) < 72 ? 1 : 0);
  return SyntheticTrace(300, std::move(v));
}

std::vector<SimJobSpec> Batch(int n, double work_h, double factor) {
  std::vector<SimJobSpec> jobs;
  for (int i = 0; i < n; ++i) {
    SimJobSpec j;
    j.id = "b" + std::to_string(i);
    j.arrival_s = 1800.0 * i;
    j.work_s = work_h * 3600;
    j.deadline_s = j.arrival_s + j.work_s * factor;
    j.state_gb = 20;
    jobs.push_back(j);
  }
  return jobs;
}

const SimResult* Of(const std::vector<SimResult>& rs, Strategy s) {
  for (const SimResult& r : rs) {
    if (r.strategy == StrategyName(s)) return &r;
  }
  return nullptr;
}

std::vector<SimResult> RunAll(const SpotTrace& t, const std::vector<SimJobSpec>& jobs,
                              const SimOptions& opt = {}) {
  std::vector<SimResult> rs;
  for (Strategy s : AllStrategies()) rs.push_back(Simulate(t, jobs, s, opt));
  return rs;
}

TEST(SimulatorTest, DeterministicForASeed) {
  SpotTrace t = Synthetic();
  WorkloadOptions wl;
  wl.jobs = 30;
  wl.seed = 7;
  auto jobs = GenerateJobs(wl, t.duration_s(), 1);
  SimOptions opt;
  opt.seed = 7;
  opt.node_failures_per_hour = 0.01;
  for (Strategy s : AllStrategies()) {
    SimResult a = Simulate(t, jobs, s, opt), b = Simulate(t, jobs, s, opt);
    EXPECT_EQ(a.cost_usd, b.cost_usd) << StrategyName(s);
    EXPECT_EQ(a.deadlines_met, b.deadlines_met);
    EXPECT_EQ(a.lost_work_h, b.lost_work_h);
    EXPECT_EQ(a.service_downtime_h, b.service_downtime_h);
    EXPECT_EQ(a.events, b.events);
    EXPECT_EQ(a.decisions_by_rule, b.decisions_by_rule);
  }
  // A different seed draws a different mix.
  wl.seed = 8;
  auto other = GenerateJobs(wl, t.duration_s(), 1);
  EXPECT_NE(other[0].arrival_s, jobs[0].arrival_s);
}

TEST(SimulatorTest, OnDemandNeverLosesWorkAndRestartLosesMoreThanCheckpointing) {
  SpotTrace t = Synthetic();
  auto jobs = Batch(8, 10, 2.0);
  auto rs = RunAll(t, jobs);
  const SimResult* od = Of(rs, Strategy::kOnDemand);
  const SimResult* restart = Of(rs, Strategy::kSpotRestart);
  const SimResult* ckpt = Of(rs, Strategy::kSpotCheckpoint);
  const SimResult* cairn = Of(rs, Strategy::kCairn);
  EXPECT_EQ(od->lost_work_h, 0);
  EXPECT_EQ(od->preemptions, 0);
  EXPECT_EQ(od->deadlines_met, 8);
  EXPECT_NEAR(od->cost_usd, 8 * (10 * 3.06 + (180 + 60) / 3600.0 * 3.06), 1e-6);
  EXPECT_GT(restart->preemptions, 0);
  EXPECT_GT(restart->lost_work_h, ckpt->lost_work_h);
  EXPECT_GT(ckpt->lost_work_h, 0);
  EXPECT_LT(cairn->lost_work_h, ckpt->lost_work_h);  // it checkpoints on the notice
  EXPECT_EQ(cairn->deadlines_met, 8);
  EXPECT_LT(cairn->cost_usd, od->cost_usd);
  for (const SimResult& r : rs) {
    EXPECT_GT(r.goodput(), 0) << r.strategy;
    EXPECT_LE(r.goodput(), 1.0) << r.strategy;
  }
}

TEST(SimulatorTest, CapacityLossArrivesWithANoticeFirst) {
  // Spot for one hour, then never again: every spot job gets a notice, and cairn loses nothing.
  std::vector<int> v(12, 1);
  v.resize(12 * 30, 0);
  SpotTrace t = SyntheticTrace(300, v);
  auto jobs = Batch(2, 4, 3.0);
  SimResult cairn = Simulate(t, jobs, Strategy::kCairn, {});
  EXPECT_EQ(cairn.preemptions, 2);
  EXPECT_EQ(cairn.lost_work_h, 0);
  EXPECT_EQ(cairn.decisions_by_rule.at("spot-notice"), 2);
  EXPECT_EQ(cairn.deadlines_met, 2);
}

// Uniform Progress ("Can't Be Late"): behind the line of uniform progress it takes on-demand even
// with slack to spare, where the greedy baseline waits; it goes back to spot (or to waiting) once
// ahead; it takes spot whenever there is some.
TEST(SimulatorTest, UniformProgressKeepsToTheLineWhereGreedyWaits) {
  // No spot for 20 hours, then spot to the end.
  std::vector<int> v(12 * 20, 0);
  v.resize(12 * 60, 1);
  SpotTrace t = SyntheticTrace(300, v);
  auto jobs = Batch(1, 10, 4.0);  // 10 hours of work, its deadline 40 hours after it arrives
  SimResult up = Simulate(t, jobs, Strategy::kUniformProgress, {});
  SimResult greedy = Simulate(t, jobs, Strategy::kSpotCheckpoint, {});
  EXPECT_EQ(greedy.on_demand_h, 0) << "the greedy baseline waits for spot while its slack allows";
  EXPECT_GT(up.on_demand_h, 0) << "behind the line, uniform progress runs on on-demand";
  EXPECT_GT(up.spot_h, 0) << "it goes back to spot when spot returns";
  EXPECT_GT(up.migrations, 0) << "it leaves on-demand once ahead of the line";
  // Ahead, it does not stay on on-demand for the whole 20 hours without spot.
  EXPECT_LT(up.on_demand_h, 12);
  EXPECT_EQ(up.deadlines_met, 1);
  EXPECT_EQ(greedy.deadlines_met, 1);
  EXPECT_EQ(up.lost_work_h, 0) << "it leaves on-demand right after a checkpoint: nothing is lost";
  EXPECT_LE(up.useful_h, up.paid_h);
}

TEST(SimulatorTest, UniformProgressWaitsWhileAheadAndFallsBackOnOnDemandAtTheEnd) {
  // Spot for 4 hours, none for 10, then spot again: a job far ahead of its line waits for it.
  std::vector<int> v(12 * 4, 1);
  v.resize(12 * 14, 0);
  v.resize(12 * 60, 1);
  SpotTrace t = SyntheticTrace(300, v);
  auto jobs = Batch(1, 6, 40.0 / 6);  // 6 hours of work, 40 hours to do it
  SimResult up = Simulate(t, jobs, Strategy::kUniformProgress, {});
  EXPECT_EQ(up.on_demand_h, 0) << "ahead of the line, it waited for spot";
  EXPECT_EQ(up.deadlines_met, 1);
  // Never any spot, and a deadline with little slack: on-demand (the safety net), deadline met.
  SpotTrace none = SyntheticTrace(300, std::vector<int>(12 * 60, 0));
  auto tight = Batch(2, 10, 1.3);
  SimResult net = Simulate(none, tight, Strategy::kUniformProgress, {});
  EXPECT_EQ(net.deadlines_met, 2);
  EXPECT_EQ(net.spot_h, 0);
}

TEST(TraceTest, LoadErrorsNameTheFile) {
  auto missing = LoadTrace("/nonexistent/trace.json");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  std::string path = ::testing::TempDir() + "/bad_trace.json";
  std::ofstream(path) << "{\"data\": [1, 0]}";
  auto bad = LoadTrace(path);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(bad.status().message()).find(path), std::string::npos);
  std::ofstream(path) << "not json";
  EXPECT_EQ(LoadTrace(path).status().code(), absl::StatusCode::kInvalidArgument);
  std::remove(path.c_str());
}

// Writes DIR/NAME (DIR made) as a trace of `values`, one every `gap` s, with `more` added to
// its JSON object (`"prices": [...]`); returns its path.
std::string WriteTrace(const std::string& dir, const std::string& name, const std::vector<int>& values,
                       double gap = 60, const std::string& more = "") {
  std::filesystem::create_directories(dir);
  std::string data;
  for (int v : values) data += (data.empty() ? "" : ", ") + std::to_string(v);
  std::string path = dir + "/" + name;
  std::ofstream(path) << R"({"metadata": {"gap_seconds": )" << gap << R"(}, "data": [)" << data << "]"
                      << (more.empty() ? "" : ", " + more) << "}";
  return path;
}

TEST(TraceTest, ReadingFollowsTheFolder) {
  std::string dir = ::testing::TempDir() + "/preemption/1-node";
  std::filesystem::create_directories(dir);
  std::string path = dir + "/us-east-1c_v100_1.json";
  std::ofstream(path) << R"({"metadata": {"gap_seconds": 32}, "data": [0, 1, 1, 0]})";
  auto t = LoadTrace(path);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->reading, TraceReading::kPreemptedFlag);
  EXPECT_EQ(t->Units(0), 1);  // 0 = not preempted: spot usable
  EXPECT_EQ(t->Units(1), 0);
  EXPECT_EQ(t->instance.name, "p3.2xlarge");
  EXPECT_EQ(t->zone, "us-east-1c");
  auto as_count = LoadTrace(path, TraceReading::kCount);
  ASSERT_TRUE(as_count.ok());
  EXPECT_EQ(as_count->Units(1), 1);
  // A flag is 0 or 1: counts read as flags are refused, saying which reading they look like.
  WriteTrace(dir, "us-east-1c_v100_1.json", {0, 4, 16, 0}, 32);
  auto counts = LoadTrace(path);
  EXPECT_EQ(counts.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(counts.status().message().find("--reading count"), absl::string_view::npos) << counts.status();
  EXPECT_TRUE(LoadTrace(path, TraceReading::kCount).ok());
  WriteTrace(dir, "us-east-1c_v100_1.json", {0, -1}, 32);
  EXPECT_EQ(LoadTrace(path, TraceReading::kCount).status().code(), absl::StatusCode::kInvalidArgument);
  std::filesystem::remove_all(::testing::TempDir() + "/preemption");
}

// The instance comes from the file's name, through a catalogue: a name it does not know is refused
// (a trace of another instance simulated with a V100's shape and price would be silently wrong).
TEST(TraceTest, AnInstanceOutsideTheCatalogueIsRefusedByName) {
  std::string dir = ::testing::TempDir() + "/aws-catalogue";
  auto four = LoadTrace(WriteTrace(dir, "us-east-1a_v100_4.json", {1, 1}));
  ASSERT_TRUE(four.ok()) << four.status();
  EXPECT_EQ(four->instance.name, "p3.8xlarge");
  EXPECT_EQ(four->instance.gpus, 4);
  for (const char* name : {"us-east-1a_a100_1.json", "us-central1-a_c3-highcpu-88.json", "us-east-1a_v100_2.json"}) {
    auto t = LoadTrace(WriteTrace(dir, name, {1, 1}));
    EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument) << name;
    EXPECT_NE(t.status().message().find(name), absl::string_view::npos) << t.status();
    EXPECT_NE(t.status().message().find("v100_1 (p3.2xlarge)"), absl::string_view::npos) << t.status();
  }
  std::filesystem::remove_all(dir);
}

// A trace may carry its spot prices (one per tick, validated); loading several, cairn-sim warns of a
// trace whose spot is almost never usable under its reading and of the same data loaded twice.
TEST(TraceTest, PricesAreReadAndSuspiciousTracesAreWarnedOf) {
  std::string dir = ::testing::TempDir() + "/aws-prices";
  std::string priced = WriteTrace(dir, "us-east-1a_v100_1.json", {1, 1, 0}, 60, R"("prices": [0.9, 1.0, 1.1])");
  auto t = LoadTrace(priced);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_DOUBLE_EQ(t->MeanPrice(), 1.0);
  std::string uneven = WriteTrace(dir, "us-east-1b_v100_1.json", {1, 1, 0}, 60, R"("prices": [0.9])");
  EXPECT_EQ(LoadTrace(uneven).status().code(), absl::StatusCode::kInvalidArgument);
  std::string negative = WriteTrace(dir, "us-east-1c_v100_1.json", {1}, 60, R"("prices": [-1])");
  EXPECT_EQ(LoadTrace(negative).status().code(), absl::StatusCode::kInvalidArgument);

  std::string copy = dir + "/us-east-1d_v100_1.json";
  std::filesystem::copy_file(priced, copy);
  std::vector<int> once_in_201(200, 0);
  once_in_201.push_back(1);
  std::string rare = WriteTrace(dir, "us-east-1e_v100_1.json", once_in_201);
  std::vector<SpotTrace> loaded;
  for (const std::string& p : {priced, copy, rare}) loaded.push_back(*LoadTrace(p));
  std::vector<std::string> w = TraceWarnings(loaded);
  ASSERT_EQ(w.size(), 2u) << ::testing::PrintToString(w);
  EXPECT_NE(w[0].find("same data as " + priced), std::string::npos) << w[0];
  EXPECT_NE(w[1].find("spot usable in 0.50% of ticks"), std::string::npos) << w[1];
  EXPECT_TRUE(TraceWarnings({loaded[0]}).empty());
  std::filesystem::remove_all(dir);
}

// A trace's cloud comes from its folder (the public traces: aws-02-15-2023/...), and with it the
// interruption notice the strategies get (AWS 2 minutes, GCP and Azure 30 s, each a flag); a
// trace whose cloud nothing says is refused, naming what to pass, rather than given AWS's notice.
TEST(TraceTest, TheCloudAndItsNoticeFollowTheFolder) {
  EXPECT_EQ(CloudOfPath("/x/availability/1-node/aws-02-15-2023/us-east-1a_v100_1.json"), "aws");
  EXPECT_EQ(CloudOfPath("/x/GCP-2024/us-central1-a_a100_1.json"), "gcp");
  EXPECT_EQ(CloudOfPath("azure/eastus_v100_1.json"), "azure");
  EXPECT_EQ(CloudOfPath("/x/traces/us-east-1a_v100_1.json"), "");
  EXPECT_EQ(CloudOfPath("/x/traces/aws_trace.json"), "") << "the file's own name is not a folder";
  NoticeTimes times;
  times.gcp_s = 25;
  SpotTrace t = SyntheticTrace(300, {1, 1});
  t.cloud = "gcp";
  EXPECT_EQ(NoticeFor(t, times).value_or(-1), 25);
  t.cloud = "aws";
  EXPECT_EQ(NoticeFor(t, times).value_or(-1), 120);
  t.cloud = "";
  absl::StatusOr<double> unknown = NoticeFor(t, times);
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(unknown.status().message().find("--cloud"), absl::string_view::npos) << unknown.status();

  std::string dir = ::testing::TempDir() + "/gcp-12-01-2026";
  auto loaded = LoadTrace(WriteTrace(dir, "us-central1-a_v100_1.json", {1, 0, 1}));
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->cloud, "gcp");
  std::filesystem::remove_all(dir);
}

// The real traces live outside the repository (../shared/traces; public copy:
// github.com/skypilot-org/spot-traces).
class RealTraceTest : public ::testing::TestWithParam<const char*> {};

TEST_P(RealTraceTest, CairnCostsNoMoreThanTheBestBaselineAtLeastAsReliably) {
  std::string path = std::string(CAIRN_TRACES_DIR) + "/" + GetParam();
  if (!std::filesystem::exists(CAIRN_TRACES_DIR)) {
    GTEST_SKIP() << "spot traces not found at " << CAIRN_TRACES_DIR
                 << " (get them from https://github.com/skypilot-org/spot-traces)";
  }
  auto t = LoadTrace(path);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->cloud, "aws") << "the shared traces are AWS's: their notice is 2 minutes";
  WorkloadOptions wl;
  wl.jobs = 60;
  TraceReport report;
  report.trace = &*t;
  report.jobs = GenerateJobs(wl, t->duration_s(), t->instance.gpus);
  report.results = RunAll(*t, report.jobs);
  const SimResult* cairn = Of(report.results, Strategy::kCairn);
  for (const SimResult& r : report.results) {
    if (r.strategy == "cairn") continue;
    EXPECT_GE(cairn->deadlines_met, r.deadlines_met) << r.strategy;
    EXPECT_GE(cairn->services_sla_met, r.services_sla_met) << r.strategy;
  }
  const SimResult* best = BestComparableBaseline(report);
  ASSERT_NE(best, nullptr);
  EXPECT_LE(cairn->cost_usd, best->cost_usd) << FormatTable(report, "test");
}

INSTANTIATE_TEST_SUITE_P(
    Traces, RealTraceTest,
    ::testing::Values("availability/1-node/aws-02-15-2023/us-west-2b_v100_1.json",
                      "availability/1-node/aws-02-15-2023/us-east-1a_v100_1.json",
                      "preemption/1-node/aws-04-22-2023/us-east-1c_v100_1.json",
                      "availability/16-node/aws-08-27-2023/us-west-2a_v100_1.json"));

}  // namespace
}  // namespace cairn::sim
