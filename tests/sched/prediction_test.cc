#include <gtest/gtest.h>

#include "controller/rules.h"
#include "test_util.h"

namespace cairn::controller {
namespace {

// A running job 1000 s of work past its last checkpoint, whose checkpoint pauses it 100 s.
Job JobAt(double now) {
  Job j;
  j.spec = testing::GpuJob("j");
  j.spec.checkpoint.interval_s = 0;  // no periodic checkpoints in the way
  j.spec.checkpoint.pause_s = 100;
  j.spec.checkpoint.notice_checkpoint_s = 100;
  j.state = JobState::kRunning;
  j.work_done_s = 5000;
  j.progress_time = now;
  j.checkpoints = {{now - 1000, 4000}};
  return j;
}

TEST(PredictionTest, ActsExactlyWhenExpectedSavingExceedsCost) {
  const double now = 50000;
  Job j = JobAt(now);
  // p x 1000 s vs 100 s: the threshold is p = 0.1.
  PredictionVerdict above = EvaluatePrediction(j, now, 0.11, 600);
  EXPECT_TRUE(above.act) << above.arithmetic;
  EXPECT_DOUBLE_EQ(above.saved_s, 1000);
  EXPECT_DOUBLE_EQ(above.expected_saved_s, 110);
  EXPECT_DOUBLE_EQ(above.cost_s, 100);
  EXPECT_NE(above.arithmetic.find("0.11 x 1000 s = 110.0 s > cost c = 100.0 s"), std::string::npos)
      << above.arithmetic;

  PredictionVerdict at = EvaluatePrediction(j, now, 0.10, 600);
  EXPECT_FALSE(at.act) << at.arithmetic;  // equal is not enough: acting must pay
  PredictionVerdict below = EvaluatePrediction(j, now, 0.09, 600);
  EXPECT_FALSE(below.act) << below.arithmetic;
  EXPECT_NE(below.arithmetic.find("do nothing"), std::string::npos);
}

TEST(PredictionTest, WarningShorterThanTheCheckpointSavesNothing) {
  const double now = 50000;
  Job j = JobAt(now);
  PredictionVerdict v = EvaluatePrediction(j, now, 1.0, 99);
  EXPECT_FALSE(v.act);
  EXPECT_DOUBLE_EQ(v.saved_s, 0);
  EXPECT_TRUE(EvaluatePrediction(j, now, 1.0, 100).act);
}

TEST(PredictionTest, PeriodicCheckpointBeforeTheFailureMakesActingPointless) {
  const double now = 50000;
  Job j = JobAt(now);
  j.spec.checkpoint.interval_s = 1200;  // next one completes at now - 1000 + 1200 + 100
  PredictionVerdict v = EvaluatePrediction(j, now, 0.9, 600);
  EXPECT_FALSE(v.act) << v.arithmetic;
  EXPECT_TRUE(EvaluatePrediction(j, now, 0.9, 200).act);  // the failure comes first
}

TEST(PredictionTest, RuleEmitsACheckpointWithTheArithmetic) {
  Cluster c;
  ASSERT_TRUE(c.AddNode(testing::GpuNode("n", 3.06)).ok());
  const double now = 50000;
  Job proto = JobAt(now);
  ASSERT_TRUE(c.AddJob(proto.spec).ok());
  ASSERT_TRUE(c.Bind("j", "n").ok());
  Job* j = c.MutableJob("j");
  j->work_done_s = proto.work_done_s;
  j->progress_time = now;
  j->checkpoints = proto.checkpoints;
  Placer placer(c);
  PolicyConfig cfg;
  PolicyContext ctx{c, placer, cfg, now};
  Event e;
  e.trigger = Trigger::kFailurePrediction;
  e.node_id = "n";
  e.warning_s = 600;
  e.precision = 0.5;
  auto d = FailurePredictionRule().Evaluate(e, ctx);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].action, Action::kCheckpoint);
  EXPECT_NE(d[0].reason.find("0.50 x 1000 s = 500.0 s > cost"), std::string::npos) << d[0].reason;
  e.precision = 0.05;
  EXPECT_TRUE(FailurePredictionRule().Evaluate(e, ctx).empty());
}

}  // namespace
}  // namespace cairn::controller
