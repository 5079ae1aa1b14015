#pragma once
// An ActionDispatcher that carries the controller's decisions out on the node daemons (cairnd)
// through their gRPC API (proto/daemon.proto), at the address and with the token each daemon
// gave when it registered (RegisterNodeRequest.daemon_address / daemon_token).
//
//   StartJob       -> RunJob on the node, named by the controller's job id (a job already
//                     running there under that id counts as started: a retry after a lost reply).
//   kCheckpoint    -> CheckpointJob (pinned) on the job's node.
//   kSuspend       -> CheckpointJob (pinned, then stop the job) on the job's node; the dispatcher
//                     remembers the node that holds the checkpoint.
//   kResume        -> RestoreJob on the target: of the suspend checkpoint when the target took
//                     it, else from the checkpoint's location in the shared store.
//   kRestore       -> stop the job on its old node when that node answers (it must not run
//                     twice; a node the node-lost rule gave up is not called: it is fenced when
//                     it comes back); then from the beginning (restore_from_time < 0): RunJob on the
//                     target; from a checkpoint: RestoreJob(newest_stored, taken_before =
//                     restore_from_time) on the target, whose daemon restores the job's newest
//                     complete checkpoint in the store it shares with the old node. The
//                     controller learns of checkpoints from the daemons (NodeSignal CHECKPOINT).
//   kMigrate       -> a move.
//   kDrainNode     -> no daemon call: the controller stops placing there.
//   Locate         -> GetJob on the node: where a job runs, for the controller to follow.
//   RunningJobs    -> ListJobs on the node (its running jobs).
//   Kill           -> KillJob (fencing a copy the controller has placed elsewhere since).
//   CheckpointGroup-> CheckpointRank on every rank's node at once (group_checkpoint.h).
//   RestoreRank    -> RestoreJob of the rank's part by id (hold_network), on the node that took
//                     it or on another, which finds it in the store they share.
//   ReleaseRankNetwork -> ReleaseNetwork on the rank's node.
//   StopJob        -> KillJob on the node (a job that no longer runs there counts as stopped);
//                     its record, logs and checkpoints stay on the node.
//
// A move of a job's state from node A to node B is, in order of preference: (1) the daemons' own
// live migration: MigrateJob on A, to B's address with B's token (`cairn job migrate`), which
// streams the job's memory to B while it runs and freezes it only for the rest; should it fail,
// the job runs on at A untouched; (2) when A's checkpoints live in a shared store
// (NodeInfo.storage: dir:/PATH or s3://...), a checkpoint on A that stops the job, restored on B
// with RestoreJob(from = its location); should B refuse, the job is restored on A from that
// checkpoint. Otherwise (A stores locally, or cannot be asked) the move is reported not carried
// out, naming what is missing, after a pinned checkpoint on A where A answers (the job keeps
// running there); the decision stays pending on the job.
//
// Thread safety: the controller calls it with its own lock held, one call at a time; a mutex
// guards the node table all the same (NodeRegistered, Reaches).

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "controller/service/dispatch.h"
#include "daemon.grpc.pb.h"

namespace cairn::controller {

class CairndDispatcher : public ActionDispatcher {
 public:
  // `call_timeout_s`: the longest one daemon call may take (a checkpoint of a large job).
  // `tls_ca`: PEM CA certificates that daemons serving TCP in TLS are verified against (empty:
  // TCP in the clear).
  explicit CairndDispatcher(double call_timeout_s = 120, std::string tls_ca = "");

  DispatchResult StartJob(const Job& job, const Node& node) override;
  DispatchResult Carry(const Decision& decision) override;
  DispatchResult StopJob(const Job& job, const Node& node) override;
  std::string Describe() const override;
  bool RunsCommands() const override { return true; }
  void NodeRegistered(const std::string& node_id, const std::string& daemon_address,
                      const std::string& daemon_token) override;
  bool Reaches(const std::string& node_id) const override;
  void KnowJob(const Job& job) override;
  JobWhere Locate(const std::string& job_id, const std::string& node_id) override;
  absl::StatusOr<std::vector<std::pair<std::string, int>>> RunningJobs(const std::string& node_id) override;
  DispatchResult Kill(const std::string& job_id, const std::string& node_id) override;
  void SetTerm(uint64_t term) override { term_.store(term); }
  absl::StatusOr<std::vector<RankPart>> CheckpointGroup(
      const std::string& group, const std::string& id, const std::vector<RankRef>& ranks, bool stop,
      const std::function<absl::Status(const std::vector<RankPart>&)>& record) override;
  absl::Status RestoreRank(const RankPart& part, const std::string& node_id) override;
  absl::Status ReleaseRankNetwork(const std::string& job_id, const std::string& node_id) override;

 private:
  struct NodeDaemon {
    std::string address;
    std::string token;
    std::unique_ptr<daemon::api::Daemon::Stub> stub;  // null for a node without a daemon
    std::string error;  // why there is no stub although an address was given (e.g. the CA file)
  };

  // The node's daemon, or the reason it cannot be reached (as a note).
  NodeDaemon* Find(const std::string& node_id, std::string* why);
  // Calls `method` on node `d`'s daemon with its token, within `timeout_s` (0: the dispatcher's
  // call timeout).
  template <typename Req, typename Resp>
  grpc::Status Call(const NodeDaemon& d,
                    grpc::Status (daemon::api::Daemon::Stub::*method)(grpc::ClientContext*, const Req&, Resp*),
                    const Req& req, Resp* resp, double timeout_s = 0) const {
    grpc::ClientContext c;
    c.set_deadline(std::chrono::system_clock::now() +
                   std::chrono::duration_cast<std::chrono::milliseconds>(
                       std::chrono::duration<double>(timeout_s > 0 ? timeout_s : call_timeout_s_)));
    if (!d.token.empty()) c.AddMetadata("authorization", "Bearer " + d.token);
    // The daemon refuses a call from a term older than one it has heard of (a deposed leader).
    if (uint64_t t = term_.load(); t > 0) c.AddMetadata("cairn-controller-term", std::to_string(t));
    return (d.stub.get()->*method)(&c, req, resp);
  }
  DispatchResult Run(const std::string& job_id, const std::vector<std::string>& command, const std::string& node_id);
  // Checkpoints `job_id` on `node_id` (pinned; `stop`: then stops it). Waits for a checkpoint the
  // daemon is taking on its own (e.g. for a spot notice) to end first.
  absl::StatusOr<daemon::api::Checkpoint> Checkpoint(const std::string& job_id, const std::string& node_id, bool stop);
  DispatchResult Move(const Decision& d);
  // MigrateJob of `job_id` from `src` to `dst` (waits for a checkpoint `src` takes on its own).
  absl::StatusOr<daemon::api::MigrateJobResponse> Migrate(const std::string& job_id, NodeDaemon& src,
                                                         const NodeDaemon& dst);
  // Kills the job on the decision's old node where it answers; a note for the result.
  std::string StopOld(const Decision& d);
  // kRestore from a checkpoint: the newest stored one up to restore_from_time, on the target.
  DispatchResult RestoreNewest(const Decision& d, const std::string& stopped);

  const double call_timeout_s_;
  std::atomic<uint64_t> term_{0};
  const std::string tls_ca_;
  mutable std::mutex mu_;
  std::map<std::string, NodeDaemon> daemons_;             // GUARDED_BY(mu_)
  struct Suspended {
    std::string node;      // that took the suspend checkpoint
    std::string id;        // of the checkpoint
    std::string location;  // in that node's store
    bool shared = false;   // the store is one other nodes can reach
  };
  std::map<std::string, Suspended> suspended_;  // job -> its suspend checkpoint
  // job -> the command it was submitted with (kRestore from the beginning runs it again), from
  // StartJob and KnowJob.
  std::map<std::string, std::vector<std::string>> commands_;
  std::map<std::string, std::string> users_;  // job -> the node user it runs as (KnowJob)
  std::map<std::string, int> baselines_;      // job -> the x86-64 level it keeps to (KnowJob)
  std::map<std::string, std::pair<std::string, int>> ranks_;  // job -> its group and rank (KnowJob)
  std::map<std::string, std::vector<std::string>> addresses_;  // job -> its service addresses (KnowJob)
  std::map<std::string, double> intervals_;  // job -> its periodic checkpoint interval (s), for RunJob
  std::map<std::string, Resources> requests_;  // job -> what it asked for: its limits on the node (RunJob)
};

}  // namespace cairn::controller
