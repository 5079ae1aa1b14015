#pragma once
// The machine's NVIDIA GPUs as NVML describes them, for the engine: which GPUs a process has
// contexts on (recorded by a dump) and what each GPU here is (a restore onto other GPUs checks
// the model and the free memory, and maps the dump's GPU UUIDs to these). libnvidia-ml.so.1 is
// loaded at run time; the few functions used are declared from NVML's documented C API.
// (cairnd's event watcher, daemon/gpu_watch.h, loads it on its own for its thread.)

#include <sys/types.h>

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace cairn::gpu {

struct GpuInfo {
  int index = 0;            // NVML's
  std::string uuid;         // "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"
  std::string name;         // "NVIDIA H100 80GB HBM3"
  uint64_t memory_total = 0;
  uint64_t memory_free = 0;
};

class Nvml {
 public:
  // NotFound naming the library when it cannot be loaded; Unavailable when NVML refuses.
  static absl::StatusOr<std::unique_ptr<Nvml>> Load(const std::string& library = "libnvidia-ml.so.1");
  ~Nvml();
  Nvml(const Nvml&) = delete;
  Nvml& operator=(const Nvml&) = delete;

  const std::vector<GpuInfo>& gpus() const { return gpus_; }
  // The GPUs (indices) process `pid` (this machine's PID namespace) has a compute context on,
  // each with the device memory it uses there.
  absl::StatusOr<std::vector<std::pair<int, uint64_t>>> UsedBy(pid_t pid);

 private:
  struct Api;
  Nvml(void* lib, std::unique_ptr<Api> api);
  void* lib_;
  std::unique_ptr<Api> api_;
  std::vector<void*> handles_;
  std::vector<GpuInfo> gpus_;
};

// An NVML UUID ("GPU-" and 32 hex digits in groups) as the 16 bytes of a CUDA CUuuid.
absl::StatusOr<std::array<uint8_t, 16>> UuidBytes(const std::string& nvml_uuid);

}  // namespace cairn::gpu
