#include "engine/restore/devices.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/log.h"
#include "common/status.h"
#include "engine/inject/ptrace.h"

namespace cairn::restore {

absl::StatusOr<std::unique_ptr<gpu::CudaCheckpointApi>> DriverForRestore(const std::vector<int>& image_pids,
                                                                         const std::string& where) {
  absl::StatusOr<std::unique_ptr<gpu::CudaCheckpointApi>> api = gpu::LoadDriverCheckpointApi();
  if (api.ok()) return api;
  return Annotate(api.status(),
                  absl::StrCat("restore from ", where, " refused (nothing was restored): pid ",
                               absl::StrJoin(image_pids, ", "),
                               " held CUDA state, which only the NVIDIA driver (r570 or later) puts back onto a GPU; "
                               "restore it on a machine with one"));
}

absl::StatusOr<std::set<pid_t>> RestoreDevices(gpu::CudaCheckpointApi& api, const std::vector<DeviceProcess>& procs) {
  std::set<pid_t> let_go;
  for (const DeviceProcess& p : procs) {
    auto t0 = std::chrono::steady_clock::now();
    auto fail = [&](const absl::Status& s, const char* step) {
      return Annotate(s, absl::StrCat("pid ", p.image_pid, ": the GPU driver's restore of its device state (", step,
                                      ") failed"));
    };
    absl::StatusOr<pid_t> thread = api.RestoreThread(p.pid);
    if (!thread.ok()) return fail(thread.status(), "finding its restore thread");
    if (std::find(p.tids.begin(), p.tids.end(), *thread) == p.tids.end()) {
      return fail(absl::FailedPreconditionError(absl::StrCat("the driver named thread ", *thread,
                                                             ", which is not one of the process's")),
                  "finding its restore thread");
    }
    // Only the driver's thread runs: the program's own stay held until the device is back.
    RETURN_IF_ERROR(fail(inject::Detach(*thread, 0), "letting its restore thread run"));
    let_go.insert(*thread);
    RETURN_IF_ERROR(fail(api.Restore(p.pid, {}), "device memory back onto the GPU"));
    auto t1 = std::chrono::steady_clock::now();
    CAIRN_LOG_DEBUG("event=gpu_stage stage=restore pid={} ms={:.2f}", p.pid,
                    std::chrono::duration<double>(t1 - t0).count() * 1e3);
    RETURN_IF_ERROR(fail(api.Unlock(p.pid), "unlock"));
    CAIRN_LOG_DEBUG("event=gpu_stage stage=unlock pid={} ms={:.2f}", p.pid,
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count() * 1e3);
  }
  return let_go;
}

}  // namespace cairn::restore
