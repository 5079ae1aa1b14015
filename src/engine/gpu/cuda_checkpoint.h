#pragma once
// The NVIDIA driver's process checkpoint API (CUDA driver API, group CUDA_CHECKPOINT; driver
// r570 and later), as cairn drives it from outside the process: lock a process's CUDA work,
// move its device memory into its host memory (releasing its GPU handles, so the process is
// then an ordinary one to dump), and back. libcuda.so.1 is loaded at run time: cairn builds and
// runs where there is no GPU. The interface lets the logic around the driver (device.h) be
// tested against a fake.

#include <sys/types.h>

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace cairn::gpu {

// CUprocessState.
enum class CudaState { kRunning = 0, kLocked = 1, kCheckpointed = 2, kFailed = 3 };
const char* CudaStateName(CudaState s);

// A GPU checkpointed on (old) and the one to restore onto (new): CUuuid bytes.
struct GpuPair {
  std::array<uint8_t, 16> old_uuid{};
  std::array<uint8_t, 16> new_uuid{};
};

// One call each of the driver's API, for process `pid` (as this machine's PID namespace sees
// it). Errors name the call, the pid and the driver's error name. Thread-compatible.
class CudaCheckpointApi {
 public:
  virtual ~CudaCheckpointApi() = default;
  // Blocks new CUDA calls of the process and waits for its submitted work, at most
  // `timeout_ms` (0: no limit). RUNNING -> LOCKED.
  virtual absl::Status Lock(pid_t pid, unsigned timeout_ms) = 0;
  // Device memory into host memory, GPU handles released. LOCKED -> CHECKPOINTED.
  virtual absl::Status Checkpoint(pid_t pid) = 0;
  // Device memory back from host memory, onto the GPUs `remap` names (empty: the same ones).
  // CHECKPOINTED -> LOCKED.
  virtual absl::Status Restore(pid_t pid, const std::vector<GpuPair>& remap) = 0;
  // LOCKED -> RUNNING.
  virtual absl::Status Unlock(pid_t pid) = 0;
  virtual absl::StatusOr<CudaState> State(pid_t pid) = 0;
  // The driver's thread in the process that carries out a restore (it must run for Restore).
  virtual absl::StatusOr<pid_t> RestoreThread(pid_t pid) = 0;
};

// The driver's API from `library` (libcuda.so.1, as the dynamic linker finds it), initialized
// (cuInit). NotFound naming the library when it cannot be loaded; FailedPrecondition when the
// driver has no checkpoint API (older than r570) or cuInit fails, saying which.
absl::StatusOr<std::unique_ptr<CudaCheckpointApi>> LoadDriverCheckpointApi(const std::string& library = "libcuda.so.1");

// Whether process `pid` holds CUDA state: it has an NVIDIA device file open or mapped
// (/dev/nvidiactl, /dev/nvidia0..., /dev/nvidia-uvm). False for a process that is gone.
bool HoldsCudaState(pid_t pid);
// The cheap half of it, for every dump's search (/proc/PID/maps only, no descriptor read): a
// process with a CUDA context maps the driver's device files. One that only has them open (an
// NVML user) is not the driver's to checkpoint anyway: the precheck refuses its device.
bool MapsNvidiaDevice(pid_t pid);

}  // namespace cairn::gpu
