#pragma once
// Closing TCP connections without a word. A job restored with its connections held behind a
// network lock (a group's rank, restore/tcp.h) that is stopped before they flow — its group's
// restore called off — would close each connection with a FIN the lock drops: the socket then
// sits in FIN_WAIT1, retransmitting and keeping its local address for minutes, and a second
// restore of the same checkpoint cannot rebuild the connection ("Cannot assign requested
// address"). In repair mode (TCP_REPAIR) a socket's close sends nothing and frees its address
// at once, as the connection's state lives on in the checkpoint.

#include <sys/types.h>

#include <vector>

#include "absl/status/status.h"

namespace cairn::net {

// Switches every TCP socket the processes `pids` hold (IPv4 and IPv6, not listening) to repair
// mode, through copies of their descriptors (pidfd_getfd). Best effort over all of them: the
// first error is returned after the others were tried. Needs CAP_NET_ADMIN in the sockets'
// network namespace.
absl::Status SilenceTcpConnections(const std::vector<pid_t>& pids);

}  // namespace cairn::net
