#pragma once
// Capturing an inotify instance: each watch's descriptor number and mask, and the watched
// file's path, found from the file handle the kernel shows in fdinfo (open_by_handle_at on
// the file system's mount as the process sees it). Events queued and not read yet are not
// kept; a watch on a file that was deleted is refused.

#include <sys/types.h>

#include "absl/status/status.h"
#include "engine/proc/fds.h"
#include "image.pb.h"

namespace cairn::dump {

// `capture`: the real capture (not the check made before freezing), which also warns about
// events that will be dropped.
absl::Status CaptureInotify(pid_t pid, const proc::FdInfo& info, bool capture, image::Fd* fd);

}  // namespace cairn::dump
