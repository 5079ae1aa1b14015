#pragma once
// Capturing a process's open descriptors: regular files (offset, flags, identity; the
// content of files deleted while open), character devices and directories.

#include <sys/types.h>

#include "absl/status/status.h"
#include "engine/image/image.h"
#include "image.pb.h"

namespace cairn::dump {

// Checks every descriptor of `pid` is of a kind the engine can save, without saving
// anything. The error names the descriptor and its object.
absl::Status CheckFdsSupported(pid_t pid);

// Records every descriptor in `out`; deleted files' contents go to `writer` (may be
// null for a check-only pass).
absl::Status CaptureFds(pid_t pid, image::ImageWriter* writer, image::Process* out);

}  // namespace cairn::dump
