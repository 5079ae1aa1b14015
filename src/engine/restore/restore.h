#pragma once
// The restore driver: rebuilds a checkpointed process or process tree, with its PIDs and
// thread IDs (inside a fresh PID namespace for a job), from a checkpoint directory, and
// lets it run.
//
// Stages: open and verify the image; open the "master" descriptors in the restorer
// (restore/files.h); create the root as a copy of the restorer that stops itself; fork
// the tree's skeleton top-down from it (sessions, groups, shared memory); rebuild each
// process by injected syscalls (address space, memory, state, descriptors, threads);
// set final registers; let every task go at once; turn zombies back into zombies.

#include <sys/types.h>

#include <functional>
#include <map>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "engine/image/seal.h"
#include "engine/net/claim.h"
#include "engine/restore/container.h"

namespace cairn::restore {

struct RestoreOptions {
  std::string dir;
  // Processes holding device state (docs/gpu.md): the GPU (NVML index) of the dump's machine ->
  // the GPU here it is restored onto. A GPU not named goes onto the one of the same index.
  std::map<int, int> gpu_map;
  // gpu_map may name GPUs the checkpoint did not use (a job's, some unused by its processes), and
  // may be given for a checkpoint without device state: those entries are ignored.
  bool gpu_map_lenient = false;
  // Or: take the checkpoint from `cairn page-server` at HOST:PORT (lazy/page_client.h).
  std::string page_server, token_file;
  int fill_threads = 0;
  // Let the process run before its private anonymous memory is in: a page handler
  // process fills it on first touch and in the background (engine/lazy/handler.h).
  bool lazy = false;  // parallel page writers; 0: twice the CPUs (measured best on 2 cores)
  // The cgroup (under each v1 hierarchy) to restore into; empty: the one the image records.
  std::string cgroup;
  // With lazy: a process with less saved memory than this is filled before it runs (starting
  // its page handler would cost more than copying its pages).
  uint64_t lazy_min_bytes = 0;
  // Compare every restored process with its image before any runs (verify.h); a
  // difference fails the restore.
  bool verify = false;
  // Check the checkpoint's seal with this key (image/seal.h; every image of an incremental
  // chain) before anything restored runs: a missing, foreign or broken seal fails the
  // restore. Null: trusted unsealed (--trust-unsigned). Not for a page server's checkpoint,
  // which the page server checked (lazy/page_server.h).
  const image::ImageKey* seal_key = nullptr;
  // Restore only processes of this user: every process of the image must have exactly its uid
  // and gid (real, effective, saved, filesystem) and, for a user other than root, no
  // capabilities; otherwise nothing is restored. (cairnd: a job is restored only as its owner.)
  struct Owner {
    uint32_t uid = 0;
    uint32_t gid = 0;
    std::string name;  // for messages
  };
  std::optional<Owner> only_as;
  // Live TCP connections: the restore's own network lock stays once the processes run (their
  // packets dropped, then sent again by TCP) until the caller lifts it (net::RemoveNetworkLock
  // of RestoreResult::network_hold). For a job group, whose ranks are restored one after
  // another: a restored rank must not reach a peer that is not back yet, whose host would
  // answer with a reset.
  bool hold_network = false;
  // A container's checkpoint (image.proto Container): its root file system here, its external
  // mounts' host paths and the network namespace its runtime hands over (restore/container.h).
  ContainerSetup container;
  // Descriptions handed over by the caller instead of opened from the image, by key
  // ("pipe:[INODE]", a file's path): descriptors of the caller's (files.h OpenMasters).
  std::map<std::string, int> inherited;
  // Called with the root's host pid at "setup-namespaces" (the root made in its namespaces, a
  // container's mounts made) and at "post-restore" (every process built, none running yet).
  // An error fails the restore; nothing is left running.
  std::function<absl::Status(const std::string& stage, pid_t root)> notify;
};

struct RestoreResult {
  pid_t pid = 0;           // the root process, as this machine sees it
  std::string job_name;    // set when the checkpoint is of a job started by `cairn run`
  int processes = 0;
  uint64_t bytes = 0;     // page data written
  double seconds = 0;     // from start until the process runs
  double verify_seconds = 0;  // of which --verify took this
  std::string network_hold;   // with hold_network: the lock left in place ("" if none was needed)
  net::LockClaim network_claim;  // its claim (net/claim.h), for the caller to hold until it lifts it
  std::string dump_network_lock;  // the dump's lock this restore lifted (Checkpoint.network_lock; "" if none)
};

// Rebuilds the process (tree) and lets it run. The root is a child of the caller, so the
// caller may wait for it. On failure nothing is left behind: every half-built process is
// killed and reaped, and temporary files are removed.
absl::StatusOr<RestoreResult> Restore(const RestoreOptions& opts);

}  // namespace cairn::restore
