#pragma once
// Live migration of a job from this daemon to another one (docs/daemon.md, "Migration").
// Daemon::Migrate (the source) and Daemon::ReceiveJob (the destination) are implemented in
// migrate.cc; this header holds the pieces they share and that tests reach.
//
// The protocol, on one ReceiveJob stream (gRPC over TCP, the destination's bearer token):
//   source                                   destination
//   records the migration (Job.migration, the checkpoint id) in its catalog
//   Begin(spec, ...)              ------>    reserves the name          <- accepted
//   Data(pages.img ...)  (while the job runs here: pre-copy, tailed from the image)
//   -- freeze; final pages; commit --
//   Data(rest, headers, meta, logs), Finish ->  rewrites the image for this node, restores
//                                                 (lazily), job runs     <- running(pid)
//   holds the job in its freezer cgroup
//   Commit                        ------>    records the job as its own
//                                            (state running, arrived_with) <- committed
//   kills its copy, records `migrated`
//
// Who decides: the destination, with the one catalog write that commits (its job record
// with arrived_with = the migration's id). Before that write the migration is aborted
// wherever it stops (the destination kills what it restored when the stream ends without
// Commit, and a destination that restarts kills whatever runs in the cgroup of a job it has
// no running record of); after it, committed.
// The source never guesses. Until it sends Commit, any failure thaws the job where it was.
// From just before Commit until it learns the outcome, the job stands frozen in its freezer
// cgroup (the dump's guardian leaves it there if this daemon dies: HandOffControl::hold);
// when the reply does not come it asks MigrationOutcome: committed -> kill its copy,
// aborted -> thaw; no answer -> the job stays held (state `migrating`) and ResolveMigrations
// asks every 2 s, also after a restart (Recover), until the destination answers.
// So afterwards exactly one copy runs, and the records agree: `migrated` on the source only
// once the destination has committed.
// The cuts, each tested in tests/daemon/migrate_kill_test.cc (fault points named below):
//   source killed before the hold (migrate-begun... any time before migrate-held): the
//     guardian thaws the job; the destination sees the stream end and aborts; the restarted
//     source finds the job thawed and the record not committed: it runs here.
//   source killed at migrate-held or migrate-commit-sent: the job stays frozen here; the
//     restarted source asks and settles it either way.
//   destination killed at migrate-received / migrate-running / migrate-commit-received:
//     no commit record; its restart kills what it restored; the source learns "aborted"
//     (or no answer, then asks until it gets one) and thaws.
//   destination killed at migrate-adopted (committed, not yet answered): its restart adopts
//     the job; the source learns "committed" and kills its copy.
//   either destination cut, the destination down longer than the source asks (10 s): the
//     source holds the job (kHeld, state migrating) and ResolveMigrations settles it.

#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "daemon.pb.h"
#include "image.pb.h"

namespace cairn::daemon {

struct Peer {
  std::string address;  // HOST:PORT
  std::string node;     // the node name expected to answer there ("" when given as HOST:PORT)
};

// `to` is a node name among `peers` or a HOST:PORT. NotFound names the peers known.
absl::StatusOr<Peer> ResolvePeer(const std::string& to, const std::map<std::string, std::string>& peers,
                                 const std::string& self);

// Parses --peer NAME=HOST:PORT.
absl::Status AddPeer(const std::string& spec, std::map<std::string, std::string>* peers);

// Forgets the migration recorded in `job` (it was decided).
void ClearMigration(api::Job& job);

// Asks the daemon at `address` (with `token`) how migration `migration` of job `name` to it
// ended: "committed" (then *job, when given, is the job as it runs there), "in-progress" or
// "aborted"; an error when it does not answer.
absl::StatusOr<std::string> AskMigrationOutcome(const std::string& address, const std::string& token,
                                                const std::string& name, const std::string& migration, api::Job* job);

// Rewrites a received checkpoint's metadata for this node: descriptors that named files in
// `from_dir` (the job's logs on the source) name the same files under `to_dir` instead
// (with their device and inode here), and the job's cgroup and engine name become this
// node's. The metadata's checksum is recomputed.
// The rewritten metadata goes to `rewritten` when given.
absl::Status RewriteForNode(const std::string& image_dir, const std::string& from_dir, const std::string& to_dir,
                            const std::string& cgroup, const std::string& engine_name,
                            image::Checkpoint* rewritten = nullptr);

}  // namespace cairn::daemon
