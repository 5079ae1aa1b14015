#pragma once
// /proc/PID/mountinfo: where a file system is mounted, as a process sees it.

#include <sys/types.h>

#include <string>

#include "absl/status/statusor.h"

namespace cairn::proc {

// A mount point, as `pid` sees it (relative to its root), of the file system with device
// number `dev` (a stat st_dev): the mount of the file system's root if it has one, otherwise
// the first mount of a part of it. NotFound when `pid` sees no mount of it.
absl::StatusOr<std::string> MountPointOf(pid_t pid, dev_t dev);

}  // namespace cairn::proc
