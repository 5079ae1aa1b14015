#pragma once
// /proc/PID/mountinfo: where a file system is mounted, as a process sees it.

#include <sys/types.h>

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/unique_fd.h"

namespace cairn::proc {

// A mount point, as `pid` sees it (relative to its root), of the file system with device
// number `dev` (a stat st_dev): the mount of the file system's root if it has one, otherwise
// the first mount of a part of it. NotFound when `pid` sees no mount of it.
absl::StatusOr<std::string> MountPointOf(pid_t pid, dev_t dev);

// Opens with `flags` the file whose handle (name_to_handle_at: `type`, `handle` bytes) names it
// on the file system mounted at `mount_path`. `what` names the file in errors.
absl::StatusOr<UniqueFd> OpenFileHandle(const std::string& mount_path, int type, absl::string_view handle, int flags,
                                        const std::string& what);

}  // namespace cairn::proc
