#pragma once
// A process's seccomp filters (image.proto SeccompFilter): read from outside with
// PTRACE_SECCOMP_GET_FILTER and PTRACE_GET_SECCOMP_METADATA while it is stopped. Container
// runtimes give every container a default filter (Podman, Docker), so a container's processes
// run under one. Refused, naming why: strict mode, threads with different chains, and a filter
// that hands system calls to a supervisor (SECCOMP_RET_USER_NOTIF: the supervisor and its
// listener descriptor are outside the checkpoint).

#include <sys/types.h>

#include <vector>

#include "absl/status/status.h"
#include "image.pb.h"

namespace cairn::dump {

// Records the filters of `pid` (mode from /proc/PID/status: `mode`) into out->seccomp_filters.
// REQUIRES: every thread in `tids` is ptrace-stopped by this process.
absl::Status CaptureSeccompFilters(pid_t pid, int mode, const std::vector<pid_t>& tids, image::Process* out);

// Whether the classic-BPF `program` can return SECCOMP_RET_USER_NOTIF.
bool NotifiesSupervisor(const std::string& program);

}  // namespace cairn::dump
