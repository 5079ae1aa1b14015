#pragma once
// Socket addresses kept as the bytes of a struct sockaddr_*, and their text for messages.

#include <string>

namespace cairn {

// "127.0.0.1:8080", "[::1]:8080", "/run/app.sock", "@name" (abstract), "unnamed";
// "family N" for a family it does not know.
std::string FormatSockaddr(const std::string& sockaddr_bytes);

}  // namespace cairn
