#pragma once
// TIME_WAIT sockets in the way of a restored listener. A program's listener accepted
// connections and closed some of them first (Open MPI's transport closes one of two connections
// two ranks opened to each other at once): each left a TIME_WAIT socket on the listener's port
// for a minute, owned by no process. The kernel refuses to bind a new socket to that port while
// one lingers unless the closed connection had SO_REUSEADDR itself (inet_bind_conflict: both
// sides must), so a restore on the same host within that minute could not bind the listener
// ("Address already in use"), where the program, started before them, could. A restore on
// another host has none of them; here they are removed first (SOCK_DESTROY through sock_diag),
// which is what restoring there would be. Only TIME_WAIT sockets: a live socket on the port
// still makes the bind fail, as it should.

#include <sys/socket.h>

#include <string>

#include "absl/status/statusor.h"

namespace cairn::net {

// Destroys every TCP TIME_WAIT socket of this network namespace (IPv4 and IPv6) on the port
// of `addr` (sockaddr_in or sockaddr_in6, as bind would take it) whose local address a bind to
// `addr` would conflict with (any, for a wildcard address). Returns how many it destroyed.
// Needs CAP_NET_ADMIN; a kernel without SOCK_DESTROY (CONFIG_INET_DIAG_DESTROY) answers an error.
absl::StatusOr<int> DestroyTimeWait(const std::string& addr);

}  // namespace cairn::net
