#pragma once
// The GPU side of a dump (issue 14): the checkpoint's processes that hold CUDA state have their
// device state moved into their host memory by the NVIDIA driver (gpu/device.h) before anything
// else is done to them, so that the rest of the dump sees ordinary processes and saves their
// device memory with the rest; afterwards they are put back, unless they die. They are journaled
// before the driver locks any, so that a dumper killed meanwhile has them put back by a fresh
// cairn (guardian.h, point 11).

#include <sys/types.h>

#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/dump/guardian.h"
#include "engine/gpu/cuda_checkpoint.h"
#include "engine/gpu/device.h"
#include "image.pb.h"

namespace cairn::dump {

class DumpDevices {
 public:
  DumpDevices() = default;
  DumpDevices(DumpDevices&&) = default;
  DumpDevices& operator=(DumpDevices&&) = delete;
  ~DumpDevices();  // Resume() unless resumed or released

  // Those of `pids` that hold CUDA state the driver knows (candidates()), nothing done to them
  // yet. None holds an NVIDIA device: an empty result, and the driver is not loaded.
  static absl::StatusOr<DumpDevices> Find(const std::vector<pid_t>& pids);
  const std::set<pid_t>& candidates() const { return candidates_; }

  // The candidates still alive, journaled, then locked (each waits at most `lock_timeout_ms`
  // for its submitted work) and checkpointed by the driver. On failure nothing is left locked or
  // checkpointed that could be put back; the error names the process and the step.
  absl::Status Take(unsigned lock_timeout_ms, GuardJournal& journal);

  // The processes whose device state is in their host memory now (the checkpoint records them:
  // a restore hands them back to the driver).
  const std::vector<pid_t>& pids() const { return pids_; }
  // The GPUs each of them had contexts on (NVML, read before the device checkpoint; none for a
  // process when NVML is missing: a restore then puts it back on the same GPU indices).
  const std::map<pid_t, std::vector<image::GpuUse>>& gpu_uses() const { return uses_; }

  // They run on (a dump that leaves them running, or one that failed): each restored onto its
  // GPUs and unlocked, after the thaw (the driver's thread in each process does the work).
  absl::Status Resume();
  // Those of `died` died after their dump (their device state goes with them); any other (one
  // that left the tree before the freeze, and so was not dumped) is put back.
  absl::Status Release(const std::set<pid_t>& died);

 private:
  std::unique_ptr<gpu::CudaCheckpointApi> api_;
  std::optional<gpu::DeviceCheckpoint> taken_;
  GuardJournal* journal_ = nullptr;
  std::set<pid_t> candidates_;
  std::vector<pid_t> pids_;
  std::map<pid_t, std::vector<image::GpuUse>> uses_;
};

// For a journal whose device side is not settled (guardian.h, point 11): each journaled process
// still alive (the same start time) put back to RUNNING by the state the driver reports. Appends
// one line per process; the journal is marked settled when every one is. The error names those
// that could not be put back. `just_killed`: the processes may have been killed a moment ago (a
// guardian's kill): one the driver refuses is waited for a second in case it is dying.
absl::Status PutBackJournaledDevices(GuardJournal& journal, std::vector<std::string>* lines,
                                     bool just_killed = true);

// Whether `journal` names processes the GPU driver may still hold locked or checkpointed: not
// settled, and alive (the same start time).
bool LeftByTheDriver(const GuardJournal& journal);

// `cairn gpu-put-back --journal PATH --journal-fd FD` (and cairnd's): what a dump's guardian
// execs for point 11, holding the journal's file (and its lock) at FD. Puts the processes back,
// then removes the journal (kept as PATH.failed when some could not be). Returns the exit code.
int RunGpuPutBack(const std::string& journal_path, int journal_fd);

}  // namespace cairn::dump
