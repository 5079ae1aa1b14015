#pragma once
// The coordinator of a group checkpoint (docs/controller.md "Job groups"): one consistent cut
// of a job group whose ranks run on several nodes. It drives each rank's daemon through
// CheckpointRank (daemon.proto; the rank's side is daemon/group.cc):
//
//   1. Prepare, every rank at once: each checks what it can while it runs and says `ready`.
//   2. Freeze, to every rank at once (so that they freeze together, none waiting frozen for
//      another to start): each is locked, frozen and its state captured, and stays frozen.
//      With `stop` its part is also committed and recorded complete on its node first.
//   3. Decide commit to every rank: a live rank is thawed and commits after (its writes are
//      no downtime), a stopping one is killed. With `stop`, `record` (the controller writes the
//      group checkpoint to its store) comes before this decision: every part is durable and no
//      rank may die unrecorded.
//   4. Live: once every rank has committed, `record`.
//   Any rank failing before 3, or `record` failing in 3: Decide abort to those that prepared
//   (thawed untouched, their parts removed), nothing recorded. A live rank failing its commit
//   in 4: the others' parts are removed, nothing recorded; every rank runs on.
//
// A rank is frozen from the common freeze until the decision reaches it: the slowest rank's
// capture plus one message (with `stop`, the commits and the record too). The coordinator dying
// between a `stop` record and the decisions leaves each rank to thaw on its own (the stream
// breaks) with its part kept, so a recorded group checkpoint stays whole; dying otherwise leaves
// parts no record names (listed on their nodes with their group checkpoint id until deleted).

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "controller/service/dispatch.h"
#include "daemon.grpc.pb.h"

namespace cairn::controller {

struct RankTarget {
  RankRef ref;
  daemon::api::Daemon::Stub* stub = nullptr;             // the rank's node's daemon
  std::function<void(grpc::ClientContext&)> authorize;  // adds the node's token (and the term)
};

struct GroupCheckpointOptions {
  bool stop = false;              // stop every rank when the group commits
  double prepare_timeout_s = 600;  // the longest one rank's dump may take
  // How long a prepared rank waits frozen for the decision before it thaws on its own (its
  // daemon's watchdog): covers the slowest rank's dump after the fastest one's.
  double decide_timeout_s = 600;
};

// Runs the group checkpoint `id` of `group` over `ranks`. Returns every rank's part once all
// were told to commit; an error (naming each rank that failed and why) when it was called off.
absl::StatusOr<std::vector<RankPart>> RunGroupCheckpoint(
    const std::string& group, const std::string& id, const std::vector<RankTarget>& ranks,
    const GroupCheckpointOptions& opts, const std::function<absl::Status(const std::vector<RankPart>&)>& record);

}  // namespace cairn::controller
