#include "engine/dump/devices.h"

#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/file_util.h"
#include "common/log.h"
#include "common/status.h"
#include "engine/dump/tracker.h"
#include "engine/gpu/nvml.h"
#include "engine/proc/stat.h"

namespace cairn::dump {
namespace {

// Whether `pid` is still the process journaled with `start_time` and not dead (a zombie, or one
// the guardian just killed, has nothing left to put back).
bool StillThere(pid_t pid, uint64_t start_time) {
  absl::StatusOr<proc::Stat> st = proc::ReadStat(pid);
  return st.ok() && st->start_time == start_time && st->state != 'Z' && st->state != 'X';
}

}  // namespace

absl::StatusOr<DumpDevices> DumpDevices::Find(const std::vector<pid_t>& pids) {
  DumpDevices d;
  std::vector<pid_t> cuda;
  for (pid_t pid : pids) {
    if (gpu::MapsNvidiaDevice(pid)) cuda.push_back(pid);  // (every dump asks: the cheap test)
  }
  if (cuda.empty()) return d;
  absl::StatusOr<std::unique_ptr<gpu::CudaCheckpointApi>> api = gpu::LoadDriverCheckpointApi();
  if (!api.ok()) {
    return Annotate(api.status(), absl::StrCat("pid ", absl::StrJoin(cuda, ", "),
                                               " holds CUDA state (an NVIDIA device open): its device memory is "
                                               "saved through the NVIDIA driver's process checkpoint API"));
  }
  // Only those the driver knows: one with an NVIDIA device open for another reason (NVML, a
  // display) is not the driver's to checkpoint, and the precheck refuses its device file.
  for (pid_t pid : cuda) {
    absl::StatusOr<gpu::CudaState> state = (*api)->State(pid);
    if (state.ok()) {
      d.candidates_.insert(pid);
    } else {
      CAIRN_LOG_INFO("event=gpu_not_cuda pid={} why=\"{}\"", pid, state.status().ToString());
    }
  }
  d.api_ = std::move(*api);
  return d;
}

absl::Status DumpDevices::Take(unsigned lock_timeout_ms, GuardJournal& journal) {
  std::vector<pid_t> cuda;
  for (pid_t pid : candidates_) {
    if (gpu::HoldsCudaState(pid)) cuda.push_back(pid);  // (one gone meanwhile has nothing to save)
  }
  if (cuda.empty()) return absl::OkStatus();
  std::vector<std::pair<pid_t, uint64_t>> journaled;
  for (pid_t pid : cuda) {
    ASSIGN_OR_RETURN(uint64_t start, ProcessStartTime(pid));
    journaled.emplace_back(pid, start);
  }
  // Which GPUs they use, while they still have contexts there (NVML lists those).
  if (absl::StatusOr<std::unique_ptr<gpu::Nvml>> nvml = gpu::Nvml::Load(); nvml.ok()) {
    for (pid_t pid : cuda) {
      absl::StatusOr<std::vector<std::pair<int, uint64_t>>> used = (*nvml)->UsedBy(pid);
      if (!used.ok()) {
        CAIRN_LOG_WARN("event=gpu_uses_unknown pid={} error=\"{}\"", pid, used.status().ToString());
        continue;
      }
      for (const auto& [index, bytes] : *used) {
        const gpu::GpuInfo& g = (*nvml)->gpus()[static_cast<size_t>(index)];
        image::GpuUse u;
        u.set_index(index);
        u.set_uuid(g.uuid);
        u.set_name(g.name);
        u.set_memory_used(bytes);
        u.set_memory_total(g.memory_total);
        uses_[pid].push_back(std::move(u));
      }
    }
  } else {
    CAIRN_LOG_INFO("event=gpu_uses_unknown reason=\"{}\" effect=\"restored onto the same GPU indices only\"",
                   nvml.status().ToString());
  }
  RETURN_IF_ERROR(journal.DevicesLocking(journaled));
  journal_ = &journal;
  absl::StatusOr<gpu::DeviceCheckpoint> taken = gpu::DeviceCheckpoint::Take(*api_, cuda, lock_timeout_ms);
  if (!taken.ok()) {
    // Put back by Take, unless its own message says otherwise: settled once the driver agrees.
    bool all_back = true;
    for (const auto& [pid, start] : journaled) {
      absl::StatusOr<gpu::CudaState> s = api_->State(pid);
      if (StillThere(pid, start) && (!s.ok() || *s != gpu::CudaState::kRunning)) all_back = false;
    }
    if (all_back) journal.DevicesSettled();
    candidates_.clear();
    return Annotate(taken.status(), "the driver cannot checkpoint every use of CUDA (some versions refuse "
                                    "UVM/managed memory, CUDA IPC between processes, MPS or MIG)");
  }
  taken_.emplace(std::move(*taken));
  pids_ = cuda;
  // The driver has released their device files: still open, they could not be saved.
  for (pid_t pid : cuda) {
    if (!gpu::HoldsCudaState(pid)) continue;
    absl::Status resumed = Resume();
    return absl::FailedPreconditionError(absl::StrCat(
        "pid ", pid, " still has an NVIDIA device open or mapped after the driver checkpointed its device state; "
        "such a process cannot be saved (", resumed.ok() ? "it was put back to RUNNING" : resumed.ToString(), ")"));
  }
  return absl::OkStatus();
}

DumpDevices::~DumpDevices() {
  if (!taken_ || taken_->pids().empty()) return;
  absl::Status s = Resume();
  if (!s.ok()) CAIRN_LOG_WARN("event=device_resume_failed error=\"{}\"", s.ToString());
}

absl::Status DumpDevices::Resume() {
  if (!taken_ || taken_->pids().empty()) return absl::OkStatus();
  absl::Status s = taken_->Resume();
  // Not settled on failure: the guardian's fresh cairn tries again (guardian.h, point 11).
  if (s.ok()) journal_->DevicesSettled();
  return s;
}

absl::Status DumpDevices::Release(const std::set<pid_t>& died) {
  if (!taken_ || taken_->pids().empty()) return absl::OkStatus();
  std::vector<pid_t> living;
  for (pid_t pid : taken_->pids()) {
    if (died.count(pid) == 0) living.push_back(pid);
  }
  taken_->Release();
  std::string left = gpu::PutBack(*api_, living, living);
  if (!left.empty()) {
    // Not settled: the guardian's fresh cairn tries again (guardian.h, point 11).
    return absl::InternalError(absl::StrCat("processes that left the tree before the freeze: ", left));
  }
  journal_->DevicesSettled();
  return absl::OkStatus();
}

absl::Status PutBackJournaledDevices(GuardJournal& journal, std::vector<std::string>* lines, bool just_killed) {
  std::vector<std::pair<pid_t, uint64_t>> procs = journal.UnsettledDevices();
  if (procs.empty()) return absl::OkStatus();
  std::vector<std::pair<pid_t, uint64_t>> alive;
  for (const auto& [pid, start] : procs) {
    if (StillThere(pid, start)) {
      alive.emplace_back(pid, start);
    } else {
      lines->push_back(absl::StrCat("pid ", pid, ": gone, its device state with it"));
    }
  }
  if (alive.empty()) {
    journal.DevicesSettled();
    return absl::OkStatus();
  }
  std::vector<pid_t> alive_pids;
  for (const auto& a : alive) alive_pids.push_back(a.first);
  absl::StatusOr<std::unique_ptr<gpu::CudaCheckpointApi>> api = gpu::LoadDriverCheckpointApi();
  if (!api.ok()) {
    return Annotate(api.status(), absl::StrCat("pid ", absl::StrJoin(alive_pids, ", "),
                                               " may be left locked or checkpointed by the GPU driver"));
  }
  std::vector<std::string> failed;
  for (const auto& [pid, start] : alive) {
    absl::StatusOr<gpu::CudaState> was = gpu::BringBackToRunning(**api, pid);
    if (was.ok()) {
      lines->push_back(absl::StrCat("pid ", pid, ": its CUDA state was ", gpu::CudaStateName(*was), ", RUNNING now"));
      continue;
    }
    // One the guardian just killed may not be dead yet.
    for (int i = 0; just_killed && i < 100 && StillThere(pid, start); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (!StillThere(pid, start)) {
      lines->push_back(absl::StrCat("pid ", pid, ": gone, its device state with it"));
      continue;
    }
    failed.push_back(std::string(was.status().message()));
  }
  if (!failed.empty()) {
    return absl::InternalError(absl::StrCat("not put back to RUNNING: ", absl::StrJoin(failed, "; ")));
  }
  journal.DevicesSettled();
  return absl::OkStatus();
}

bool LeftByTheDriver(const GuardJournal& journal) {
  for (const auto& [pid, start] : journal.UnsettledDevices()) {
    if (StillThere(pid, start)) return true;
  }
  return false;
}

int RunGpuPutBack(const std::string& journal_path, int journal_fd) {
  auto say = [](const std::string& line) { std::fprintf(stderr, "cairn gpu-put-back: %s\n", line.c_str()); };
  struct stat held {}, named {};
  if (::fstat(journal_fd, &held) != 0 || !S_ISREG(held.st_mode) || held.st_uid != ::geteuid() ||
      static_cast<uint64_t>(held.st_size) != sizeof(GuardJournal) || ::stat(journal_path.c_str(), &named) != 0 ||
      named.st_ino != held.st_ino || named.st_dev != held.st_dev) {
    say(absl::StrCat("--journal-fd ", journal_fd, " is not the dump journal ", journal_path,
                     ": nothing done (this command is run by a dump's guardian, not by hand)"));
    return 2;
  }
  // The guardian's lock, inherited (the same open file description: taking it again succeeds);
  // held by anyone else, the journal is not this command's.
  if (::flock(journal_fd, LOCK_EX | LOCK_NB) != 0) {
    say(absl::StrCat("lock ", journal_path, ": ", std::strerror(errno), ": nothing done"));
    return 2;
  }
  void* mem = ::mmap(nullptr, sizeof(GuardJournal), PROT_READ | PROT_WRITE, MAP_SHARED, journal_fd, 0);
  if (mem == MAP_FAILED) {
    say(absl::StrCat("mmap ", journal_path, ": ", std::strerror(errno)));
    return 2;
  }
  auto* j = static_cast<GuardJournal*>(mem);
  if (!j->Marked()) {
    say(absl::StrCat(journal_path, " is not a journal of this cairn: nothing done"));
    ::munmap(mem, sizeof(GuardJournal));
    return 2;
  }
  std::vector<std::string> lines;
  absl::Status s = PutBackJournaledDevices(*j, &lines);
  ::munmap(mem, sizeof(GuardJournal));
  for (const std::string& line : lines) say(line);
  if (s.ok()) {
    ::unlink(journal_path.c_str());
    return 0;
  }
  std::string failed = journal_path + ".failed";
  ::rename(journal_path.c_str(), failed.c_str());
  say(absl::StrCat(s.ToString(), "; the journal is kept as ", failed));
  return 1;
}

}  // namespace cairn::dump
