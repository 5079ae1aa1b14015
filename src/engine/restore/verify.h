#pragma once
// `cairn restore --verify`: after a restore has rebuilt every process and before any of them
// runs an instruction, reads back what the kernel now says about each object the image holds
// and compares it with the image. A difference fails the restore (its processes are killed),
// naming the process, the object and both values.
//
// Compared, per process: its threads (ids, blocked signal masks); its memory layout (every
// range's protection, sharing, backing object — anonymous, shared anonymous, System V
// segment, a file by device and inode, or a deleted file — and the mapping flags that change
// behaviour: locked, lock-on-fault, droppable, wipe-on-fork, don't-fork, don't-dump, may-write,
// grows-down, huge-page advice; the flags only when the image has an area with one of them,
// as reading them costs a page-table walk); its descriptors (the same numbers and no others, close-on-exec,
// access mode and status flags, the file and offset of regular files, and that descriptors
// which shared an open file description share one again, by kcmp); credentials, capabilities
// and no_new_privs; the controlling terminal and its foreground group; resource limits; oom_score_adj, loginuid, transparent huge pages off,
// umask, cwd and root; ignored and caught signals, pending signals; POSIX timers (ids, clocks,
// signals); file locks (kind, range, owner, on each descriptor that shows them); sockets
// (family, type, protocol, name, peer, listening, the options the image sets again, BPF
// filter and its lock; for unix sockets the shutdown state and, for pairs, the peer).
// Timers' remaining times are read back where restore arms them (task_state.cc); page
// contents are checksummed when read.

#include <cstdint>
#include <map>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "engine/proc/unix_sockets.h"
#include "engine/restore/ids.h"
#include "image.pb.h"

namespace cairn::restore {

// Compares the restored process `proc` (every thread stopped under the caller's ptrace, its
// final registers and masks set) with its image. OK, or FailedPrecondition listing every
// difference found.
// `session_restored`: the process's session leader is in the checkpoint, so its controlling
// terminal (and, for the leader, the terminal's foreground group) is compared too.
// What the comparisons of one restore's processes share, read at most once for all of them.
struct VerifyShared {
  std::optional<std::map<uint64_t, proc::UnixSocket>> unix_sockets;  // sock_diag, by inode
  // The checkpoint's descriptions only messages in flight hold (Checkpoint.in_flight), if any: a
  // unix socket's peer may be one.
  const image::Process* in_flight = nullptr;
  // Scratch files the restore made again (Masters::made_scratch): their areas map the new file.
  std::map<std::pair<uint64_t, uint64_t>, std::pair<uint64_t, uint64_t>> made_scratch;
  // The old vDSO's address holds a proxy of it (machine/vdso.h): private anonymous, r-x.
  bool vdso_proxied = false;
};

// `procs`: every process of the checkpoint (a unix socket's peer may be in another).
absl::Status VerifyRestored(const image::Process& proc, const std::vector<const image::Process*>& procs,
                            const IdMap& ids, bool session_restored, VerifyShared* shared);

// Test hook: with CAIRN_VERIFY_PLANT set to one of "oom_score_adj", "fd_flags", "rlimit",
// "lock" (an OFD lock on the first regular file) or "socket_option" (SO_KEEPALIVE toggled),
// changes that object of the restored process `host_pid` before it is verified, so that a
// test can see --verify catch a difference. Does nothing when the variable is unset.
absl::Status PlantDifferenceForTest(pid_t host_pid);

}  // namespace cairn::restore
