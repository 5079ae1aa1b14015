#pragma once
// Making a job's System V IPC objects again in its new IPC namespace, each with the id it
// had (the namespace's shm_next_id, sem_next_id and msg_next_id are set before each one is
// created), its key, owner and permissions, and its content: a segment's bytes, a set's
// values, a queue's messages in order. Processes attach segments themselves (MapAndFill).

#include <sys/types.h>

#include "absl/status/status.h"
#include "engine/image/image.h"

namespace cairn::restore {

// Creates every object of `ipc` in the IPC namespace of `pid`.
absl::Status CreateSysvIpc(pid_t pid, const image::ImageReader& img, const image::SysvIpc& ipc);

// Removes (IPC_RMID) the segments that had been removed while still attached, once the
// restored processes have attached them again.
absl::Status RemoveDestroyedSegments(pid_t pid, const image::SysvIpc& ipc);

}  // namespace cairn::restore
