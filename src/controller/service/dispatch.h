#pragma once
// How the controller's decisions reach the nodes. The controller decides (placement, policy
// rules) and records every decision as an event; an ActionDispatcher carries decisions out on
// the nodes. Two implementations: RecordOnlyDispatcher (below) carries nothing out and says so
// in every event; CairndDispatcher (cairnd_dispatcher.h, `cairn-controller --dispatch cairnd`)
// calls the node daemons' gRPC API at the address each daemon gave when it registered.
//
// Thread safety: the controller calls a dispatcher with its own lock held, one call at a time.

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

#include "controller/cluster.h"
#include "controller/policy.h"

namespace cairn::controller {

struct DispatchResult {
  // True when the action was carried out; the controller then applies it to its cluster model
  // (e.g. binds a migrated job to its target). False: the decision stays pending on the job.
  bool done = false;
  std::string note;  // recorded in the decision's event.
  // The node was asked and refused, or could not be reached (as opposed to a dispatcher that
  // only records decisions and asks nobody).
  bool failed = false;
  // Not carried out for a reason a later try cannot change (no storage both nodes share, no
  // command to run): the controller does not try it again (Controller::RetryPendingLocked).
  bool final = false;
};

// A rank of a job group (docs/controller.md "Job groups"): its job and the node it runs on.
struct RankRef {
  std::string job_id;
  int rank = 0;
  std::string node_id;
};
// One rank's part of a group checkpoint: its job's checkpoint on its node.
struct RankPart {
  RankRef ref;
  std::string checkpoint;  // id on the node
  std::string location;    // where the node keeps it
  double dump_s = 0;       // the rank's own dump, freeze to commit
  double frozen_s = 0;     // how long it stood frozen, the wait for the others included
};

class ActionDispatcher {
 public:
  virtual ~ActionDispatcher() = default;
  // Starts a job the controller just placed on `node`.
  virtual DispatchResult StartJob(const Job& job, const Node& node) = 0;
  // Carries out one policy decision.
  virtual DispatchResult Carry(const Decision& decision) = 0;
  // Stops a job the user cancelled, on the node it runs on.
  virtual DispatchResult StopJob(const Job& job, const Node& node) = 0;
  // One line for `cairn cluster status`.
  virtual std::string Describe() const = 0;
  // Whether jobs are run from their command (a job without one cannot be started: refused at
  // submit). False for a dispatcher that only records decisions.
  virtual bool RunsCommands() const { return false; }
  // A node (re-)registered; `daemon_address` ("HOST:PORT" or "unix:PATH", empty for a node
  // without a daemon) and `daemon_token` (for TCP) say how to reach its daemon.
  virtual void NodeRegistered(const std::string& node_id, const std::string& daemon_address,
                              const std::string& daemon_token) {
    (void)node_id, (void)daemon_address, (void)daemon_token;
  }
  // The controller knows `job` (a new leader loaded it from the store): what the dispatcher
  // needs of it later (its command, to run it again from the beginning) is taken from here.
  virtual void KnowJob(const Job& job) { (void)job; }
  // What a node's daemon says of a job: where a job runs is the daemons' to say (a migration
  // between them is two-phase: exactly one runs it afterwards), the controller's model follows.
  struct JobWhere {
    enum Kind {
      kUnreachable,  // not asked (no daemon known for the node) or no answer
      kAbsent,       // the daemon has no job of that name
      kRunning,
      kBusy,         // starting, checkpointing, migrating: ask again later
      kGone,         // exited, killed, migrated away, failed
    };
    Kind kind = kUnreachable;
    std::string state;  // the daemon's word for it, or why it was not asked
    int pid = 0;
  };
  virtual JobWhere Locate(const std::string& job_id, const std::string& node_id) {
    (void)job_id, (void)node_id;
    return {JobWhere::kUnreachable, "this dispatcher asks no node", 0};
  }
  // A group checkpoint `id` of `group` over `ranks` (group_checkpoint.h): every rank frozen and
  // dumped, `record` called once all are, then each thawed (or stopped with `stop`); called off
  // on any failure. Unimplemented where the dispatcher asks no node.
  virtual absl::StatusOr<std::vector<RankPart>> CheckpointGroup(
      const std::string& group, const std::string& id, const std::vector<RankRef>& ranks, bool stop,
      const std::function<absl::Status(const std::vector<RankPart>&)>& record) {
    (void)group, (void)id, (void)ranks, (void)stop, (void)record;
    return absl::UnimplementedError("this dispatcher asks no node: start the controller with --dispatch cairnd");
  }
  // Restores one rank from its part of a group checkpoint on node `node_id` (the one that took it,
  // or another that reaches the part's location in a shared store). Its connections stay behind
  // that node's network lock until ReleaseRankNetwork: the group's other ranks are not back yet.
  virtual absl::Status RestoreRank(const RankPart& part, const std::string& node_id) {
    (void)part, (void)node_id;
    return absl::UnimplementedError("this dispatcher asks no node: start the controller with --dispatch cairnd");
  }
  // Lets a restored rank's connections flow (every rank of its group is back).
  virtual absl::Status ReleaseRankNetwork(const std::string& job_id, const std::string& node_id) {
    (void)job_id, (void)node_id;
    return absl::UnimplementedError("this dispatcher asks no node: start the controller with --dispatch cairnd");
  }
  // The jobs running on the node (name, pid); Unavailable when its daemon cannot be asked.
  virtual absl::StatusOr<std::vector<std::pair<std::string, int>>> RunningJobs(const std::string& node_id) {
    (void)node_id;
    return std::vector<std::pair<std::string, int>>{};
  }
  // Stops the job on the node (fencing a copy that must not run there); a note for the event.
  virtual DispatchResult Kill(const std::string& job_id, const std::string& node_id) {
    (void)job_id, (void)node_id;
    return {false, "this dispatcher stops nothing"};
  }
  // False for a dispatcher that asks no node anything (decisions are then not tracked in flight).
  virtual bool CarriesOut() const { return true; }
  // The leader's term, sent with every call so that daemons refuse a deposed leader's.
  virtual void SetTerm(uint64_t term) { (void)term; }
  // False when the dispatcher needs the node to register again (it does not know how to reach
  // the node's daemon, e.g. after the controller restarted); heartbeats then ask for it.
  virtual bool Reaches(const std::string& node_id) const {
    (void)node_id;
    return true;
  }
};

// Records decisions and carries none out: the controller runs without node daemons.
class RecordOnlyDispatcher : public ActionDispatcher {
 public:
  DispatchResult StartJob(const Job&, const Node&) override { return {false, kNote}; }
  DispatchResult Carry(const Decision&) override { return {false, kNote}; }
  DispatchResult StopJob(const Job&, const Node&) override { return {false, kNote}; }
  bool CarriesOut() const override { return false; }
  std::string Describe() const override {
    return "record-only: decisions are recorded as events; nothing carries them out (--dispatch cairnd makes the "
           "node daemons do it)";
  }

 private:
  static constexpr char kNote[] = "recorded, not carried out: this controller runs with --dispatch record";
};

}  // namespace cairn::controller
