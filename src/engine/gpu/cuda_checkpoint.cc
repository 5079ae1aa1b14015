#include "engine/gpu/cuda_checkpoint.h"

#include <dlfcn.h>

#include <type_traits>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/file_util.h"
#include "common/status.h"
#include "engine/proc/fds.h"

namespace cairn::gpu {
namespace {

// The argument structs of the API, as the CUDA driver API reference declares them: 64 bytes
// each, every field cairn does not set zero (reserved fields must be).
struct LockArgs {
  uint32_t timeout_ms;
  uint32_t reserved0;
  uint64_t reserved1[7];
};
struct CheckpointArgs {
  uint64_t reserved[8];
};
struct RestoreArgs {
  const GpuPair* gpu_pairs;
  uint32_t gpu_pairs_count;
  char reserved[64 - sizeof(void*) - sizeof(uint32_t)];
};
struct UnlockArgs {
  uint64_t reserved[8];
};
static_assert(sizeof(LockArgs) == 64 && sizeof(CheckpointArgs) == 64 && sizeof(RestoreArgs) == 64 &&
              sizeof(UnlockArgs) == 64 && sizeof(GpuPair) == 32);

using CuResult = int;  // CUresult: 0 is CUDA_SUCCESS
using InitFn = CuResult (*)(unsigned);
using ErrorNameFn = CuResult (*)(CuResult, const char**);
using LockFn = CuResult (*)(int, LockArgs*);
using CheckpointFn = CuResult (*)(int, CheckpointArgs*);
using RestoreFn = CuResult (*)(int, RestoreArgs*);
using UnlockFn = CuResult (*)(int, UnlockArgs*);
using StateFn = CuResult (*)(int, int*);
using ThreadFn = CuResult (*)(int, int*);

class DriverApi : public CudaCheckpointApi {
 public:
  explicit DriverApi(void* lib) : lib_(lib) {}
  ~DriverApi() override { ::dlclose(lib_); }

  absl::Status Bind() {
    auto sym = [&](const char* name, auto* fn) -> absl::Status {
      *fn = reinterpret_cast<std::remove_reference_t<decltype(*fn)>>(::dlsym(lib_, name));
      if (*fn != nullptr) return absl::OkStatus();
      return absl::FailedPreconditionError(absl::StrCat(
          "the NVIDIA driver has no ", name,
          ": its process checkpoint API needs driver r570 or later (nvidia-smi shows the version)"));
    };
    RETURN_IF_ERROR(sym("cuInit", &init_));
    RETURN_IF_ERROR(sym("cuGetErrorName", &error_name_));
    RETURN_IF_ERROR(sym("cuCheckpointProcessLock", &lock_));
    RETURN_IF_ERROR(sym("cuCheckpointProcessCheckpoint", &checkpoint_));
    RETURN_IF_ERROR(sym("cuCheckpointProcessRestore", &restore_));
    RETURN_IF_ERROR(sym("cuCheckpointProcessUnlock", &unlock_));
    RETURN_IF_ERROR(sym("cuCheckpointProcessGetState", &state_));
    RETURN_IF_ERROR(sym("cuCheckpointProcessGetRestoreThreadId", &thread_));
    // A restore needs the driver initialized in the restorer (or persistence mode).
    return Check(init_(0), "cuInit", 0);
  }

  absl::Status Lock(pid_t pid, unsigned timeout_ms) override {
    LockArgs a{};
    a.timeout_ms = timeout_ms;
    return Check(lock_(pid, &a), "cuCheckpointProcessLock", pid);
  }
  absl::Status Checkpoint(pid_t pid) override {
    CheckpointArgs a{};
    return Check(checkpoint_(pid, &a), "cuCheckpointProcessCheckpoint", pid);
  }
  absl::Status Restore(pid_t pid, const std::vector<GpuPair>& remap) override {
    RestoreArgs a{};
    a.gpu_pairs = remap.empty() ? nullptr : remap.data();
    a.gpu_pairs_count = static_cast<uint32_t>(remap.size());
    return Check(restore_(pid, &a), "cuCheckpointProcessRestore", pid);
  }
  absl::Status Unlock(pid_t pid) override {
    UnlockArgs a{};
    return Check(unlock_(pid, &a), "cuCheckpointProcessUnlock", pid);
  }
  absl::StatusOr<CudaState> State(pid_t pid) override {
    int s = -1;
    RETURN_IF_ERROR(Check(state_(pid, &s), "cuCheckpointProcessGetState", pid));
    if (s < 0 || s > 3) return absl::InternalError(absl::StrCat("pid ", pid, ": unknown CUDA process state ", s));
    return static_cast<CudaState>(s);
  }
  absl::StatusOr<pid_t> RestoreThread(pid_t pid) override {
    int tid = 0;
    RETURN_IF_ERROR(Check(thread_(pid, &tid), "cuCheckpointProcessGetRestoreThreadId", pid));
    return static_cast<pid_t>(tid);
  }

 private:
  absl::Status Check(CuResult r, const char* call, pid_t pid) const {
    if (r == 0) return absl::OkStatus();
    const char* name = nullptr;
    if (error_name_ == nullptr || error_name_(r, &name) != 0 || name == nullptr) name = "an unknown CUDA error";
    return absl::FailedPreconditionError(absl::StrCat(call, " of pid ", pid, ": ", name, " (", r, ")"));
  }

  void* lib_;
  InitFn init_ = nullptr;
  ErrorNameFn error_name_ = nullptr;
  LockFn lock_ = nullptr;
  CheckpointFn checkpoint_ = nullptr;
  RestoreFn restore_ = nullptr;
  UnlockFn unlock_ = nullptr;
  StateFn state_ = nullptr;
  ThreadFn thread_ = nullptr;
};

}  // namespace

const char* CudaStateName(CudaState s) {
  switch (s) {
    case CudaState::kRunning: return "RUNNING";
    case CudaState::kLocked: return "LOCKED";
    case CudaState::kCheckpointed: return "CHECKPOINTED";
    case CudaState::kFailed: return "FAILED";
  }
  return "?";
}

absl::StatusOr<std::unique_ptr<CudaCheckpointApi>> LoadDriverCheckpointApi(const std::string& library) {
  void* lib = ::dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* err = ::dlerror();
    return absl::NotFoundError(absl::StrCat("cannot load ", library, " (the NVIDIA driver's CUDA library): ",
                                            err != nullptr ? err : "dlopen failed"));
  }
  auto api = std::make_unique<DriverApi>(lib);
  RETURN_IF_ERROR(api->Bind());
  return std::unique_ptr<CudaCheckpointApi>(std::move(api));
}

bool HoldsCudaState(pid_t pid) {
  absl::StatusOr<std::vector<std::pair<int, std::string>>> fds = proc::ListFdTargets(pid);
  if (!fds.ok()) return false;  // gone
  for (const auto& [fd, target] : *fds) {
    if (absl::StartsWith(target, "/dev/nvidia")) return true;
  }
  return MapsNvidiaDevice(pid);
}

bool MapsNvidiaDevice(pid_t pid) {
  absl::StatusOr<std::string> maps = ReadFile(absl::StrCat("/proc/", pid, "/maps"));
  return maps.ok() && absl::StrContains(*maps, " /dev/nvidia");
}

}  // namespace cairn::gpu
