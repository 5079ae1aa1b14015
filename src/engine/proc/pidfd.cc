#include "engine/proc/pidfd.h"

#include <sys/syscall.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace cairn::proc {

absl::StatusOr<UniqueFd> CopyFd(pid_t pid, int fd) {
  UniqueFd pidfd(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
  if (!pidfd.valid()) return ErrnoStatus(absl::StrCat("pidfd_open pid ", pid));
  UniqueFd theirs(static_cast<int>(::syscall(SYS_pidfd_getfd, pidfd.get(), fd, 0)));
  if (!theirs.valid()) return ErrnoStatus(absl::StrCat("pidfd_getfd pid ", pid, " fd ", fd));
  return theirs;
}

}  // namespace cairn::proc
