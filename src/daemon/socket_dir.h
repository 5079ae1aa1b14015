#pragma once
// The unix socket cairnd serves on is its root-only front door: whoever can connect can run
// anything as root. So its directory must be owned by root and writable by nobody else (or
// another user could put their own socket in its place), and the socket itself is 0600.

#include <string>

#include "absl/status/status.h"

namespace cairn::daemon {

// Creates the socket's directory (0755) when missing; refuses a directory not owned by root or
// writable by group or others; refuses a path another process still answers on; removes a stale
// socket. REQUIRES: running as root.
absl::Status PrepareSocket(const std::string& path);

}  // namespace cairn::daemon
