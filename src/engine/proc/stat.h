#pragma once
// Readers for /proc/PID/stat, /proc/PID/status and /proc/PID/task.

#include <sys/types.h>

#include <cstdint>
#include <string>
#include "absl/strings/string_view.h"
#include <vector>

#include "absl/status/statusor.h"

namespace cairn::proc {

struct Stat {
  pid_t pid = 0;
  std::string comm;
  char state = '?';
  pid_t ppid = 0;
  pid_t pgrp = 0;
  pid_t session = 0;
  uint64_t flags = 0;        // PF_* (PF_KTHREAD = 0x00200000)
  int64_t num_threads = 0;
  uint64_t start_time = 0;   // field 22: clock ticks after boot
  uint64_t start_code = 0, end_code = 0, start_stack = 0;
  uint64_t start_data = 0, end_data = 0, start_brk = 0;
  uint64_t arg_start = 0, arg_end = 0, env_start = 0, env_end = 0;
  int64_t exit_code = 0;     // field 52: the wait status a zombie will report
  uint64_t tty_nr = 0;       // field 7: the controlling terminal (encoded dev_t: TtyDevice), 0: none
  int64_t tpgid = -1;        // field 8: that terminal's foreground process group, -1: none

  bool IsKernelThread() const { return (flags & 0x00200000) != 0; }
};

// The device number (as stat's st_rdev) of a controlling terminal stat's field 7 names.
uint64_t TtyDevice(uint64_t tty_nr);

// Parses the text of /proc/PID/stat (comm may contain spaces and parentheses).
absl::StatusOr<Stat> ParseStat(absl::string_view text);
absl::StatusOr<Stat> ReadStat(pid_t pid);

struct Status {
  pid_t tgid = 0;        // "Tgid": the thread group (its leader's id)
  uint32_t uid[4] = {};  // real, effective, saved, fs
  uint32_t gid[4] = {};
  std::vector<uint32_t> groups;
  uint64_t cap_inh = 0, cap_prm = 0, cap_eff = 0, cap_bnd = 0, cap_amb = 0;
  bool no_new_privs = false;
  int seccomp = 0;
  int umask = -1;  // "Umask" (Linux 4.7+); -1 when not shown
  uint64_t sig_ignored = 0;  // "SigIgn": bit N-1 set when signal N is ignored
  uint64_t sig_caught = 0;   // "SigCgt": bit N-1 set when signal N has a handler
  std::vector<pid_t> nspids;  // "NSpid": the id in each nested PID namespace, outermost first
  int thp_enabled = -1;       // "THP_enabled" (Linux 5.0+): 0 after prctl(PR_SET_THP_DISABLE); -1 when not shown
};

absl::StatusOr<Status> ParseStatus(absl::string_view text);
absl::StatusOr<Status> ReadStatus(pid_t pid);
// /proc/PID/task/TID/status.
absl::StatusOr<Status> ReadTaskStatus(pid_t pid, pid_t tid);

// Resource limits as /proc/PID/limits shows them, indexed by RLIMIT_*: reading them needs no
// more than reading the process's /proc files, where prlimit(2) on another process needs its
// uids or CAP_SYS_RESOURCE. Unlimited is RLIM_INFINITY.
struct Limit {
  uint64_t cur = 0, max = 0;
};
absl::StatusOr<std::vector<Limit>> ParseLimits(absl::string_view text);
absl::StatusOr<std::vector<Limit>> ReadLimits(pid_t pid);

// Thread ids listed in /proc/PID/task, ascending.
absl::StatusOr<std::vector<pid_t>> ListTasks(pid_t pid);

// Children of every thread of `pid` (/proc/PID/task/TID/children), ascending.
absl::StatusOr<std::vector<pid_t>> ListChildren(pid_t pid);

}  // namespace cairn::proc
