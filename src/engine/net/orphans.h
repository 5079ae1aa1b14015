#pragma once
// Connections no process holds any more, in the way of a restore on the host where the program
// ran before. A program's closed connections linger, owned by no process (the kernel's orphans):
// TIME_WAIT for a minute on a listener's port (Open MPI's transport closes one of two
// connections two ranks opened to each other at once), and a connection closed while its peer
// cannot answer — a rank whose node was lost, killed or ended by that loss — sits in FIN_WAIT1
// retransmitting its FIN for minutes. The kernel refuses to bind a listener's port while a
// TIME_WAIT socket lingers on it unless both had SO_REUSEADDR (inet_bind_conflict), refuses any
// bind over a closing connection's port, and refuses to rebuild a connection whose addresses and
// ports one of them still holds ("Cannot assign requested address"). So a group's failover
// restoring a rank on its own node within those minutes failed, where a restore on another host
// has none of them. Here they are removed first (SOCK_DESTROY through sock_diag), which is what
// restoring there would be. Only orphans (no socket inode: no descriptor of any process) in a
// closing state, and none while a live listener is in the way (the bind fails for it anyway): a
// socket a live process holds, a listener, an established connection still make the bind or the
// connection fail, as they should. Orphans other than TIME_WAIT only on Linux 6.11 or later:
// before it SOCK_DESTROY left such an orphan in place for good (its retransmissions purged), so
// there the restore fails as before, naming the address, until they time out. What is counted
// as removed is what a second look no longer finds.

#include <sys/socket.h>

#include <string>

#include "absl/status/statusor.h"

namespace cairn::net {

// Destroys every orphaned closing TCP socket of this network namespace (IPv4 and IPv6) on the
// port of `addr` (sockaddr_in or sockaddr_in6, as bind would take it) whose local address a bind
// to `addr` would conflict with (any, for a wildcard address). Returns how many it destroyed.
// Needs CAP_NET_ADMIN; a kernel without SOCK_DESTROY (CONFIG_INET_DIAG_DESTROY) answers an error.
absl::StatusOr<int> DestroyOrphansOnPort(const std::string& addr);

// Destroys the orphaned closing TCP socket of this network namespace whose local and remote
// addresses and ports are `local` and `peer` (sockaddrs, IPv4-mapped IPv6 ones matching IPv4),
// if there is one: the earlier life of a connection a restore rebuilds. Returns how many (0 or 1).
absl::StatusOr<int> DestroyOrphanConnection(const std::string& local, const std::string& peer);

}  // namespace cairn::net
