#pragma once
// Readers for a process's descriptors (/proc/PID/fd, /proc/PID/fdinfo) and POSIX timers
// (/proc/PID/timers).

#include <sys/types.h>

#include <cstdint>
#include <string>
#include "absl/strings/string_view.h"
#include <vector>

#include "absl/status/statusor.h"

namespace cairn::proc {

struct FdInfo {
  int fd = -1;
  std::string target;   // readlink of /proc/PID/fd/N
  int64_t pos = 0;
  int flags = 0;        // open flags including O_CLOEXEC as the kernel reports them
  uint64_t mnt_id = 0;
};

// Parses the text of /proc/PID/fdinfo/N (the common lines: pos, flags, mnt_id).
absl::StatusOr<FdInfo> ParseFdInfo(absl::string_view text);

// Every open descriptor of `pid`, ascending.
absl::StatusOr<std::vector<FdInfo>> ReadFds(pid_t pid);

struct TimerInfo {
  int id = 0;
  int signo = 0;
  uint64_t sigval = 0;
  std::string notify;     // "signal" or "none"
  bool to_thread = false; // SIGEV_THREAD_ID: "notify: signal/tid.N"
  int notify_tid = 0;
  int clock = 0;
};

absl::StatusOr<std::vector<TimerInfo>> ParseTimers(absl::string_view text);
absl::StatusOr<std::vector<TimerInfo>> ReadTimers(pid_t pid);

}  // namespace cairn::proc
