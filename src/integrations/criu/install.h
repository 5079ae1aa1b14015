#pragma once
// `cairn install --criu-shim`: puts cairn where container runtimes look for `criu` (a link
// named criu to the cairn executable, in a directory on their PATH), so that runc, Podman,
// containerd and CRI-O checkpoint through cairn with no change of their own. A real CRIU that
// the runtimes would find first, or that the link would shadow, is left alone unless the
// caller says to replace it.

#include <string>

#include "absl/status/statusor.h"

namespace cairn::criu_compat {

struct ShimInstall {
  std::string dir = "/usr/local/sbin";  // on root's PATH before /usr/sbin and /usr/bin
  std::string cairn;                    // the executable the link points to
  bool replace = false;                 // take the place of another criu found on PATH
  std::string path_env;                 // PATH to look for another criu on
};

// Returns what was done, in words. Fails, changing nothing, when another criu is in the way
// without `replace`, naming it and the flag.
absl::StatusOr<std::string> InstallCriuShim(const ShimInstall& opts);

}  // namespace cairn::criu_compat
