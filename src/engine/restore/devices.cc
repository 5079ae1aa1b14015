#include "engine/restore/devices.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/log.h"
#include "common/status.h"
#include "engine/gpu/nvml.h"
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

absl::StatusOr<std::map<int, std::vector<gpu::GpuPair>>> PlanGpuRemap(const std::vector<const image::Process*>& procs,
                                                                      const std::map<int, int>& gpu_map, bool lenient,
                                                                      const std::string& where) {
  std::map<int, std::vector<gpu::GpuPair>> plan;
  std::map<int, const image::GpuUse*> recorded;  // the dump's GPUs by index
  for (const image::Process* p : procs) {
    for (const image::GpuUse& u : p->gpus()) recorded.emplace(u.index(), &u);
  }
  auto refused = [&](const std::string& why) {
    return absl::FailedPreconditionError(absl::StrCat("restore from ", where, " refused (nothing was restored): ", why));
  };
  // One GPU here per GPU of the dump: the driver moves whole GPUs, not parts of them.
  std::map<int, int> target_of;  // this machine's GPU -> the dump's GPU going there
  for (const auto& [index, use] : recorded) {
    auto m = gpu_map.find(index);
    int to = m != gpu_map.end() ? m->second : index;
    if (auto [it, fresh] = target_of.emplace(to, index); !fresh) {
      return refused(absl::StrCat("GPU ", it->second, " and GPU ", index, " of the dump would both go onto GPU ", to,
                                  " here: give each its own (--gpu-map OLD=NEW)"));
    }
  }
  for (const auto& [from, to] : gpu_map) {
    if (recorded.count(from) == 0) {
      if (lenient) continue;
      return refused(absl::StrCat("--gpu-map ", from, "=", to, ": the checkpoint's processes used no GPU ", from,
                                  recorded.empty() ? " (it records no GPU: NVML was missing at its dump)" : ""));
    }
  }
  if (recorded.empty()) return plan;
  absl::StatusOr<std::unique_ptr<gpu::Nvml>> nvml = gpu::Nvml::Load();
  if (!nvml.ok()) {
    if (!gpu_map.empty()) return refused(absl::StrCat("--gpu-map needs NVML here: ", nvml.status().message()));
    CAIRN_LOG_WARN("event=gpu_remap_unchecked reason=\"{}\" effect=\"restored onto the same GPU indices\"",
                   nvml.status().ToString());
    return plan;
  }
  const std::vector<gpu::GpuInfo>& here = (*nvml)->gpus();
  std::map<int, uint64_t> landing;  // device memory restored onto each GPU here
  bool moves = false;
  for (const image::Process* p : procs) {
    if (!p->cuda_checkpointed() || p->zombie()) continue;
    for (const image::GpuUse& u : p->gpus()) {
      auto m = gpu_map.find(u.index());
      int to = m != gpu_map.end() ? m->second : u.index();
      std::string was = absl::StrCat("GPU ", u.index(), " (", u.name(), ", ", u.uuid(), ")");
      if (to < 0 || static_cast<size_t>(to) >= here.size()) {
        return refused(absl::StrCat("pid ", p->pid(), " used ", was, " at its dump; there is no GPU ", to, " here (",
                                    here.size(), " GPU", here.size() == 1 ? "" : "s", "): give --gpu-map ", u.index(),
                                    "=N"));
      }
      const gpu::GpuInfo& g = here[static_cast<size_t>(to)];
      std::string is = absl::StrCat("GPU ", to, " here (", g.name, ", ", g.uuid, ")");
      if (g.name != u.name()) {
        return refused(absl::StrCat("pid ", p->pid(), " used ", was, " at its dump; ", is,
                                    " is another model: device state restores only onto the same model"));
      }
      // NVML says NVML_VALUE_NOT_AVAILABLE (all ones) where it cannot tell a process's usage.
      constexpr uint64_t kUnknown = ~uint64_t{0};
      if (u.memory_used() != kUnknown) landing[to] += u.memory_used();
      if (u.memory_used() != kUnknown && landing[to] > g.memory_free) {
        return refused(absl::StrCat("pid ", p->pid(), " used ", was, " at its dump, ", u.memory_used() >> 20,
                                    " MiB of it; ", is, " has ", g.memory_free >> 20, " MiB free for ",
                                    landing[to] >> 20, " MiB restored onto it"));
      }
      gpu::GpuPair pair;
      ASSIGN_OR_RETURN(pair.old_uuid, gpu::UuidBytes(u.uuid()));
      ASSIGN_OR_RETURN(pair.new_uuid, gpu::UuidBytes(g.uuid));
      plan[p->pid()].push_back(pair);
      moves |= g.uuid != u.uuid();
    }
  }
  // The driver takes pairs for every GPU of a process or none: none when nothing moves.
  if (!moves) plan.clear();
  return plan;
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
    RETURN_IF_ERROR(fail(api.Restore(p.pid, p.remap), "device memory back onto the GPU"));
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
