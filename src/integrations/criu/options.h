#pragma once
// A container runtime's checkpoint options (criu_rpc.proto Options) in cairn's terms: what
// each one asks, and whether cairn does it. An option cairn honours becomes part of the dump
// or restore; one it cannot is refused with a message the runtime shows its user (and writes
// in its log file). An option the protocol has that this file does not know (a field number
// it has never seen) is refused by number.
//
// orphan_pts_master (a RESTORE option; the service acts on it): a container's terminal whose
// master was its runtime's console (runc --console-socket) is made again on the container's
// devpts, and its new master goes to the runtime with the notification "orphan-pts-master".
//
// Some options are permissions or hints whose CRIU meaning cairn meets by what it always does;
// they are taken without changing anything, for these reasons:
//   shell_job, ext_unix_sk, file_locks   permissions: cairn saves locks always, and still
//                                        refuses (saying what) a session or socket it cannot save;
//   evasive_devices                      leniency: cairn checks a device by its number, strictly;
//   manage_cgroups, cg_root              the runtime places the processes in their cgroups (runc
//                                        moves this process there first) and sets the properties;
//   rst_sibling                          the restored init is this process's child, and the
//                                        runtime's once this process exits (runc is a child
//                                        subreaper): runtimes restore detached;
//   auto_dedup, ghost_limit, link_remap, force_irmap, irmap_scan_paths, tcp_skip_in_flight,
//   weak_sysctls, timeout, cpu_cap, status_fd, log_level
//                                        CRIU's own tuning, with no counterpart in cairn's engine.

#include <sys/types.h>

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/unique_fd.h"
#include "criu_rpc.pb.h"
#include "engine/dump/dump.h"
#include "engine/restore/restore.h"

namespace cairn::criu_compat {

// The image and work directories a request names by descriptors of the runtime (the peer),
// as paths this process can use (/proc/self/fd/N of its own copies, held here).
struct RequestDirs {
  std::string images;
  std::string work;  // where log_file goes: the work directory, else the images directory
  std::vector<UniqueFd> held;
};

// Opens the runtime's images_dir_fd (and work_dir_fd) through /proc/PEER/fd.
absl::StatusOr<RequestDirs> OpenRequestDirs(const criu_rpc::Options& opts, pid_t peer);

// cairn's checkpoint inside the runtime's images directory (the runtime carries the directory;
// the format inside is cairn's own, checksummed and sealed).
std::string ImageDir(const std::string& images);

// The link next to ImageDir naming a dump's parent (image/chain.h: a parent is a name next
// to its child): <images>/cairn.parent -> <parent_img>/cairn.
std::string ParentLink(const std::string& images);

struct DumpRequest {
  dump::DumpOptions dump;
  // parent_img: where the link ParentLink points (the parent's ImageDir, relative to the
  // images directory as the runtime gave it); empty for a dump without one.
  std::string parent_target;
};

// DUMP and PRE_DUMP. `images`: RequestDirs::images. A pre-dump is a checkpoint of the running
// container that tracks its writes from then on (with its memory copied while it runs, or only
// what was written since its own parent_img); a dump naming it as parent_img saves only the
// pages written since (dump/tracker.h).
absl::StatusOr<DumpRequest> DumpFromRequest(const criu_rpc::Options& opts, bool pre_dump, const std::string& images);

// RESTORE. The descriptors inherit_fd names are this process's own (the runtime passed them).
absl::StatusOr<restore::RestoreOptions> RestoreFromRequest(const criu_rpc::Options& opts, const std::string& images);

}  // namespace cairn::criu_compat
