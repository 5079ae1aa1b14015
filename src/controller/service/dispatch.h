#pragma once
// How the controller's decisions reach the nodes. The controller decides (placement, policy
// rules) and records every decision as an event; an ActionDispatcher carries decisions out on
// the nodes. The node daemon (cairnd, issue 5) is not built yet, so the only implementation
// today is RecordOnlyDispatcher, which carries nothing out and says so in every event. cairnd's
// client will implement this interface: StartJob -> `job run` on the node, kCheckpoint ->
// `job checkpoint`, kMigrate -> `job migrate --to`, kRestore/kResume -> restore on the target
// from the checkpoint store, kSuspend -> checkpoint to storage then kill, kDrainNode -> no
// daemon call (the controller stops placing there).
//
// Thread safety: the controller calls a dispatcher with its own lock held, one call at a time.

#include <string>

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
};

// Records decisions and carries none out: the controller runs without node daemons.
class RecordOnlyDispatcher : public ActionDispatcher {
 public:
  DispatchResult StartJob(const Job&, const Node&) override { return {false, kNote}; }
  DispatchResult Carry(const Decision&) override { return {false, kNote}; }
  DispatchResult StopJob(const Job&, const Node&) override { return {false, kNote}; }
  std::string Describe() const override {
    return "record-only: decisions are recorded as events; no node daemon (cairnd) carries them out yet";
  }

 private:
  static constexpr char kNote[] = "recorded, not carried out: no node daemon connected (cairnd, issue 5)";
};

}  // namespace cairn::controller
