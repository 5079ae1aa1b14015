#pragma once
// Another process's descriptors, reached through a pidfd.

#include <sys/types.h>

#include "absl/status/statusor.h"
#include "common/unique_fd.h"

namespace cairn::proc {

// A descriptor of our own for `pid`'s descriptor `fd`: the same open file description
// (pidfd_getfd), so that what it reports (a socket's addresses, a pipe's queue, a
// timer's time left) is the object the process holds.
absl::StatusOr<UniqueFd> CopyFd(pid_t pid, int fd);

}  // namespace cairn::proc
