#pragma once
// Pre-copy of a process tree (a job: its init and what it runs): precopy.h for each live
// process of the tree in turn, while the tree runs. The smallest processes go first and
// the largest last, so that the one whose memory matters most has its last round
// closest to the freeze that follows.

#include <sys/types.h>

#include <map>

#include "absl/status/statusor.h"
#include "engine/dump/precopy.h"

namespace cairn::dump {

// What PreCopy gave for each process of the tree rooted at `root` (zombies and processes
// that exit meanwhile are skipped: the frozen phase copies whatever is left in full).
absl::StatusOr<std::map<pid_t, PreCopied>> PreCopyTree(pid_t root, image::ImageWriter& writer,
                                                       const PreCopyOptions& opts, const ProgressFn& progress);

}  // namespace cairn::dump
