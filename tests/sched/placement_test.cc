#include "controller/placement.h"

#include <gtest/gtest.h>

#include "common/cpu_levels.h"
#include "sim/workload.h"
#include "test_util.h"

namespace cairn::controller {
namespace {

using testing::GpuJob;
using testing::GpuNode;

TEST(PlacementTest, PicksCheapestFeasibleNode) {
  Cluster c;
  ASSERT_TRUE(c.AddNode(GpuNode("cheap-small", 1.0, Market::kOnDemand, 1)).ok());
  ASSERT_TRUE(c.AddNode(GpuNode("mid", 5.0, Market::kOnDemand, 2)).ok());
  ASSERT_TRUE(c.AddNode(GpuNode("dear", 9.0, Market::kOnDemand, 2)).ok());
  ASSERT_TRUE(c.AddJob(GpuJob("j", 2)).ok());
  Placer p(c);
  PlacementRequest r;
  r.job = c.FindJob("j");
  auto got = p.Place(r);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->node_id, "mid");  // cheap-small has one GPU; the job needs two
}

TEST(PlacementTest, RespectsCapacity) {
  Cluster c;
  ASSERT_TRUE(c.AddNode(GpuNode("n", 1.0, Market::kOnDemand, 2)).ok());
  for (const char* id : {"a", "b", "c"}) ASSERT_TRUE(c.AddJob(GpuJob(id, 1)).ok());
  Placer p(c);
  PlacementRequest r;
  for (const char* id : {"a", "b"}) {
    r.job = c.FindJob(id);
    auto got = p.Place(r);
    ASSERT_TRUE(got.ok());
    ASSERT_TRUE(c.Bind(id, got->node_id).ok());
  }
  r.job = c.FindJob("c");
  auto full = p.Place(r);
  EXPECT_EQ(full.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(c.Bind("c", "n").code(), absl::StatusCode::kResourceExhausted);
  ASSERT_TRUE(c.Unbind("a").ok());
  EXPECT_TRUE(p.Place(r).ok());
}

TEST(PlacementTest, PrefersLowerRiskWhenPricesTie) {
  Cluster c;
  ASSERT_TRUE(c.AddNode(GpuNode("risky", 0.9, Market::kSpot)).ok());
  ASSERT_TRUE(c.AddNode(GpuNode("calm", 0.9, Market::kSpot)).ok());
  ASSERT_TRUE(c.SetInterruptionRate("risky", 0.5).ok());
  ASSERT_TRUE(c.SetInterruptionRate("calm", 0.05).ok());
  JobSpec j = GpuJob("j");
  j.checkpoint.on_notice = false;  // so an interruption costs half an interval of work
  ASSERT_TRUE(c.AddJob(j).ok());
  Placer p(c);
  PlacementRequest r;
  r.job = c.FindJob("j");
  auto got = p.Place(r);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->node_id, "calm");
  EXPECT_GT(p.Score(*c.FindNode("risky"), r).risk, got->chosen.risk);
}

TEST(PlacementTest, ExplainListsEveryCandidateWithItsTerms) {
  Cluster c;
  ASSERT_TRUE(c.AddNode(GpuNode("od", 3.06)).ok());
  ASSERT_TRUE(c.AddNode(GpuNode("spot", 0.92, Market::kSpot)).ok());
  ASSERT_TRUE(c.AddNode(GpuNode("a100", 8.0, Market::kOnDemand, 1, "A100")).ok());
  ASSERT_TRUE(c.AddNode(GpuNode("sick", 0.5)).ok());
  ASSERT_TRUE(c.SetNodeHealth("sick", NodeHealth::kDraining).ok());
  NodeSpec cpu = GpuNode("cpu-only", 0.2);
  cpu.capacity.gpus = 0;
  cpu.gpu_type = "";
  ASSERT_TRUE(c.AddNode(cpu).ok());
  ASSERT_TRUE(c.SetInterruptionRate("spot", 0.1).ok());
  JobSpec js = GpuJob("j");
  js.gpu_type = "V100";
  ASSERT_TRUE(c.AddJob(js).ok());
  Placer p(c);
  PlacementRequest r;
  r.job = c.FindJob("j");
  Placement e = p.Explain(r);
  ASSERT_EQ(e.candidates.size(), 5u);
  EXPECT_EQ(e.node_id, "spot");
  EXPECT_EQ(e.candidates.front().node_id, "spot");
  EXPECT_EQ(e.node_id, p.Place(r)->node_id);
  int rejected = 0;
  for (const CandidateScore& s : e.candidates) {
    if (s.feasible) {
      EXPECT_TRUE(s.rejected_because.empty());
      EXPECT_NEAR(s.total, s.effective_price + s.risk + s.packing + s.stranding, 1e-12);
    } else {
      ++rejected;
      EXPECT_FALSE(s.rejected_because.empty()) << s.node_id;
    }
  }
  EXPECT_EQ(rejected, 3);  // sick, the A100 (wrong type) and the CPU-only node
  std::string text = FormatExplain(*r.job, e);
  for (const char* id : {"od", "spot", "a100", "sick", "cpu-only"}) {
    EXPECT_NE(text.find(id), std::string::npos) << id;
  }
  EXPECT_NE(text.find("node draining"), std::string::npos);
}

TEST(PlacementTest, PerformanceFactorMakesFasterGpuCheaperPerWork) {
  Cluster c;
  ASSERT_TRUE(c.AddNode(GpuNode("v100", 3.06, Market::kOnDemand, 1, "V100")).ok());
  ASSERT_TRUE(c.AddNode(GpuNode("a100", 4.10, Market::kOnDemand, 1, "A100")).ok());
  ASSERT_TRUE(c.AddJob(GpuJob("j")).ok());
  Placer p(c);
  PlacementRequest r;
  r.job = c.FindJob("j");
  auto got = p.Place(r);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->node_id, "a100");  // 4.10 / 2.2 < 3.06 / 1.0
  EXPECT_NEAR(got->chosen.effective_price, 4.10 / 2.2, 1e-9);
}

TEST(PlacementTest, BestFitPacksIntoTheFullerNode) {
  Cluster c;
  ASSERT_TRUE(c.AddNode(GpuNode("empty", 8.0, Market::kOnDemand, 4)).ok());
  ASSERT_TRUE(c.AddNode(GpuNode("busy", 8.0, Market::kOnDemand, 4)).ok());
  ASSERT_TRUE(c.AddJob(GpuJob("big", 3)).ok());
  ASSERT_TRUE(c.Bind("big", "busy").ok());
  ASSERT_TRUE(c.AddJob(GpuJob("small", 1)).ok());
  Placer p(c);
  PlacementRequest r;
  r.job = c.FindJob("small");
  auto got = p.Place(r);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->node_id, "busy");  // fills the last GPU instead of opening a new node
}

TEST(PlacementTest, CpuJobAvoidsStrandingGpus) {
  Cluster c;
  ASSERT_TRUE(c.AddNode(GpuNode("gpu", 1.0, Market::kOnDemand, 1)).ok());
  NodeSpec cpu = GpuNode("cpu", 1.0);
  cpu.capacity.gpus = 0;
  cpu.gpu_type = "";
  ASSERT_TRUE(c.AddNode(cpu).ok());
  JobSpec j;
  j.id = "cpu-job";
  j.request = {4, 8192, 0};
  ASSERT_TRUE(c.AddJob(j).ok());
  Placer p(c);
  PlacementRequest r;
  r.job = c.FindJob("cpu-job");
  auto got = p.Place(r);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->node_id, "cpu");
  EXPECT_GT(p.Score(*c.FindNode("gpu"), r).stranding, 0);
}

TEST(PlacementTest, BudgetRejectsNodesThatWouldOverspend) {
  Cluster c;
  ASSERT_TRUE(c.AddNode(GpuNode("od", 3.0)).ok());
  ASSERT_TRUE(c.AddNode(GpuNode("spot", 1.0, Market::kSpot)).ok());
  JobSpec j = GpuJob("j", 1, 10);
  j.budget_usd = 20;  // 10 h: $30 on-demand, $10 on spot
  ASSERT_TRUE(c.AddJob(j).ok());
  Placer p(c);
  PlacementRequest r;
  r.job = c.FindJob("j");
  r.allow_spot = false;
  auto got = p.Place(r);
  EXPECT_FALSE(got.ok());
  CandidateScore od = p.Score(*c.FindNode("od"), r);
  EXPECT_NE(od.rejected_because.find("over budget"), std::string::npos) << od.rejected_because;
}

// A job's processes pick their code by the CPU they start on (glibc's ifuncs, JITs): after that
// it may move only to CPUs with those features — unless it was started for a baseline level.
TEST(PlacementTest, AJobMovesOnlyToCpusWithTheFeaturesItStartedWith) {
  Cluster c;
  auto cpu_node = [](const std::string& id, double price, int level) {
    NodeSpec s = GpuNode(id, price);
    s.cpu_level = level;
    s.cpu_features = LevelFeatures(level);
    return s;
  };
  ASSERT_TRUE(c.AddNode(cpu_node("v4", 3.0, 4)).ok());
  ASSERT_TRUE(c.AddNode(cpu_node("v3-cheap", 1.0, 3)).ok());
  NodeSpec unknown = GpuNode("unknown", 2.0);  // said nothing about its CPU
  ASSERT_TRUE(c.AddNode(unknown).ok());

  ASSERT_TRUE(c.AddJob(GpuJob("plain")).ok());
  ASSERT_TRUE(c.Bind("plain", "v4").ok());
  EXPECT_EQ(c.FindJob("plain")->cpu_features, LevelFeatures(4));
  ASSERT_TRUE(c.Unbind("plain").ok());
  EXPECT_EQ(c.FindJob("plain")->cpu_features, LevelFeatures(4)) << "kept after it left the node";

  JobSpec kept = GpuJob("kept");
  kept.cpu_baseline = 3;
  ASSERT_TRUE(c.AddJob(kept).ok());
  ASSERT_TRUE(c.Bind("kept", "v4").ok());
  EXPECT_TRUE(c.FindJob("kept")->cpu_features.empty());
  ASSERT_TRUE(c.Unbind("kept").ok());

  Placer p(c);
  PlacementRequest r;
  r.job = c.FindJob("plain");
  auto got = p.Place(r);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->node_id, "unknown");  // the cheaper v3 node lacks AVX-512
  CandidateScore v3 = p.Score(*c.FindNode("v3-cheap"), r);
  EXPECT_FALSE(v3.feasible);
  EXPECT_NE(v3.rejected_because.find("its CPU lacks avx512"), std::string::npos) << v3.rejected_because;
  EXPECT_NE(v3.rejected_because.find("--cpu-baseline"), std::string::npos) << v3.rejected_because;
  EXPECT_EQ(p.Explain(r).node_id, "unknown");

  r.job = c.FindJob("kept");
  got = p.Place(r);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->node_id, "v3-cheap");

  JobSpec v4_only = GpuJob("v4-only");
  v4_only.cpu_baseline = 4;
  ASSERT_TRUE(c.AddJob(v4_only).ok());
  r.job = c.FindJob("v4-only");
  v3 = p.Score(*c.FindNode("v3-cheap"), r);
  EXPECT_EQ(v3.rejected_because, "its CPU is x86-64-v3, the job keeps to x86-64-v4");
  EXPECT_EQ(p.Place(r)->node_id, "unknown");
}

// A job's service address goes only where the daemon can put it: a node with an address in its
// subnet, or with the device it names. Nodes that said nothing of their addresses take it.
TEST(PlacementTest, AJobWithAServiceAddressGoesOnlyToNodesOnItsSubnet) {
  Cluster c;
  auto on = [](const std::string& id, double price, std::vector<std::string> addresses, std::set<std::string> devices) {
    NodeSpec s = GpuNode(id, price);
    for (const std::string& a : addresses) s.addresses.push_back(*ParseIpPrefix(a));
    s.devices = std::move(devices);
    return s;
  };
  ASSERT_TRUE(c.AddNode(on("cheap-other-net", 1.0, {"10.1.0.7/24@eth0"}, {"eth0", "lo"})).ok());
  ASSERT_TRUE(c.AddNode(on("on-net", 2.0, {"10.0.0.7/24@eth0", "fd00::7/64@eth0"}, {"eth0", "lo"})).ok());
  ASSERT_TRUE(c.AddNode(on("with-svc0", 3.0, {"10.2.0.7/24@eth0"}, {"eth0", "svc0", "lo"})).ok());
  ASSERT_TRUE(c.AddNode(GpuNode("unknown", 4.0)).ok());

  Placer p(c);
  auto place = [&](const std::string& id, std::vector<std::string> addresses) -> std::string {
    JobSpec j = GpuJob(id);
    j.addresses = std::move(addresses);
    EXPECT_TRUE(c.AddJob(j).ok());
    PlacementRequest r;
    r.job = c.FindJob(id);
    Placement e = p.Explain(r);
    auto got = p.Place(r);
    EXPECT_EQ(got.ok() ? got->node_id : "", e.node_id) << "indexed and exhaustive placement disagree";
    return e.node_id;
  };
  EXPECT_EQ(place("none", {}), "cheap-other-net");
  EXPECT_EQ(place("v4", {"10.0.0.50/24"}), "on-net");
  EXPECT_EQ(place("v6", {"fd00::50/64"}), "on-net");
  EXPECT_EQ(place("dev", {"10.84.0.5/24@svc0"}), "with-svc0");
  EXPECT_EQ(place("nowhere", {"192.168.9.9/24"}), "unknown") << "a node that did not say takes it";

  PlacementRequest r;
  r.job = c.FindJob("v4");
  CandidateScore other = p.Score(*c.FindNode("cheap-other-net"), r);
  EXPECT_FALSE(other.feasible);
  EXPECT_NE(other.rejected_because.find("no interface of it has an address in 10.0.0.0/24 for the job's address "
                                        "10.0.0.50/24"),
            std::string::npos)
      << other.rejected_because;
  r.job = c.FindJob("dev");
  EXPECT_NE(p.Score(*c.FindNode("on-net"), r).rejected_because.find("it has no device svc0"), std::string::npos);
}

// The indexed Place() and the exhaustive Explain() must agree on every request.
TEST(PlacementTest, IndexedPlacementAgreesWithExhaustiveScan) {
  Cluster c;
  sim::Rng rng(42);
  const char* types[] = {"V100", "A100", "T4"};
  for (int i = 0; i < 300; ++i) {
    NodeSpec s = GpuNode("n" + std::to_string(i), 0, rng.Index(2) ? Market::kSpot : Market::kOnDemand,
                         1 << rng.Index(4), types[rng.Index(3)]);
    s.price_per_hour = 0.5 * (1 + rng.Index(6)) * s.capacity.gpus;
    s.zone = "z" + std::to_string(rng.Index(3));
    s.cpu_level = 3 + static_cast<int>(rng.Index(2));
    s.cpu_features = LevelFeatures(s.cpu_level);
    if (rng.Index(3) != 0) s.addresses.push_back(*ParseIpPrefix("10.0." + std::to_string(rng.Index(2)) + ".7/24@eth0"));
    ASSERT_TRUE(c.AddNode(s).ok());
    if (s.market == Market::kSpot) {
      ASSERT_TRUE(c.SetInterruptionRate(s.id, 0.05 * (1 + rng.Index(4))).ok());
    }
  }
  Placer p(c);
  int placed = 0;
  for (int i = 0; i < 400; ++i) {
    JobSpec j = GpuJob("j" + std::to_string(i), 1 + static_cast<int>(rng.Index(3)));
    j.checkpoint.on_notice = rng.Index(2);
    j.cpu_baseline = static_cast<int>(rng.Index(5));  // 0: none; v1..v4
    if (rng.Index(2) == 0) j.addresses = {"10.0." + std::to_string(rng.Index(2)) + ".50/24"};
    ASSERT_TRUE(c.AddJob(j).ok());
    PlacementRequest r;
    r.job = c.FindJob(j.id);
    r.allow_spot = rng.Index(4) != 0;
    Placement e = p.Explain(r);
    auto got = p.Place(r);
    if (e.node_id.empty()) {
      EXPECT_FALSE(got.ok());
      continue;
    }
    ASSERT_TRUE(got.ok());
    ASSERT_EQ(got->node_id, e.node_id) << "request " << i;
    EXPECT_DOUBLE_EQ(got->chosen.total, e.chosen.total);
    ASSERT_TRUE(c.Bind(j.id, got->node_id).ok());
    ++placed;
  }
  EXPECT_GT(placed, 100);
}

TEST(ClusterTest, RejectsBadInputWithErrors) {
  Cluster c;
  EXPECT_EQ(c.AddNode(NodeSpec{}).code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(c.AddNode(GpuNode("n", 1)).ok());
  EXPECT_EQ(c.AddNode(GpuNode("n", 1)).code(), absl::StatusCode::kAlreadyExists);
  ASSERT_TRUE(c.AddJob(GpuJob("j")).ok());
  ASSERT_TRUE(c.Bind("j", "n").ok());
  EXPECT_EQ(c.RemoveNode("n").code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(c.Bind("j", "n").code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(c.Bind("nope", "n").code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(c.Unbind("j").ok());
  EXPECT_EQ(c.FindJob("j")->state, JobState::kSuspended);
  EXPECT_TRUE(c.RemoveNode("n").ok());
  EXPECT_EQ(c.node_count(), 0u);
}

}  // namespace
}  // namespace cairn::controller
