#pragma once
// Unix domain sockets as the kernel's sock_diag netlink interface describes them: type,
// state, peer, bound name (and its socket file) and queue lengths, keyed by inode. For a
// listening socket, rqueue is the number of connections waiting to be accepted, wqueue the
// backlog and `pending` their clients. Covers the caller's network namespace.
//
// A connection not accepted yet is a socket the kernel made for the listener's side (it has
// no inode until accept gives it one): the diag lists it neither on its own nor as its
// client's peer (0, as for a client whose peer was closed) — only the listener names the
// client, in `pending`.

#include <cstdint>
#include <sys/types.h>

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace cairn::proc {

struct UnixSocket {
  uint64_t ino = 0;
  int type = 0;         // SOCK_STREAM, SOCK_DGRAM, SOCK_SEQPACKET
  int state = 0;        // TCP_ESTABLISHED (1), TCP_LISTEN (10), TCP_CLOSE (7)...
  uint64_t peer = 0;    // the connected peer's inode, 0 if none
  std::string name;     // bound address (abstract names start with '\0'), empty if unbound
  uint32_t rqueue = 0;  // bytes queued for reading (stream), or the first datagram's size
  uint32_t wqueue = 0;
  uint8_t shutdown = 0; // RCV_SHUTDOWN (1) | SEND_SHUTDOWN (2)
  // A name in the file system: the inode of the socket file bind(2) created (0 otherwise).
  uint64_t vfs_ino = 0;
  // A listener: the client sockets of the connections waiting to be accepted, first to be
  // accepted first (0: a client closed since).
  std::vector<uint64_t> pending;
};

// The unix sockets of the caller's network namespace (sock_diag lists a namespace's own), or,
// with `netns_of`, of that process's (a container's own: a thread of ours joins it to ask).
absl::StatusOr<std::map<uint64_t, UnixSocket>> ReadUnixSockets(pid_t netns_of = 0);

}  // namespace cairn::proc
