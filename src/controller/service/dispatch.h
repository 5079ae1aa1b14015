#pragma once
// How the controller's decisions reach the nodes. The controller decides (placement, policy
// rules) and records every decision as an event; an ActionDispatcher carries decisions out on
// the nodes. Two implementations: RecordOnlyDispatcher (below) carries nothing out and says so
// in every event; CairndDispatcher (cairnd_dispatcher.h, `cairn-controller --dispatch cairnd`)
// calls the node daemons' gRPC API at the address each daemon gave when it registered.
//
// Thread safety: the controller calls a dispatcher with its own lock held, one call at a time.

#include <functional>
#include <string>
#include <vector>

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
  // A node (re-)registered; `daemon_address` ("HOST:PORT" or "unix:PATH", empty for a node
  // without a daemon) and `daemon_token` (for TCP) say how to reach its daemon.
  virtual void NodeRegistered(const std::string& node_id, const std::string& daemon_address,
                              const std::string& daemon_token) {
    (void)node_id, (void)daemon_address, (void)daemon_token;
  }
  // The controller knows `job` (a new leader loaded it from the store): what the dispatcher
  // needs of it later (its command, to run it again from the beginning) is taken from here.
  virtual void KnowJob(const Job& job) { (void)job; }
  // Fencing: the node came back (it was lost, or its daemon registered again). Stops there every
  // job it still runs that `runs_elsewhere` says the controller has placed on another node
  // since -- a node cut off by a partition keeps running its jobs while they are
  // restored elsewhere, and no job may run twice. Jobs the controller never knew are left alone.
  // Returns one note per job stopped or failed to stop.
  virtual std::vector<std::string> Fence(const std::string& node_id,
                                         const std::function<bool(const std::string& job_id)>& runs_elsewhere) {
    (void)node_id, (void)runs_elsewhere;
    return {};
  }
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
  std::string Describe() const override {
    return "record-only: decisions are recorded as events; nothing carries them out (--dispatch cairnd makes the "
           "node daemons do it)";
  }

 private:
  static constexpr char kNote[] = "recorded, not carried out: this controller runs with --dispatch record";
};

}  // namespace cairn::controller
