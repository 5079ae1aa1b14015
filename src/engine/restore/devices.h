#pragma once
// The GPU side of a restore (issue 14): the processes whose device state the dump had the NVIDIA
// driver move into their host memory (image Process.cuda_checkpointed, engine/dump/devices.h)
// are rebuilt like any other; then, before any of their own threads runs, the driver's restore
// thread in each is let go, the driver brings the device state back onto a GPU and unlocks the
// process, and only then is the process let go with the others.

#include <sys/types.h>

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/gpu/cuda_checkpoint.h"
#include "image.pb.h"

namespace cairn::restore {

// A process to hand back to the driver: its pid here and every thread it was rebuilt with,
// each held under ptrace.
struct DeviceProcess {
  pid_t pid = 0;
  int image_pid = 0;  // as the checkpoint names it, for messages
  std::vector<pid_t> tids;
  std::vector<gpu::GpuPair> remap;  // the dump's GPU -> the one here (empty: the same ones)
};

// Where each process's device state goes: for every GPU `procs` recorded at the dump (image
// Process.gpus), the GPU here `gpu_map` names (else the one of the same index), which must be the
// same model with enough free memory for what lands on it, one GPU here for each of the dump's;
// when any moves, a pair for every GPU of each process (the driver takes all or none). Keyed by
// image pid. Without recorded GPUs or NVML here, empty (the same GPUs), unless `gpu_map` asks for
// a move, which is then refused. `lenient`: entries for GPUs the checkpoint did not use are
// ignored (cairnd maps all of a job's GPUs), else refused. Errors name both GPUs.
absl::StatusOr<std::map<int, std::vector<gpu::GpuPair>>> PlanGpuRemap(const std::vector<const image::Process*>& procs,
                                                                      const std::map<int, int>& gpu_map, bool lenient,
                                                                      const std::string& where);

// The driver's API for a restore of `image_pids` (the processes marked cuda_checkpointed), loaded
// before anything is created: without it the error says what is missing and that nothing ran.
absl::StatusOr<std::unique_ptr<gpu::CudaCheckpointApi>> DriverForRestore(const std::vector<int>& image_pids,
                                                                         const std::string& where);

// For each process: its driver restore thread let go (it must be one of its threads), its device
// state restored (onto the GPUs it had) and the process unlocked; every other thread stays held.
// Returns the threads let go, which the caller must not detach again. On failure the processes
// are still the caller's to kill.
absl::StatusOr<std::set<pid_t>> RestoreDevices(gpu::CudaCheckpointApi& api, const std::vector<DeviceProcess>& procs);

}  // namespace cairn::restore
