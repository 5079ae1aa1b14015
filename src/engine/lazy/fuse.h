#pragma once
// The fuse of a lazily restored process in a job: the kernel's own guarantee that the
// process never runs on with zeros where its memory was, even when its page handler and the
// handler's watcher (handler.h) are killed together (`pkill cairn`, a kill of their process
// group, a cgroup kill of the service that started them).
//
// A fuse is a pipe. Its read end is armed (O_ASYNC, F_SETSIG SIGKILL, F_SETOWN_EX to the
// restored process) and held by the job's init, PID 1 of the job's namespace, which outlives
// every other process of the job; its write end is held by the handler and the watcher, and
// by nobody else. When the last writer goes (both killed), the kernel signals the readers'
// owners (pipe_release: kill_fasync on fasync_readers): the process gets SIGKILL from the
// kernel itself, with no cairn process left to send it. The handler disarms the fuse (clears
// O_ASYNC on its own copy of the read end, which is the same open file as the init's) once
// every page is in, before it and its watcher exit.
//
// Why the init holds the read end, and why the target is the process and not the init: the
// init is the one process of a job that no fault of the job's own kills, and a job dies with
// it anyway; but a SIGKILL the kernel sends through SIGIO to a namespace's init is dropped
// (the init is unkillable from inside, and such a signal carries no sender), so the init
// itself is never lazily restored where fuses are used (restore/restore.cc) and never the
// target of one.
//
// The pipe is made by the init itself (an injected pipe2: the init lives in the job's PID
// namespace, where the restorer has no pid to take descriptors from), and its read end moved
// to the highest numbers below the init's own descriptor limit, one per lazily restored process
// (a process whose fuse would land below kFuseFloor gets none: its watcher alone covers it); the
// restorer takes both ends (pidfd_getfd) and the init closes its write end. cairn-init holds
// nothing of its own once its command runs (it closes every descriptor), and never anything at
// kFuseFloor or above; a dump does not save those (IsFuseFd), so each restore starts without them.
//
// The fuse kills the process it was made for. When that is the job's command, the init exits with
// it and the kernel ends the rest of the job; a child that another process of the job forked while
// its pages were still missing is not covered (the watcher, alive, kills the whole tree).
// Processes restored outside a job (no cairn-init above them) have no fuse: the watcher
// alone covers the handler's death there.

#include <sys/types.h>

#include <string_view>

#include "absl/status/statusor.h"
#include "common/unique_fd.h"

namespace cairn::lazy {

inline constexpr int kFuseFloor = 64;

struct Fuse {
  UniqueFd read, write;  // read: armed against the process (the same open file as the holder's)
};

// A fuse held by `holder` (a job's init, in a ptrace stop, every catchable signal's action
// its own: its restore is complete) at descriptor `at`, armed to SIGKILL `target` (a host pid)
// when its last writer is gone.
absl::StatusOr<Fuse> MakeFuseIn(pid_t holder, int at, pid_t target);

// Makes the read end `fd` (or any copy of it) harmless: closing the writers sends nothing.
void DisarmFuse(int fd);

// Whether descriptor `fd` of a process named `comm` is a fuse's read end (cairn's, not the
// process's own: neither saved nor compared).
bool IsFuseFd(std::string_view comm, int fd);

// The number the next fuse takes in `holder` (a host pid), the `made`-th of this restore: below its
// soft RLIMIT_NOFILE; -1 when that would be below kFuseFloor.
int NextFuseFd(pid_t holder, int made);

// Whether a process named `comm` can hold fuses: a job's init.
bool HoldsFuses(std::string_view comm);

}  // namespace cairn::lazy
