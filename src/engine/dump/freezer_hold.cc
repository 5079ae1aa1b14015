#include "engine/dump/freezer_hold.h"

#include <fcntl.h>
#include <sys/ptrace.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/file_util.h"
#include "common/log.h"
#include "common/status.h"
#include "engine/inject/ptrace.h"

namespace cairn::dump {

absl::Status SetFreezerState(const std::string& cgroup, const char* state) {
  std::string path = cgroup + "/freezer.state";
  int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus("open " + path);
  ssize_t n = ::write(fd, state, std::strlen(state));
  int err = errno;
  ::close(fd);
  if (n != static_cast<ssize_t>(std::strlen(state))) {
    errno = err;
    return ErrnoStatus(absl::StrCat("write ", state, " to ", path));
  }
  return absl::OkStatus();
}

std::string FreezerState(const std::string& cgroup) {
  std::string path = cgroup + "/freezer.state";
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "";
  char buf[32];
  ssize_t n = ::read(fd, buf, sizeof buf - 1);
  ::close(fd);
  if (n <= 0) return "";
  std::string s(buf, static_cast<size_t>(n));
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

absl::Status FreezerHold::Freeze(GuardJournal& journal) {
  if (cgroup_.empty() || frozen_) return absl::OkStatus();
  if (paused_) {
    // Its runtime's pause is given back as the dump lets them go; frozen now, the dump's own
    // calls would not run.
    CAIRN_LOG_WARN("event=freezer_hold_skipped cgroup={} reason=\"paused by its runtime\"", cgroup_);
    return absl::OkStatus();
  }
  if (::access((cgroup_ + "/freezer.state").c_str(), W_OK) != 0) {
    // No v1 freezer here (a host without that hierarchy): the ptrace stop alone holds them,
    // with the guardian's short window (guardian.h, point 6).
    CAIRN_LOG_WARN("event=freezer_hold_unavailable cgroup={} errno={}", cgroup_, errno);
    return absl::OkStatus();
  }
  RETURN_IF_ERROR(journal.FreezerHeld(cgroup_));
  frozen_ = true;
  absl::Status s = FreezeCgroup(cgroup_);
  if (!s.ok()) Thaw();
  return s;
}

absl::Status FreezeCgroup(const std::string& cgroup) {
  RETURN_IF_ERROR(SetFreezerState(cgroup, "FROZEN"));
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (FreezerState(cgroup) != "FROZEN") {
    if (std::chrono::steady_clock::now() > deadline) {
      return absl::DeadlineExceededError(absl::StrCat("freezer cgroup ", cgroup, " did not reach FROZEN within 2 s"));
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  return absl::OkStatus();
}

absl::StatusOr<PausedSeize> PausedSeize::Seize(const std::string& cgroup, int retry_eperm_ms) {
  PausedSeize out;
  ASSIGN_OR_RETURN(std::string tasks, ReadFile(cgroup + "/tasks"));
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(retry_eperm_ms);
  for (absl::string_view line : absl::StrSplit(tasks, '\n', absl::SkipEmpty())) {
    pid_t tid = 0;
    if (!absl::SimpleAtoi(line, &tid)) continue;
    absl::StatusOr<std::string> wchan = ReadFile(absl::StrCat("/proc/", tid, "/wchan"));
    if (!wchan.ok() || *wchan == "do_signal_stop") continue;  // gone, or in a group stop
    absl::Status s;
    while (absl::IsPermissionDenied(s = inject::Seize(tid, PTRACE_O_TRACESYSGOOD)) &&
           std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    if (absl::IsNotFound(s)) continue;  // it exited
    if (s.ok()) {
      out.tids_.insert(tid);
      s = inject::Interrupt(tid);
      if (absl::IsNotFound(s)) s = absl::OkStatus();
    }
    if (!s.ok()) {
      // Those seized so far cannot be let go while frozen (a detach needs their stop): they are
      // thawed to take it and paused again before they go, as they were.
      (void)SetFreezerState(cgroup, "THAWED");
      out.Collect({});
      (void)FreezeCgroup(cgroup);
      out.Release({});
      return s;
    }
  }
  return out;
}

void PausedSeize::Collect(const std::set<pid_t>& kept) {
  // Each stops once its cgroup is thawed; one that has not within 2 s (its cgroup still frozen:
  // a failed thaw) stays seized until this thread's exit lets it go.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  for (pid_t tid : tids_) {
    if (kept.count(tid) || stopped_.count(tid)) continue;
    for (;;) {
      absl::StatusOr<std::optional<inject::StopInfo>> stop = inject::PollStop(tid);
      if (!stop.ok()) {
        stopped_[tid] = -1;  // not ours any more
        break;
      }
      if (!stop->has_value()) {
        if (std::chrono::steady_clock::now() > deadline) break;
        std::this_thread::sleep_for(std::chrono::microseconds(200));
        continue;
      }
      inject::StopInfo::Kind kind = (*stop)->kind;
      bool gone = kind == inject::StopInfo::Kind::kExited || kind == inject::StopInfo::Kind::kKilled;
      stopped_[tid] = gone ? -1 : kind == inject::StopInfo::Kind::kSignalStop ? (*stop)->signal : 0;
      break;
    }
  }
}

void PausedSeize::Release(const std::set<pid_t>& kept) {
  Collect(kept);
  for (const auto& [tid, signal] : stopped_) {
    // Its interrupt's stop, or a signal's on the way to it: let go, the signal delivered.
    if (signal >= 0 && !kept.count(tid)) (void)inject::Detach(tid, signal);
  }
  tids_.clear();
  stopped_.clear();
}

absl::StatusOr<bool> ThawPausedCgroup(const std::string& cgroup, GuardJournal& journal, PausedSeize* seized) {
  if (cgroup.empty() || FreezerState(cgroup) != "FROZEN") return false;
  RETURN_IF_ERROR(journal.PausedThawed(cgroup));  // (before the seize: a dumper dying there leaves it paused)
  ASSIGN_OR_RETURN(*seized, PausedSeize::Seize(cgroup));
  RETURN_IF_ERROR(SetFreezerState(cgroup, "THAWED"));
  CAIRN_LOG_DEBUG("event=paused_cgroup_thawed cgroup={}", cgroup);
  return true;
}

void FreezerHold::ThawForKill() {
  paused_ = false;
  Thaw();
}

void FreezerHold::Thaw() {
  if (paused_) {
    paused_ = false;
    absl::Status s = FreezeCgroup(cgroup_);  // reached before the processes are let go
    if (!s.ok()) CAIRN_LOG_WARN("event=freezer_pause_failed cgroup={} error=\"{}\"", cgroup_, s.ToString());
    return;
  }
  if (!frozen_) return;
  frozen_ = false;
  absl::Status s = SetFreezerState(cgroup_, "THAWED");
  if (!s.ok()) CAIRN_LOG_WARN("event=freezer_thaw_failed cgroup={} error=\"{}\"", cgroup_, s.ToString());
}

}  // namespace cairn::dump
