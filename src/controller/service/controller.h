#pragma once
// The controller service's core: the cluster model kept in step with a Store, leadership, node
// liveness, placement of submitted jobs, and the policy rules run on events. The gRPC layer
// (grpc_service.h) only translates calls into these methods.
//
// Only the leader acts. Tick() runs one election round; on winning, the controller loads every
// node and job from the store (giving every node a fresh heartbeat grace period); on losing, it
// drops its model and every call but Leader() fails with Unavailable naming the leader.
//
// Every change is written to the store before the call returns; every decision (placement,
// node lost, each policy rule's decision) is recorded as an event with its reason, and handed to
// the ActionDispatcher (dispatch.h) to carry out.
//
// A controller can die, or be deposed (a partition from etcd, a long pause), in the middle of
// carrying a decision out. So:
//   - a decision that moves or stops a job is written on the job as *in flight* (StoredJob
//     in_flight) before any node is asked anything, and cleared in the same write that stores
//     its outcome. An in-flight decision found by a leader that is not carrying it out itself
//     (it loaded it from the store) is resolved by asking the nodes where the job is
//     (ResolveInFlightLocked): found on the target, it was carried out (applied); still running
//     where it was, it was not (abandoned; the rules decide again on their next trigger); on
//     neither, it is carried out again by this leader. Each ends with an event saying which and
//     why. No rule decides anything else for a job while its decision is in flight.
//   - each leadership has a term, one more than the last (stored under "term"); every daemon call
//     carries it, and a daemon refuses a call whose term is older than one it has heard (from a
//     call, a registration or a heartbeat answer), so a deposed leader that wakes up cannot carry
//     out a stale decision.
//   - where a job runs is the daemons' to say: a node that (re)registers reports its running
//     jobs (ReconcileNodeLocked); a job the controller had placed elsewhere is stopped there only
//     when its placed node confirms it runs it (a partition healed: one copy too many), and is
//     followed to this node when its placed node does not run it (a move whose outcome the
//     controller never stored).
//   - a long call (a migration) holds the controller's lock; the lease is renewed without it
//     (Tick campaigns first and skips the rest while a call runs) and heartbeats are timed when
//     they arrive, not when the lock is free, so a long move neither loses the leadership nor
//     makes nodes look lost.
// Fault points (CAIRN_FAULT_PAUSE, common/stop_points.h): controller-in-flight (the decision
// stored in flight, no node asked yet) and controller-carried (carried out, its outcome not yet
// stored).
//
// Thread safety: thread-safe; one mutex serializes calls (the model is single-threaded).

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "controller.pb.h"
#include "controller/cluster.h"
#include "controller/policy.h"
#include "controller/service/dispatch.h"
#include "controller/store/store.h"

namespace cairn::controller {

struct ControllerOptions {
  std::string id;                    // this controller's name in elections and status.
  double heartbeat_interval_s = 1;   // what nodes are told to use.
  double heartbeat_timeout_s = 5;    // silence after which a node is lost.
  // How often the deadline guard looks at every waiting batch job with a deadline (0 = never).
  double deadline_check_s = 30;
  // The event log keeps the newest this many events; older ones are deleted as new ones come.
  uint64_t keep_events = 100000;
  // A decision a node did not carry out (it refused, or did not answer) is tried again after
  // retry_first_s, then after twice as long each time (at most a minute), retry_tries times in
  // all before it is dropped with an event; a lost node's job is decided again until it runs.
  double retry_first_s = 2;
  int retry_tries = 5;
  PolicyConfig policy;
};

class Controller {
 public:
  // `store` and `dispatcher` must outlive the controller.
  Controller(Store* store, ActionDispatcher* dispatcher, ControllerOptions options);

  // One election round, then (as leader) the liveness check: nodes silent for longer than the
  // heartbeat timeout are declared lost and the node-lost rule runs. Call every ~ttl/3 s.
  void Tick();
  // Resigns leadership (clean shutdown).
  void Shutdown();

  absl::Status RegisterNode(const api::RegisterNodeRequest& req, api::RegisterNodeResponse* resp);
  absl::Status Heartbeat(const api::HeartbeatRequest& req);
  // Also says whether the node should register again (ActionDispatcher::Reaches).
  absl::Status Heartbeat(const api::HeartbeatRequest& req, api::HeartbeatResponse* resp);
  absl::Status ReportSignal(const api::NodeSignal& req, api::ReportSignalResponse* resp);
  absl::Status SubmitJob(const api::SubmitJobRequest& req, api::SubmitJobResponse* resp);
  absl::Status ClusterStatus(api::ClusterStatusResponse* resp);
  absl::Status ExplainJob(const api::ExplainJobRequest& req, api::ExplainJobResponse* resp);
  absl::Status ListEvents(const api::ListEventsRequest& req, api::ListEventsResponse* resp);
  absl::Status ScaleDown(const api::ScaleDownRequest& req, api::ScaleDownResponse* resp);
  absl::Status CancelJob(const api::CancelJobRequest& req, api::CancelJobResponse* resp);
  absl::Status RemoveNode(const api::RemoveNodeRequest& req, api::RemoveNodeResponse* resp);
  // Job groups (groups.cc).
  absl::Status CheckpointGroup(const api::CheckpointGroupRequest& req, api::CheckpointGroupResponse* resp);
  absl::Status RestoreGroup(const api::RestoreGroupRequest& req, api::RestoreGroupResponse* resp);
  absl::Status ListGroupCheckpoints(const api::ListGroupCheckpointsRequest& req, api::ListGroupCheckpointsResponse* resp);
  api::LeaderResponse Leader();

 private:
  using Clock = std::chrono::steady_clock;

  absl::Status RequireLeaderLocked() const;
  // The ranks of `group` by rank (groups.cc); with `running`, refused unless each runs, started.
  absl::StatusOr<std::vector<RankRef>> GroupRanksLocked(const std::string& group, bool running);
  // The group checkpoint `id` of `group` in the store (empty id: the newest); nullopt if none.
  absl::StatusOr<std::optional<api::GroupCheckpoint>> GroupCheckpointLocked(const std::string& group,
                                                                            const std::string& id);
  // Restores every rank of `g`, those in `moved` (rank -> node) on that node from the shared store,
  // the others where they were; all or nothing (groups.cc).
  absl::Status RestoreGroupLocked(const api::GroupCheckpoint& g, const std::map<int, std::string>& moved,
                                  std::vector<std::string>* notes);
  // Node `lost_node` is lost: every group with a rank there is restored whole from its newest
  // group checkpoint, that rank on another node (groups.cc).
  absl::Status FailOverGroupsLocked(const std::string& lost_node);
  // Restores `group` whole from its newest group checkpoint because `why`: its ranks on
  // `lost_node` (if any) on other nodes, the others where they are, after the ranks still
  // running are stopped (`dead_job`, the rank that died, is not) (groups.cc). Records what it did.
  absl::Status FailOverGroupLocked(const std::string& group, const std::string& lost_node, const std::string& node,
                                   const std::string& dead_job, const std::string& why,
                                   std::vector<api::Event>* out = nullptr);
  // A node's report that a job ended by itself (NodeSignal JOB_ENDED): recorded; a group's rank
  // that died takes its group back to its newest group checkpoint (groups.cc).
  absl::Status JobEndedLocked(const api::NodeSignal& req, api::ReportSignalResponse* resp);
  // A node with a rank of `group` whose daemon does not answer; empty when every one does.
  std::string UnreachableRankNodeLocked(const std::string& group);
  // Taking the lead: the next term, stored.
  absl::Status NewTermLocked();
  // Rebuilds the model from the store (on taking leadership).
  absl::Status LoadLocked();
  void DropLocked();
  // A store write failed: when it failed because leadership was lost, step down at once.
  absl::Status StoreFailedLocked(const absl::Status& s);
  absl::Status SaveNodeLocked(const std::string& id);
  absl::Status SaveJobLocked(const std::string& id);
  // Assigns the event its sequence number and time, and persists it.
  absl::Status RecordLocked(api::Event ev, std::vector<api::Event>* out = nullptr);
  // Tries to place one pending job and stores it (bound, or pending); fills the event that says
  // what happened for the caller to record. Sets *node_id when placed.
  absl::Status PlaceLocked(const std::string& job_id, std::string* node_id, std::string* reason,
                           api::Event* event);
  // Places every pending job (highest priority first) after capacity appeared.
  absl::Status PlacePendingLocked();
  // Runs the policy rules on `event`, records each decision and dispatches it.
  absl::Status HandleLocked(const Event& event, std::vector<api::Event>* out = nullptr);
  // Carries one decision out (stored in flight first where TrackedInFlight), records it with the
  // dispatcher's note and applies it to the model; one not carried out stays the job's pending
  // action and is tried again (RetryLaterLocked).
  absl::Status CarryLocked(const Decision& d, std::vector<api::Event>* out);
  // Schedules `d`, which the dispatcher did not carry out (`r`), to be tried again after its
  // backoff (ControllerOptions::retry_first_s); never for a final refusal (kept, its pending
  // action shown) or a dispatcher that carries nothing out. Returns what to add to the
  // decision's event ("" for nothing).
  std::string RetryLaterLocked(const Decision& d, const DispatchResult& r);
  // Every tick: each pending decision whose backoff ended is carried out again if it still
  // holds (the job where the decision found it, the target healthy with room for it), else
  // dropped with a "decision-dropped" event, as it is after retry_tries tries. A job whose node
  // is lost is decided again by the node-lost rule (a new target) until it runs somewhere.
  // Pending actions an earlier leader left are adopted: a lost node's job is decided again, any
  // other decision dropped (the job runs where it is).
  absl::Status RetryPendingLocked();
  // A node's report that a checkpoint of a job is complete in shared storage (NodeSignal CHECKPOINT).
  absl::Status RecordCheckpointLocked(const api::NodeSignal& req, api::ReportSignalResponse* resp);
  // Applies a decision the dispatcher carried out to the model.
  // `runs_there`: the target's daemon says the job runs there (bound whatever its health).
  absl::Status ApplyLocked(const Decision& d, bool runs_there = false);
  absl::Status CheckHeartbeatsLocked();
  // A node came back or registered again: its running jobs are compared with the model. A job
  // placed there but not confirmed started is confirmed (or started again when it does not run);
  // a job placed on another node that runs it too is stopped here (event "fenced"); a job placed
  // on a node that does not run it is followed here (event "job-found").
  absl::Status ReconcileNodeLocked(const std::string& node_id);
  // The node is lost, or unknown to the model.
  bool LostLocked(const std::string& node_id) const;
  // Resolves every decision stored in flight that this controller is not carrying out (see the
  // header comment). Waits, keeping it in flight, while a node it must ask does not answer or
  // says the job is busy (a migration the daemons are settling).
  absl::Status ResolveInFlightLocked();
  // Ends the in-flight decision of `job_id` with an event of `kind` ("decision-resolved",
  // "decision-abandoned", "decision-resumed") saying `reason`.
  absl::Status EndInFlightLocked(const std::string& job_id, const std::string& kind, const std::string& reason,
                                 const std::string& dispatch = "");
  // The deadline guard: runs the deadline-check rule on every pending or suspended batch job
  // with a deadline that has no decision waiting for a node already.
  absl::Status CheckDeadlinesLocked();
  // Deletes the oldest events beyond options_.keep_events (a few per call, so the log shrinks
  // at the pace it grows without one long pause).
  absl::Status PruneEventsLocked();
  // `explain_wait`: for a job that waits for a node, work out why it cannot be placed
  // (WhyWaiting; else the status says to ask `cairn job explain`).
  api::JobStatus JobStatusLocked(const Job& job, bool explain_wait = true) const;
  // Why `job`, which waits for a node, cannot be placed now ("" when a node could take it).
  // REQUIRES: mu_ held.
  std::string WhyWaiting(const Job& job) const;
  static double Now();

  Store* const store_;
  ActionDispatcher* const dispatcher_;
  const ControllerOptions options_;
  const PolicyEngine engine_;

  std::mutex mu_;
  bool leader_ = false;     // GUARDED_BY(mu_)
  std::string leader_id_;   // GUARDED_BY(mu_)
  std::unique_ptr<Cluster> cluster_;  // non-null iff leader_. GUARDED_BY(mu_)
  std::map<std::string, Clock::time_point> last_heartbeat_;  // GUARDED_BY(mu_)
  // When each node's last heartbeat arrived, taken before waiting for mu_ (a long call holds it).
  std::mutex heard_mu_;
  std::map<std::string, Clock::time_point> heard_;  // GUARDED_BY(heard_mu_)
  uint64_t term_ = 0;                                // this leadership's term. GUARDED_BY(mu_)
  std::map<std::string, api::InFlight> in_flight_;   // job -> decision being carried out
  // Nodes whose reconciliation left a job undecided (its placed node busy or silent): again next tick.
  std::set<std::string> reconcile_again_;
  std::set<std::string> deferred_noted_;  // "job@node" whose fence-deferred event is recorded
  std::set<std::string> waiting_noted_;   // jobs whose decision-waiting event is recorded
  std::map<std::string, std::string> pending_action_;        // job -> decision text
  // Decisions a node did not carry out, tried again (RetryPendingLocked): job -> the decision.
  struct Retry {
    Decision decision;
    int tries = 0;  // carried out and not done so far
    Clock::time_point next;
  };
  static constexpr double kRetryMaxWaitS = 60;
  std::map<std::string, Retry> retry_;  // GUARDED_BY(mu_)
  std::map<std::string, bool> started_;                      // job -> dispatcher confirmed
  std::map<std::string, uint64_t> registered_seq_;           // node -> registration order
  std::map<std::string, api::JobSpec> specs_;                // job -> the spec as submitted
  // group -> when (unix s, wall clock) its ranks were last brought back (a failover or a group
  // restore): a rank's end that happened before is one of its causes or consequences, not news.
  std::map<std::string, double> group_failed_over_at_;
  // group checkpoint id -> failovers that came back from it after a rank died: a group whose
  // ranks keep dying from the same state is not brought back for ever.
  std::map<std::string, int> rank_death_failovers_;
  uint64_t next_seq_ = 1;
  uint64_t first_seq_ = 1;  // the oldest event still in the store
  Clock::time_point last_deadline_check_{};
};

}  // namespace cairn::controller
