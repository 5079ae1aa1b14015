// CairndDispatcher without daemons: what it says when it cannot carry a decision out. The path
// with real daemons is tests/daemon/cluster_test.cc.

#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "controller/service/cairnd_dispatcher.h"

namespace cairn::controller {
namespace {

Job MakeJob(const std::string& id, std::vector<std::string> command) {
  Job j;
  j.spec.id = id;
  j.spec.command = std::move(command);
  return j;
}

Node MakeNode(const std::string& id) {
  Node n;
  n.spec.id = id;
  return n;
}

TEST(CairndDispatcher, AsksUnknownNodesToRegisterAgain) {
  CairndDispatcher d(5);
  EXPECT_FALSE(d.Reaches("a"));
  d.NodeRegistered("a", "", "");
  EXPECT_TRUE(d.Reaches("a"));
  DispatchResult r = d.StartJob(MakeJob("j", {"/bin/true"}), MakeNode("b"));
  EXPECT_FALSE(r.done);
  EXPECT_TRUE(absl::StrContains(r.note, "node b has not registered with this controller")) << r.note;
}

TEST(CairndDispatcher, NodeWithoutDaemonOrJobWithoutCommandIsNotCarriedOut) {
  CairndDispatcher d(5);
  d.NodeRegistered("a", "", "");
  DispatchResult r = d.StartJob(MakeJob("j", {"/bin/true"}), MakeNode("a"));
  EXPECT_FALSE(r.done);
  EXPECT_TRUE(absl::StrContains(r.note, "registered without a daemon address")) << r.note;
  d.NodeRegistered("a", "unix:/nonexistent/cairnd.sock", "");
  r = d.StartJob(MakeJob("j", {}), MakeNode("a"));
  EXPECT_FALSE(r.done);
  EXPECT_TRUE(absl::StrContains(r.note, "has no command")) << r.note;
}

TEST(CairndDispatcher, DaemonThatDoesNotAnswerIsNamed) {
  CairndDispatcher d(5);
  d.NodeRegistered("a", "unix:/nonexistent/cairnd.sock", "");
  DispatchResult r = d.StartJob(MakeJob("j", {"/bin/sleep", "1"}), MakeNode("a"));
  EXPECT_FALSE(r.done);
  EXPECT_TRUE(absl::StrContains(r.note, "cairnd on a at unix:/nonexistent/cairnd.sock refused RunJob")) << r.note;
}

TEST(CairndDispatcher, DrainNeedsNoDaemonAndMovesNeedKnownNodes) {
  CairndDispatcher d(5);
  Decision drain;
  drain.action = Action::kDrainNode;
  drain.node_id = "a";
  EXPECT_TRUE(d.Carry(drain).done);
  Decision move;
  move.action = Action::kMigrate;
  move.job_id = "j";
  move.node_id = "a";
  move.target_node_id = "b";
  DispatchResult r = d.Carry(move);
  EXPECT_FALSE(r.done);
  EXPECT_TRUE(absl::StartsWith(r.note, "not yet available: moving job j to b")) << r.note;
  EXPECT_TRUE(absl::StrContains(r.note, "node a has not registered")) << r.note;
  Decision restore;
  restore.action = Action::kRestore;
  restore.job_id = "j";
  restore.node_id = "a";
  restore.target_node_id = "b";
  restore.restore_from_time = 1000;
  r = d.Carry(restore);
  EXPECT_FALSE(r.done);
  // A restore from a checkpoint asks the target's daemon for the newest stored one: the target
  // must be known (e2e_test.cc carries one out).
  EXPECT_TRUE(absl::StrContains(r.note, "not carried out: node b has not registered")) << r.note;
}

// A restart from the beginning needs the job's command: known from StartJob, or, for a job a
// previous leader started, from KnowJob (the controller calls it for every job it loads).
TEST(CairndDispatcher, RestartFromTheBeginningUsesTheCommandOfAKnownJob) {
  CairndDispatcher d(5);
  d.NodeRegistered("b", "unix:/nonexistent/cairnd.sock", "");
  Decision restart;
  restart.action = Action::kRestore;
  restart.job_id = "j";
  restart.target_node_id = "b";
  restart.restore_from_time = -1;
  DispatchResult r = d.Carry(restart);
  EXPECT_FALSE(r.done);
  EXPECT_TRUE(absl::StrContains(r.note, "the command of job j is not known")) << r.note;
  d.KnowJob(MakeJob("j", {"/bin/sleep", "60"}));
  r = d.Carry(restart);
  EXPECT_FALSE(r.done);
  EXPECT_TRUE(absl::StrContains(r.note, "cairnd on b at unix:/nonexistent/cairnd.sock refused RunJob")) << r.note;
}

}  // namespace
}  // namespace cairn::controller
