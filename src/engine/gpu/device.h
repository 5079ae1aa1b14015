#pragma once
// The device side of a dump of processes holding CUDA state: before they are frozen, each is
// locked (its submitted work finished, new work blocked) and then checkpointed by the driver
// (device memory copied into its host memory, its GPU handles released), so that the dump sees
// ordinary processes and saves their device memory with the rest. All of them are locked before
// any is checkpointed: processes that share work (a multi-process training job) stop together.
//
// Every path out puts the processes back as they were unless they are to die: a failure at any
// step restores what was checkpointed and unlocks what was locked, in the reverse order, before
// the error returns; Resume() does the same after a dump that lets them run on; Release() is for
// a dump that killed them. A DeviceCheckpoint destroyed without either resumes.
//
// The dump drives it through dump/devices.h, which journals the processes first so that a
// dumper killed meanwhile has them put back by a fresh cairn (dump/guardian.h, point 11).

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/gpu/cuda_checkpoint.h"

namespace cairn::gpu {

class DeviceCheckpoint {
 public:
  // Locks every process of `pids` (each waits at most `lock_timeout_ms` for its work), then
  // checkpoints each. On failure nothing is left locked or checkpointed that could be put back;
  // the error names the process and the step (and any process a rollback could not put back).
  // `api` must outlive the result.
  static absl::StatusOr<DeviceCheckpoint> Take(CudaCheckpointApi& api, const std::vector<pid_t>& pids,
                                               unsigned lock_timeout_ms);

  DeviceCheckpoint(DeviceCheckpoint&& o) noexcept;
  DeviceCheckpoint& operator=(DeviceCheckpoint&&) = delete;
  ~DeviceCheckpoint();  // Resume() unless resumed or released (its error is logged)

  // The processes run on: each restored onto the same GPUs and unlocked. Tries every process
  // whatever fails; the first error names what could not be put back.
  absl::Status Resume();
  // The processes died after their dump: nothing to put back.
  void Release() { pids_.clear(); }

  const std::vector<pid_t>& pids() const { return pids_; }

 private:
  DeviceCheckpoint(CudaCheckpointApi* api, std::vector<pid_t> pids) : api_(api), pids_(std::move(pids)) {}

  CudaCheckpointApi* api_;
  std::vector<pid_t> pids_;  // checkpointed, to put back
};

// Puts back, in the reverse order, what a device checkpoint did to `locked` (locked, not
// checkpointed) and `checkpointed` processes: restore, then unlock. Returns a sentence naming
// each process that could not be put back, with its driver state ("" when all were).
std::string PutBack(CudaCheckpointApi& api, const std::vector<pid_t>& locked, const std::vector<pid_t>& checkpointed);

// Puts process `pid` back to RUNNING from whatever state a device checkpoint left it in, as the
// driver reports it (CHECKPOINTED: restore, then unlock; LOCKED: unlock; RUNNING: nothing). For
// a repair that does not know how far the dump got. Returns the state it found.
absl::StatusOr<CudaState> BringBackToRunning(CudaCheckpointApi& api, pid_t pid);

}  // namespace cairn::gpu
