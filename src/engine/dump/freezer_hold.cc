#include "engine/dump/freezer_hold.h"

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "common/status.h"

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
  RETURN_IF_ERROR(SetFreezerState(cgroup_, "FROZEN"));
  frozen_ = true;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (FreezerState(cgroup_) != "FROZEN") {
    if (std::chrono::steady_clock::now() > deadline) {
      Thaw();
      return absl::DeadlineExceededError(absl::StrCat("freezer cgroup ", cgroup_, " did not reach FROZEN within 2 s"));
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> ThawPausedCgroup(const std::string& cgroup, GuardJournal& journal) {
  if (cgroup.empty() || FreezerState(cgroup) != "FROZEN") return false;
  RETURN_IF_ERROR(journal.PausedThawed(cgroup));
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
    absl::Status s = SetFreezerState(cgroup_, "FROZEN");
    if (!s.ok()) CAIRN_LOG_WARN("event=freezer_pause_failed cgroup={} error=\"{}\"", cgroup_, s.ToString());
    return;
  }
  if (!frozen_) return;
  frozen_ = false;
  absl::Status s = SetFreezerState(cgroup_, "THAWED");
  if (!s.ok()) CAIRN_LOG_WARN("event=freezer_thaw_failed cgroup={} error=\"{}\"", cgroup_, s.ToString());
}

}  // namespace cairn::dump
