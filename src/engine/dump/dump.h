#pragma once
// The dump driver: checkpoints a running process (all its threads) or a whole process
// tree into a directory. Stages: check the target and refuse what cannot be saved while
// nothing is stopped; freeze (parents before their children are listed); capture each
// process's memory areas, task state and pages; capture descriptors tree-wide; rewrite
// ids for a job's PID namespace; commit the image atomically; kill or thaw.

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/dump/container.h"
#include "engine/dump/precopy.h"
#include "engine/image/codec.h"
#include "engine/image/seal.h"
#include "engine/net/claim.h"

namespace cairn::dump {

struct DumpResult;

enum class HandOff { kKill, kThaw, kHeld };

// What a hand-off tells the dump, so that a dump that dies in the middle of it (the daemon
// killed) leaves the processes where the hand-off's protocol needs them (guardian.h):
// - hold(): the processes now stand frozen in their freezer cgroup (the hand-off froze it
//   while they were still stopped by the dump); from here on a dump that dies leaves them
//   there, neither thawed nor killed. Called before the peer is asked to take them over.
// - accepted(): the peer has taken them over; a dump that dies from here on has them
//   killed. Called before the hand-off thaws their cgroup again (they are still stopped by
//   the dump then, so they do not run).
struct HandOffControl {
  std::function<void()> hold;
  std::function<void()> accepted;
};

struct DumpOptions {
  pid_t pid = 0;
  std::string dir;
  bool leave_running = false;
  bool tree = false;  // the process and all its descendants
  // Established TCP connections come back reset (the program sees ECONNRESET) instead of
  // making the dump fail.
  bool tcp_close = false;
  // Established TCP connections are saved whole (tcp.h), under a network lock that the
  // restore removes; their peers notice only a pause. A hand-off (live migration) of
  // processes holding one is refused unless hand_off_decides or hand_off_moves_connections.
  bool tcp_established = false;
  std::string job_name;  // recorded in the checkpoint for a job started by `cairn run`
  // The v1 freezer cgroup (its directory) that holds exactly these processes, when they have
  // one of their own (a cairnd job): with connections saved whole it is frozen on top of the
  // dump's stop before any socket enters repair mode, so that the processes stay still even
  // if the dumper dies (freezer_hold.h).
  std::string freezer_cgroup;
  // Processes holding CUDA state (devices.h): how long the GPU driver may wait for the work
  // they submitted before it locks them, in ms (0: no limit).
  unsigned gpu_lock_timeout_ms = 10000;
  // Progress of the memory copy: (bytes done, bytes total). Optional.
  std::function<void(uint64_t, uint64_t)> progress;
  // Incremental: the checkpoint this one builds on (a directory next to `dir`). Only the
  // pages written since it are saved, for the processes whose writes were tracked since
  // it; the others are saved in full (DumpResult::notes says which and why).
  std::string parent;
  // With leave_running: keep tracking writes after this dump so that a later dump can
  // name this one as its parent (implied by `parent`).
  bool track = false;
  // A pre-dump (criu-compat's PRE_DUMP): the processes and their memory only, as the parent of
  // a later incremental dump (with leave_running and track); no descriptors, sockets, mounts or
  // namespaces are saved and nothing is locked. The checkpoint cannot be restored itself
  // (Checkpoint.pages_only).
  bool pages_only = false;
  // Copy memory while the process runs, then freeze it only to copy the rest (see
  // precopy.h). With `tree`, every process of the tree in turn (precopy_tree.h). Not with
  // `parent`.
  bool pre_copy = false;
  PreCopyOptions precopy;
  // Page blocks compressed (lz4 or zstd), block by block on every core.
  image::Compression compression;
  // Seal the checkpoint with this key (image/seal.h); null: unsealed (restores then need
  // --trust-unsigned). Must outlive the dump.
  const image::ImageKey* seal_key = nullptr;
  // Migration (REQUIRES leave_running): called once the checkpoint is committed while
  // every process is still frozen, so that the image holds exactly the state they stand
  // in. kKill: the processes now run elsewhere and are killed here. kThaw: they are thawed
  // and carry on here. kHeld: whether they run elsewhere is not known yet; they stand
  // frozen in their freezer cgroup, which the hand-off froze, and the dump lets go of them
  // without thawing them: the caller decides later. (The dump itself succeeds in all three;
  // DumpResult::handed_off and held say which.) See HandOffControl for what the hand-off
  // must tell the dump as it goes.
  std::function<HandOff(const DumpResult&, const HandOffControl&)> hand_off;
  // The hand-off answers kKill or kThaw, never kHeld (a group checkpoint's rank: its
  // coordinator says commit or abort). Established TCP connections may then be saved with
  // tcp_established: kKill keeps their lock for the restore, kThaw takes them out of repair
  // and lifts the lock before the processes run. Without it a hand-off refuses them.
  bool hand_off_decides = false;
  // With hand_off_decides: the hand-off is called as soon as the state is captured, before the
  // commit, and may answer kThaw only (kKill is taken as kThaw: a process must not die before
  // its checkpoint is durable); the processes then run on and the checkpoint is committed after,
  // as with leave_running, so that its writes are no downtime (a live group checkpoint's rank).
  bool hand_off_commits_after = false;
  // A live migration that moves the connections' addresses with the processes (daemon/migrate.h):
  // established TCP connections are saved with tcp_established. kKill: the sockets die in repair
  // mode (nothing reaches their peers) and the dump's lock stays for the caller to remove
  // (DumpResult::network_lock: the destination has its own); kThaw: out of repair, the lock lifted,
  // before the processes run; kHeld: the sockets out of repair while the processes stay frozen
  // in their cgroup, the lock kept for the caller, who removes it once it has decided: after it
  // silenced and killed them (net/silence.h), or before it thaws them. (The dump's guardian, if
  // the dump dies held, does the same: guardian.h.)
  bool hand_off_moves_connections = false;
  // The network lock's table (net/netlock.h) instead of one named after the checkpoint's id: a
  // caller that must find it again after its own crash (a migration held in doubt).
  std::string network_lock_table;
  // Called once the pre-copy rounds are done, just before the freeze, while the processes
  // run (a migration waits there until what pre-copy wrote has been sent on; a group's rank
  // until every rank is ready to freeze). An error ends the dump there, nothing frozen.
  std::function<absl::Status()> before_freeze;
  // A container's mounts and network namespace that its runtime names (container.h).
  ContainerOptions container;
};

struct DumpResult {
  int processes = 0;
  int threads = 0;
  int areas = 0;
  uint64_t pages = 0;
  uint64_t bytes = 0;         // page data written
  double frozen_seconds = 0;  // from freeze to kill or thaw
  double total_seconds = 0;
  bool incremental = false;         // built on `parent` (at least one process incremental)
  bool tracking = false;            // writes are tracked after this dump
  std::vector<std::string> notes;   // e.g. why a process was saved in full
  int precopy_rounds = 0;           // pre-copy: rounds copied while the process ran
  uint64_t precopy_bytes = 0;       // page data copied while it ran
  double start_freeze_seconds = 0;  // the brief stop that started write tracking
  bool handed_off = false;          // hand_off said kKill: the processes were killed
  bool held = false;                // hand_off said kHeld: left frozen in their cgroup
  // The processes whose device state the GPU driver moved into their host memory (devices.h).
  std::vector<pid_t> gpu_processes;
  std::string network_lock;         // tcp_established with connections: the lock's table (net/netlock.h)
  // The lock kept for a restore (the processes were killed) or for the caller (held): the claim
  // that keeps it from `cairn check --fix` (net/claim.h), for the caller to hold while it waits.
  net::LockClaim network_claim;
};

// Freezes the process (with `tree`, it and every descendant: each process is frozen
// before its children are listed, so a fork during the freeze is caught), writes a
// complete checkpoint to `dir` (atomically: DIR.partial, fsync, rename), then kills the
// processes, or thaws them with leave_running.
// On any failure every process is thawed untouched and no checkpoint directory is left.
absl::StatusOr<DumpResult> Dump(const DumpOptions& opts);

// Checks that `pid` names a process the engine can checkpoint (exists, not a zombie,
// not a kernel thread, not cairn itself, a thread-group leader). Does not stop it.
absl::Status CheckTarget(pid_t pid);

}  // namespace cairn::dump
