#pragma once
// /proc/PID/mountinfo: where a file system is mounted, as a process sees it.

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/unique_fd.h"

namespace cairn::proc {

// One line of /proc/PID/mountinfo, its escapes undone:
// "36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue".
struct MountEntry {
  uint32_t id = 0;
  uint32_t parent_id = 0;
  dev_t dev = 0;              // the file system's device number (st_dev of its files)
  std::string fs_root;        // the part of the file system mounted here
  std::string point;          // where, relative to the process's root
  std::string mount_options;  // per mount: "rw,nosuid,relatime"
  std::string fstype;
  std::string source;
  std::string super_options;  // the file system's: "rw,size=65536k,mode=755"
};

// The mounts `pid` sees, in the kernel's order (a mount after the one it is mounted on).
absl::StatusOr<std::vector<MountEntry>> ReadMountTable(pid_t pid);

// The same from a mount table's text.
absl::StatusOr<std::vector<MountEntry>> ParseMountTable(const std::string& text);

// A mount point, as `pid` sees it (relative to its root), of the file system with device
// number `dev` (a stat st_dev): the mount of the file system's root if it has one, otherwise
// the first mount of a part of it. NotFound when `pid` sees no mount of it.
absl::StatusOr<std::string> MountPointOf(pid_t pid, dev_t dev);

// Opens with `flags` the file whose handle (name_to_handle_at: `type`, `handle` bytes) names it
// on the file system mounted at `mount_path`. `what` names the file in errors.
absl::StatusOr<UniqueFd> OpenFileHandle(const std::string& mount_path, int type, absl::string_view handle, int flags,
                                        const std::string& what);

}  // namespace cairn::proc
