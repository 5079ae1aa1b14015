#pragma once
// Live migration of a job from this daemon to another one (docs/daemon.md, "Migration").
// Daemon::Migrate (the source) and Daemon::ReceiveJob (the destination) are implemented in
// migrate.cc; this header holds the pieces they share and that tests reach.
//
// The protocol, on one ReceiveJob stream (gRPC over TCP, the destination's bearer token):
//   source                                   destination
//   Begin(spec, ...)              ------>    reserves the name          <- accepted
//   Data(pages.img ...)  (while the job runs here: pre-copy, tailed from the image)
//   -- freeze; final pages; commit --
//   Data(rest, headers, meta, logs), Finish ->  rewrites the image for this node, restores
//                                                 (lazily), job runs     <- running(pid)
//   Commit                        ------>    adopts it into its catalog <- committed
//   kills its frozen copy
// Until `running` the job stands frozen on the source; any failure before then thaws it
// there (the destination kills whatever it restored when the stream ends without Commit).
// When the stream breaks after Commit was sent but before `committed` came back, the
// source asks the destination (GetJob) whether it adopted the job, and only then kills or
// thaws.

#include <map>
#include <string>

#include "absl/status/statusor.h"

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

// Rewrites a received checkpoint's metadata for this node: descriptors that named files in
// `from_dir` (the job's logs on the source) name the same files under `to_dir` instead
// (with their device and inode here), and the job's cgroup and engine name become this
// node's. The metadata's checksum is recomputed.
absl::Status RewriteForNode(const std::string& image_dir, const std::string& from_dir, const std::string& to_dir,
                            const std::string& cgroup, const std::string& engine_name);

}  // namespace cairn::daemon
