#pragma once
// Another process's descriptors, reached through a pidfd.

#include <sys/types.h>

#include "absl/status/statusor.h"
#include "common/unique_fd.h"

namespace cairn::proc {

// A descriptor of our own for `pid`'s descriptor `fd`: the same open file description
// (pidfd_getfd), so that what it reports (a socket's addresses, a pipe's queue, a
// timer's time left) is the object the process holds.
// Keeps the pidfds of the last few processes asked about, per thread (pidfd.cc): a child
// made without fork(3) (raw clone, clone3, _Fork: no pthread_atfork handlers) must not call it,
// nor may this process close descriptors it did not open itself (close_range over its table).
absl::StatusOr<UniqueFd> CopyFd(pid_t pid, int fd);

}  // namespace cairn::proc
