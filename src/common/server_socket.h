#pragma once
// The unix socket cairnd or cairn-controller serves on is its root-only front door: whoever
// can connect can act as root. So its directory must be owned by root and writable by nobody
// else (or another user could put their own socket in its place), and the socket itself is 0600.

#include <string>

#include "absl/status/status.h"

namespace cairn {

// Creates the socket's directory (0755) when missing; refuses a directory not owned by root or
// writable by group or others; refuses a path another process still answers on; removes a stale
// socket. `server` names the server in that refusal ("cairnd"). REQUIRES: running as root.
absl::Status PrepareServerSocket(const std::string& path, const char* server);

}  // namespace cairn
