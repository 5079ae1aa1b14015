#pragma once
// The coordinator of a group checkpoint (docs/controller.md "Job groups"): one consistent cut
// of a job group whose ranks run on several nodes. It drives each rank's daemon through
// CheckpointRank (daemon.proto; the rank's side is daemon/group.cc) in two phases:
//
//   1. Prepare, every rank at once: each is locked, frozen, dumped and its checkpoint recorded
//      complete on its node, and stays frozen.
//   2. Once every rank is prepared: `record` (the controller writes the group checkpoint to its
//      store), then Decide commit to every rank (each is thawed, or stopped). Any rank failing
//      in phase 1, or `record` failing: Decide abort to those that prepared (thawed, their
//      part removed), and nothing is recorded.
//
// A rank is frozen from its own freeze until the decision reaches it: its own dump plus the
// wait for the slowest rank plus one message. The coordinator dying between `record` and the
// decisions leaves each rank to thaw on its own (the stream breaks) with its part kept, so a
// recorded group checkpoint stays whole; dying before `record` leaves parts no record names
// (each node's retention removes them like any old checkpoint).

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
