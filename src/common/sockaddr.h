#pragma once
// Socket addresses kept as the bytes of a struct sockaddr_*, and their text for messages; the
// two questions asked of a socket descriptor most (its addresses, an int option).

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace cairn {

// "127.0.0.1:8080", "[::1]:8080", "/run/app.sock", "@name" (abstract), "unnamed";
// "family N" for a family it does not know.
std::string FormatSockaddr(const std::string& sockaddr_bytes);

// The address socket `fd` is bound to (getsockname), or with `peer` the one it is connected
// to (getpeername; "" when it is not connected).
absl::StatusOr<std::string> SocketAddress(int fd, bool peer);

// An int socket option of `fd`; the error names it as `what`.
absl::StatusOr<int> SocketIntOption(int fd, int level, int name, absl::string_view what);

}  // namespace cairn
