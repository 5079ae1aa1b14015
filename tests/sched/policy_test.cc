#include "controller/policy.h"

#include <gtest/gtest.h>

#include <cmath>

#include "controller/rules.h"
#include "test_util.h"

namespace cairn::controller {
namespace {

using testing::GpuJob;
using testing::GpuNode;

// One spot node running job "j" (10 h of work, 2 h done, checkpoint at 1.9 h), one idle
// on-demand node, one idle spot node.
class PolicyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(c_.AddNode(GpuNode("spot-a", 0.92, Market::kSpot)).ok());
    ASSERT_TRUE(c_.AddNode(GpuNode("od", 3.06)).ok());
    ASSERT_TRUE(c_.AddNode(GpuNode("spot-b", 0.92, Market::kSpot)).ok());
    ASSERT_TRUE(c_.AddJob(GpuJob("j")).ok());
    ASSERT_TRUE(c_.Bind("j", "spot-a").ok());
    Job* j = c_.MutableJob("j");
    j->work_done_s = 2 * 3600;
    j->progress_time = now_;
    j->checkpoints = {{now_ - 3600, 1.0 * 3600}, {now_ - 360, 1.9 * 3600}};
  }
  PolicyContext Ctx() { return PolicyContext{c_, placer_, cfg_, now_}; }
  Event Ev(Trigger t) {
    Event e;
    e.trigger = t;
    e.time = now_;
    e.node_id = "spot-a";
    e.job_id = "j";
    return e;
  }

  double now_ = 100000;
  Cluster c_;
  Placer placer_{c_};
  PolicyConfig cfg_;
};

// Every rule ignores every trigger but its own, even when that trigger's condition would hold.
TEST_F(PolicyTest, EveryRuleFiresOnlyOnItsOwnTrigger) {
  PolicyEngine engine = PolicyEngine::Default();
  ASSERT_EQ(engine.rules().size(), 10u);
  const Trigger all[] = {Trigger::kSpotNotice,       Trigger::kNodeLost,      Trigger::kGpuHealth,
                         Trigger::kJobHung,          Trigger::kMemoryPressure, Trigger::kCapacityAdded,
                         Trigger::kCapacityReturned, Trigger::kScaleDown,     Trigger::kFailurePrediction,
                         Trigger::kDeadlineCheck};
  for (const auto& rule : engine.rules()) {
    for (Trigger t : all) {
      if (t == rule->trigger()) continue;
      Event e = Ev(t);
      e.xid = 48;
      e.last_progress_time = now_ - 7200;
      e.memory_used_mb = 60000;
      e.memory_limit_mb = 61 * 1024;
      e.memory_growth_mb_per_s = 100;
      e.gpus_to_free = 1;
      e.precision = 1;
      e.warning_s = 600;
      EXPECT_TRUE(rule->Evaluate(e, Ctx()).empty())
          << rule->name() << " fired on " << TriggerName(t);
    }
  }
}

TEST_F(PolicyTest, SpotNoticeCheckpointsAndMovesWithinTheWindow) {
  auto d = SpotNoticeRule().Evaluate(Ev(Trigger::kSpotNotice), Ctx());
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].action, Action::kMigrate);
  EXPECT_EQ(d[0].target_node_id, "spot-b");  // the best other node: the other spot node
  EXPECT_EQ(d[0].rule, "spot-notice");
  EXPECT_NE(d[0].reason.find("checkpoint takes 30 s and fits"), std::string::npos) << d[0].reason;
}

TEST_F(PolicyTest, SpotNoticeTooShortRestoresTheLatestCheckpoint) {
  Event e = Ev(Trigger::kSpotNotice);
  e.notice_s = 20;  // the checkpoint needs 30 s
  auto d = SpotNoticeRule().Evaluate(e, Ctx());
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].action, Action::kRestore);
  EXPECT_DOUBLE_EQ(d[0].restore_from_time, now_ - 360);
  EXPECT_NE(d[0].reason.find("loses 360 s"), std::string::npos) << d[0].reason;
}

TEST_F(PolicyTest, SpotNoticeLetsABatchJobWithSlackWaitForSpot) {
  Job* j = c_.MutableJob("j");
  j->spec.sla.deadline = now_ + 40 * 3600;  // 8 h of work left, 40 h to go
  j->spec.submit_time = now_ - 2 * 3600;
  ASSERT_TRUE(c_.RemoveNode("spot-b").ok());  // no other spot capacity
  auto d = SpotNoticeRule().Evaluate(Ev(Trigger::kSpotNotice), Ctx());
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].action, Action::kSuspend);
  EXPECT_EQ(d[0].suspend_reason, SuspendReason::kWaitingForCheapCapacity);

  j->spec.sla.deadline = now_ + 8.3 * 3600;  // no room to wait: go on-demand
  d = SpotNoticeRule().Evaluate(Ev(Trigger::kSpotNotice), Ctx());
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].action, Action::kMigrate);
  EXPECT_EQ(d[0].target_node_id, "od");
  EXPECT_NE(d[0].reason.find("cannot wait"), std::string::npos) << d[0].reason;
}

TEST_F(PolicyTest, NodeLostRestoresLatestCheckpointElsewhere) {
  auto d = NodeLostRule().Evaluate(Ev(Trigger::kNodeLost), Ctx());
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].action, Action::kRestore);
  EXPECT_NE(d[0].target_node_id, "spot-a");
  EXPECT_DOUBLE_EQ(d[0].restore_from_time, now_ - 360);
  // A node without jobs: nothing to do.
  Event e = Ev(Trigger::kNodeLost);
  e.node_id = "od";
  EXPECT_TRUE(NodeLostRule().Evaluate(e, Ctx()).empty());
}

TEST_F(PolicyTest, GpuHealthActsOnFatalEventsOnly) {
  Event e = Ev(Trigger::kGpuHealth);
  e.xid = 13;  // graphics engine exception: the application's fault, not the GPU's
  EXPECT_TRUE(GpuHealthRule().Evaluate(e, Ctx()).empty());
  e.xid = 48;  // double-bit ECC error
  auto d = GpuHealthRule().Evaluate(e, Ctx());
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(d[0].action, Action::kMigrate);
  EXPECT_EQ(d[1].action, Action::kDrainNode);
  EXPECT_EQ(d[1].node_id, "spot-a");
  e.xid = 0;
  e.ecc_uncorrectable = 1;
  EXPECT_EQ(GpuHealthRule().Evaluate(e, Ctx()).size(), 2u);
  e.ecc_uncorrectable = 0;
  e.xid = 79;  // fallen off the bus: no checkpoint possible, restore the last one
  d = GpuHealthRule().Evaluate(e, Ctx());
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(d[0].action, Action::kRestore);
}

TEST_F(PolicyTest, HungJobRestoresTheCheckpointBeforeTheHang) {
  Event e = Ev(Trigger::kJobHung);
  e.last_progress_time = now_ - 300;  // under the 600 s timeout
  EXPECT_TRUE(HungJobRule().Evaluate(e, Ctx()).empty());
  e.last_progress_time = now_ - 1800;  // hung since before the latest checkpoint
  auto d = HungJobRule().Evaluate(e, Ctx());
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].action, Action::kRestore);
  EXPECT_DOUBLE_EQ(d[0].restore_from_time, now_ - 3600);  // not the one taken during the hang
}

TEST_F(PolicyTest, MemoryPressureMigratesBeforeThePredictedOom) {
  ASSERT_TRUE(c_.AddNode(GpuNode("big", 3.5, Market::kOnDemand, 2)).ok());
  Event e = Ev(Trigger::kMemoryPressure);
  e.memory_limit_mb = 61 * 1024;
  e.memory_used_mb = 40 * 1024;
  e.memory_growth_mb_per_s = 1;  // OOM in ~6 hours: far away
  EXPECT_TRUE(MemoryPressureRule().Evaluate(e, Ctx()).empty());
  e.memory_used_mb = 61 * 1024 - 100;
  e.memory_growth_mb_per_s = 1;  // 100 s to OOM < 2 x (30 + 40) s
  auto d = MemoryPressureRule().Evaluate(e, Ctx());
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].action, Action::kMigrate);
  EXPECT_EQ(d[0].target_node_id, "big");  // the only node with room for the predicted use
  ASSERT_TRUE(c_.RemoveNode("big").ok());
  d = MemoryPressureRule().Evaluate(e, Ctx());
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].action, Action::kCheckpoint);
}

TEST_F(PolicyTest, CheaperCapacityMovesOnlyWhenTheSavingPaysForTheMove) {
  ASSERT_TRUE(c_.Unbind("j").ok());
  ASSERT_TRUE(c_.Bind("j", "od").ok());
  auto d = CheaperCapacityRule().Evaluate(Ev(Trigger::kCapacityAdded), Ctx());
  ASSERT_EQ(d.size(), 1u);  // 8 h x $2.14/h saved >> 250 s of moving
  EXPECT_EQ(d[0].action, Action::kMigrate);
  EXPECT_EQ(d[0].target_node_id.substr(0, 4), "spot");
  EXPECT_NE(d[0].reason.find("saving"), std::string::npos);
  c_.MutableJob("j")->work_done_s = 10 * 3600 - 60;  // a minute left: not worth a move
  EXPECT_TRUE(CheaperCapacityRule().Evaluate(Ev(Trigger::kCapacityAdded), Ctx()).empty());
}

// A job whose decision is still in flight gets no move, and takes no cheap node from the next
// job (chaos run seed 602: a held job's move, dropped each time, kept the only free node).
TEST_F(PolicyTest, CheaperCapacityLeavesAJobWithADecisionInFlightOut) {
  ASSERT_TRUE(c_.RemoveNode("spot-b").ok());
  ASSERT_TRUE(c_.Unbind("j").ok());
  ASSERT_TRUE(c_.Bind("j", "od").ok());
  ASSERT_TRUE(c_.AddNode(GpuNode("od2", 3.06)).ok());
  ASSERT_TRUE(c_.AddJob(GpuJob("a")).ok());  // sorted first
  ASSERT_TRUE(c_.Bind("a", "od2").ok());
  Job* a = c_.MutableJob("a");
  a->work_done_s = 2 * 3600;
  a->progress_time = now_;
  a->checkpoints = {{now_ - 3600, 1.0 * 3600}, {now_ - 360, 1.9 * 3600}};
  Event added = Ev(Trigger::kCapacityAdded);
  added.job_id.clear();  // capacity added: every job is looked at
  auto both = CheaperCapacityRule().Evaluate(added, Ctx());
  ASSERT_EQ(both.size(), 1u) << "one cheap node: one move";
  EXPECT_EQ(both[0].job_id, "a");
  std::set<std::string> settling = {"a"};
  PolicyContext ctx = Ctx();
  ctx.settling = &settling;
  auto d = CheaperCapacityRule().Evaluate(added, ctx);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].job_id, "j");
  EXPECT_EQ(d[0].target_node_id, "spot-a");
}

TEST_F(PolicyTest, ScaleDownSuspendsLowestPriorityFirst) {
  ASSERT_TRUE(c_.AddNode(GpuNode("od2", 3.06)).ok());
  JobSpec hi = GpuJob("hi");
  hi.priority = 5;
  ASSERT_TRUE(c_.AddJob(hi).ok());
  ASSERT_TRUE(c_.Bind("hi", "od").ok());
  JobSpec lo = GpuJob("lo");
  lo.priority = -1;
  ASSERT_TRUE(c_.AddJob(lo).ok());
  ASSERT_TRUE(c_.Bind("lo", "od2").ok());
  Event e = Ev(Trigger::kScaleDown);
  e.gpus_to_free = 2;
  auto d = ScaleDownRule().Evaluate(e, Ctx());
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(d[0].job_id, "lo");
  EXPECT_EQ(d[1].job_id, "j");
  for (const auto& x : d) EXPECT_EQ(x.action, Action::kSuspend);
}

TEST_F(PolicyTest, ResumeRespectsWhyAJobWaits) {
  ASSERT_TRUE(c_.Unbind("j").ok());
  ASSERT_TRUE(c_.RemoveNode("spot-a").ok());
  ASSERT_TRUE(c_.RemoveNode("spot-b").ok());
  Job* j = c_.MutableJob("j");
  j->suspended_for = SuspendReason::kWaitingForCheapCapacity;
  EXPECT_TRUE(ResumeRule().Evaluate(Ev(Trigger::kCapacityReturned), Ctx()).empty());
  j->suspended_for = SuspendReason::kScaleDown;  // suspended for room: any node will do
  auto d = ResumeRule().Evaluate(Ev(Trigger::kCapacityReturned), Ctx());
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].target_node_id, "od");
}

TEST_F(PolicyTest, DeadlineGuardResumesWhenSlackReachesTheReserve) {
  ASSERT_TRUE(c_.Unbind("j").ok());
  Job* j = c_.MutableJob("j");
  j->suspended_for = SuspendReason::kWaitingForCheapCapacity;
  j->spec.submit_time = now_ - 3600;
  j->spec.sla.deadline = now_ + 30 * 3600;
  EXPECT_TRUE(DeadlineGuardRule().Evaluate(Ev(Trigger::kDeadlineCheck), Ctx()).empty());
  double wake = WaitDeadline(*j, now_, 1.0, cfg_);
  ASSERT_GT(wake, now_);
  now_ = wake + 1;
  auto d = DeadlineGuardRule().Evaluate(Ev(Trigger::kDeadlineCheck), Ctx());
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].action, Action::kResume);
  EXPECT_NE(d[0].reason.find("wait reserve"), std::string::npos);
}

TEST(DeadlineMathTest, SlackCountsCheckpointPausesAndOneRestart) {
  Job j;
  j.spec = testing::GpuJob("j", 1, 10);
  j.spec.sla.deadline = 20 * 3600;
  PolicyConfig cfg;
  // 10 h of work x (1 + 5/600) + 180 s launch + 40 s restore, from t=0.
  double expect = 20 * 3600 - 36000 * (1 + 5.0 / 600) - 220;
  EXPECT_NEAR(DeadlineSlackS(j, 0, 1.0, cfg), expect, 1e-6);
  j.spec.sla.deadline = 0;
  EXPECT_TRUE(std::isinf(DeadlineSlackS(j, 0, 1.0, cfg)));
}

}  // namespace
}  // namespace cairn::controller
