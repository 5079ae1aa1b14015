#include "engine/gpu/device.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/log.h"
#include "common/status.h"

namespace cairn::gpu {
namespace {

double MsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() * 1e3;
}

// "pid 12 (state LOCKED): cuCheckpointProcessUnlock of pid 12: ..." for a process not put back.
std::string NotPutBack(CudaCheckpointApi& api, pid_t pid, const absl::Status& why) {
  absl::StatusOr<CudaState> state = api.State(pid);
  return absl::StrCat("pid ", pid, " (driver state ", state.ok() ? CudaStateName(*state) : "unknown",
                      "): ", why.message());
}

}  // namespace

std::string PutBack(CudaCheckpointApi& api, const std::vector<pid_t>& locked, const std::vector<pid_t>& checkpointed) {
  std::vector<std::string> failed;
  // The reverse of the order they were taken in: the last checkpointed first, then the locks.
  for (auto it = checkpointed.rbegin(); it != checkpointed.rend(); ++it) {
    auto t0 = std::chrono::steady_clock::now();
    absl::Status s = api.Restore(*it, {});
    CAIRN_LOG_DEBUG("event=gpu_stage stage=restore pid={} ms={:.2f}", *it, MsSince(t0));
    if (s.ok()) {
      auto t1 = std::chrono::steady_clock::now();
      s = api.Unlock(*it);
      CAIRN_LOG_DEBUG("event=gpu_stage stage=unlock pid={} ms={:.2f}", *it, MsSince(t1));
    }
    if (!s.ok()) failed.push_back(NotPutBack(api, *it, s));
  }
  for (auto it = locked.rbegin(); it != locked.rend(); ++it) {
    if (std::find(checkpointed.begin(), checkpointed.end(), *it) != checkpointed.end()) continue;
    absl::Status s = api.Unlock(*it);
    if (!s.ok()) failed.push_back(NotPutBack(api, *it, s));
  }
  if (failed.empty()) return "";
  return absl::StrCat("not put back: ", absl::StrJoin(failed, "; "));
}

absl::StatusOr<CudaState> BringBackToRunning(CudaCheckpointApi& api, pid_t pid) {
  ASSIGN_OR_RETURN(CudaState found, api.State(pid));
  switch (found) {
    case CudaState::kCheckpointed:
      RETURN_IF_ERROR(api.Restore(pid, {}));
      RETURN_IF_ERROR(api.Unlock(pid));
      break;
    case CudaState::kLocked:
      RETURN_IF_ERROR(api.Unlock(pid));
      break;
    case CudaState::kRunning:
      break;
    case CudaState::kFailed:
      return absl::FailedPreconditionError(absl::StrCat(
          "pid ", pid, ": the driver reports its CUDA state FAILED; it cannot be put back to RUNNING"));
  }
  return found;
}

absl::StatusOr<DeviceCheckpoint> DeviceCheckpoint::Take(CudaCheckpointApi& api, const std::vector<pid_t>& pids,
                                                        unsigned lock_timeout_ms) {
  std::vector<pid_t> locked, checkpointed;
  auto fail = [&](const absl::Status& s, const std::string& step) {
    std::string left = PutBack(api, locked, checkpointed);
    return Annotate(s, absl::StrCat("the device checkpoint (", step, ") failed; every process was put back to RUNNING",
                                    left.empty() ? "" : absl::StrCat(" but ", left)));
  };
  auto t_lock = std::chrono::steady_clock::now();
  for (pid_t pid : pids) {
    absl::Status s = api.Lock(pid, lock_timeout_ms);
    if (!s.ok()) {
      return fail(s, absl::StrCat("lock: its CUDA work did not finish within ", lock_timeout_ms,
                                  " ms, or the driver refused; a longer lock timeout may help"));
    }
    locked.push_back(pid);
  }
  CAIRN_LOG_DEBUG("event=gpu_stage stage=lock pids={} ms={:.2f}", absl::StrJoin(pids, ","), MsSince(t_lock));
  auto t_checkpoint = std::chrono::steady_clock::now();
  for (pid_t pid : pids) {
    absl::Status s = api.Checkpoint(pid);
    if (!s.ok()) return fail(s, "checkpoint of its device memory into host memory");
    checkpointed.push_back(pid);
  }
  CAIRN_LOG_DEBUG("event=gpu_stage stage=checkpoint pids={} ms={:.2f}", absl::StrJoin(pids, ","),
                  MsSince(t_checkpoint));
  return DeviceCheckpoint(&api, std::move(checkpointed));
}

DeviceCheckpoint::DeviceCheckpoint(DeviceCheckpoint&& o) noexcept : api_(o.api_), pids_(std::move(o.pids_)) {
  o.pids_.clear();
}

DeviceCheckpoint::~DeviceCheckpoint() {
  if (pids_.empty()) return;
  absl::Status s = Resume();
  if (!s.ok()) CAIRN_LOG_WARN("event=device_resume_failed error=\"{}\"", s.ToString());
}

absl::Status DeviceCheckpoint::Resume() {
  std::vector<pid_t> pids = std::move(pids_);
  pids_.clear();
  std::string left = PutBack(*api_, pids, pids);
  if (left.empty()) return absl::OkStatus();
  return absl::InternalError(absl::StrCat("the processes' device state could not all be put back: ", left));
}

}  // namespace cairn::gpu
