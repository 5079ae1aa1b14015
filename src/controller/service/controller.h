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
// Thread safety: thread-safe; one mutex serializes calls (the model is single-threaded).

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
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
  api::LeaderResponse Leader();

 private:
  using Clock = std::chrono::steady_clock;

  absl::Status RequireLeaderLocked() const;
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
  // A node's report that a checkpoint of a job is complete in shared storage (NodeSignal CHECKPOINT).
  absl::Status RecordCheckpointLocked(const api::NodeSignal& req, api::ReportSignalResponse* resp);
  // Applies a decision the dispatcher carried out to the model.
  absl::Status ApplyLocked(const Decision& d);
  absl::Status CheckHeartbeatsLocked();
  // A node came back or registered again: its daemon stops the jobs it still runs that are placed
  // on other nodes now (a partitioned node declared lost), each an event "fenced".
  absl::Status FenceLocked(const std::string& node_id);
  // The deadline guard: runs the deadline-check rule on every pending or suspended batch job
  // with a deadline that has no decision waiting for a node already.
  absl::Status CheckDeadlinesLocked();
  // Deletes the oldest events beyond options_.keep_events (a few per call, so the log shrinks
  // at the pace it grows without one long pause).
  absl::Status PruneEventsLocked();
  api::JobStatus JobStatusLocked(const Job& job) const;
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
  std::map<std::string, std::string> pending_action_;        // job -> decision text
  std::map<std::string, bool> started_;                      // job -> dispatcher confirmed
  std::map<std::string, uint64_t> registered_seq_;           // node -> registration order
  std::map<std::string, api::JobSpec> specs_;                // job -> the spec as submitted
  uint64_t next_seq_ = 1;
  uint64_t first_seq_ = 1;  // the oldest event still in the store
  Clock::time_point last_deadline_check_{};
};

}  // namespace cairn::controller
