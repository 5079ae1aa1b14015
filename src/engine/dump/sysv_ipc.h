#pragma once
// Capturing the System V IPC objects of a job's own IPC namespace: shared memory segments
// (attributes and content), semaphore sets (values) and message queues (every message,
// copied without taking it off the queue: msgrcv with MSG_COPY). Semaphore undo values
// (SEM_UNDO) are not kept.

#include <sys/types.h>

#include "absl/status/status.h"
#include "engine/image/image.h"
#include "image.pb.h"

namespace cairn::dump {

// Whether `pid` has an IPC namespace of its own (not the dumper's).
absl::StatusOr<bool> OwnIpcNamespace(pid_t pid);

// Records every object of `pid`'s IPC namespace in `out`, segment contents to `writer`.
absl::Status CaptureSysvIpc(pid_t pid, image::ImageWriter& writer, image::SysvIpc* out);

}  // namespace cairn::dump
