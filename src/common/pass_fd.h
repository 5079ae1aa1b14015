#pragma once
// Sending a descriptor with a message over a unix socket (SCM_RIGHTS).

#include <sys/types.h>

#include <cstddef>

namespace cairn {

// sendmsg of `len` bytes at `data` on socket `sock`, with descriptor `fd` attached when it is
// not -1; MSG_NOSIGNAL, retried on EINTR. Returns what sendmsg returned (-1 with errno).
ssize_t SendWithFd(int sock, const void* data, size_t len, int fd);

}  // namespace cairn
