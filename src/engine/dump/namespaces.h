#pragma once
// Namespaces and cgroup of a checkpointed tree. A job started by `cairn run` is the init
// (PID 1) of its own PID namespace with its own mount namespace: its checkpoint records
// ids as the job sees them, so that it can be restored into a fresh namespace anywhere
// without clashing with the ids in use there.

#include <sys/types.h>

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "image.pb.h"

namespace cairn::dump {

// The link /proc/PID/ns/NS points at ("mnt:[4026531841]"): equal for two processes in the
// same namespace.
absl::StatusOr<std::string> NamespaceLink(pid_t pid, const char* ns);

// Refuses trees whose namespaces the engine cannot rebuild (a process inside a PID
// namespace that is not its init, a foreign mount namespace without its own PID namespace).
// `external_pid`: the root's PID namespace is another's, handed over at restore (a container
// joined to a pod's): the root may be any process of it.
absl::Status CheckNamespaces(pid_t root, bool external_pid = false);

// Refuses a process of the tree (`pid`, not the root) in a namespace other than the root's
// (one it unshared, or joined): restore makes the whole tree in the root's namespaces, where it
// would silently see another world.
absl::Status CheckSameNamespaces(pid_t root, pid_t pid);

// When the root (host id `root`) is the init of its own PID namespace, rewrites every id
// in `ckpt` to the namespace's view and records the namespaces and the job's cgroup.
// REQUIRES: every process of the checkpoint is alive (frozen).
absl::Status LocalizeIds(pid_t root, image::Checkpoint* ckpt);

// The processes' clocks (image.proto TimeNamespace): the offsets of the root's time namespace
// (/proc/PID/timens_offsets: "monotonic SECS NSECS", "boottime SECS NSECS"; 0 when it uses the
// machine's), the clocks as it reads them now, the wall clock and the boot.
// REQUIRES: the processes are frozen (their clocks are read as of now).
absl::Status RecordTimeNamespace(pid_t root, image::Checkpoint* ckpt);

}  // namespace cairn::dump
