#pragma once
// Running code inside another process's namespace without moving the caller: a thread of
// our own joins the namespace (setns affects only the calling thread for IPC, UTS and
// network namespaces), runs the function there, and ends.

#include <sys/types.h>

#include <functional>

#include "absl/status/status.h"

namespace cairn::proc {

// Runs `fn` in a new thread that first joins `pid`'s namespace of type `nstype`
// (CLONE_NEWIPC, CLONE_NEWUTS, CLONE_NEWNET or CLONE_NEWCGROUP; "ipc", "uts", "net" or
// "cgroup" for `name`).
absl::Status InNamespaceOf(pid_t pid, int nstype, const char* name, const std::function<absl::Status()>& fn);

}  // namespace cairn::proc
