#pragma once
// Readers for a process's descriptors (/proc/PID/fd, /proc/PID/fdinfo) and POSIX timers
// (/proc/PID/timers).

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace cairn::proc {

struct FdInfo {
  int fd = -1;
  std::string target;   // readlink of /proc/PID/fd/N
  int64_t pos = 0;
  int flags = 0;        // open flags including O_CLOEXEC as the kernel reports them
  uint64_t mnt_id = 0;
  // Every other line, in order, as (text before the first ':', the rest trimmed): the
  // object-specific lines ("eventfd-count", "clockid", "sigmask", one "tfd" per epoll
  // registration...), which the typed parsers below read. Keys may repeat.
  std::vector<std::pair<std::string, std::string>> extra;
};

// Parses the text of /proc/PID/fdinfo/N: the common lines (pos, flags, mnt_id), which
// must be well-formed, and the rest kept verbatim in `extra`.
absl::StatusOr<FdInfo> ParseFdInfo(absl::string_view text);

// The object-specific fdinfo of the kernel objects the engine saves. Each parser reads
// `info.extra` and returns DataLoss when a line it needs is missing or malformed.

struct EventfdInfo {
  uint64_t count = 0;
  // From "eventfd-semaphore", which only recent (6.x) kernels print; false where absent.
  bool semaphore = false;
  bool semaphore_reported = false;
};
absl::StatusOr<EventfdInfo> ParseEventfd(const FdInfo& info);

struct TimerfdInfo {
  int clock = 0;
  uint64_t ticks = 0;       // expirations counted but not yet read
  int settime_flags = 0;    // TFD_TIMER_ABSTIME | TFD_TIMER_CANCEL_ON_SET
  int64_t value_ns = 0;     // time left; 0 while disarmed, and while an expired periodic
                            // timer waits for a read or timerfd_gettime to re-arm it
  int64_t interval_ns = 0;
};
absl::StatusOr<TimerfdInfo> ParseTimerfd(const FdInfo& info);

// The signals a signalfd reads: bit N-1 for signal N.
absl::StatusOr<uint64_t> ParseSignalfdMask(const FdInfo& info);

struct EpollTarget {
  int tfd = -1;          // descriptor number the registering process used
  uint32_t events = 0;
  uint64_t data = 0;
  uint64_t ino = 0;      // the watched file's inode and device (as the kernel encodes it)
  uint32_t sdev = 0;
};
// An epoll instance's interest list, in the kernel's order (by file, then descriptor).
absl::StatusOr<std::vector<EpollTarget>> ParseEpollTargets(const FdInfo& info);

struct InotifyWatch {
  int wd = 0;
  uint64_t ino = 0;
  uint32_t sdev = 0;        // the watched file's device, as the kernel encodes it (major << 20 | minor)
  uint32_t mask = 0;        // events and flags (IN_ONESHOT, IN_EXCL_UNLINK...) as given to inotify_add_watch
  uint32_t ignored_mask = 0;
  int handle_type = 0;      // the file's handle, for open_by_handle_at
  std::string handle;       // raw bytes
};
// An inotify instance's watches, in the kernel's order.
absl::StatusOr<std::vector<InotifyWatch>> ParseInotifyWatches(const FdInfo& info);

struct LockInfo {
  std::string kind;   // FLOCK, OFDLCK, POSIX, LEASE, DELEG...
  std::string mode;   // ADVISORY (MANDATORY on old kernels; ACTIVE, BREAKING... for leases)
  bool write = false; // WRITE (exclusive) rather than READ (shared)
  int32_t pid = 0;    // the owner the kernel names, in the reader's PID namespace (-1: OFD)
  int64_t start = 0;
  int64_t end = -1;   // inclusive; -1: to the end of the file
};
// The locks a descriptor's "lock:" lines show: the flock and OFD locks of its open file
// description and the POSIX locks its process holds on the file ("1: FLOCK  ADVISORY  WRITE
// 1234 fe:00:5678 0 EOF"). Waiters ("1: -> ...") are left out: the waiting process is inside
// a syscall that restarts.
absl::StatusOr<std::vector<LockInfo>> ParseLocks(const FdInfo& info);

// The entries of /proc/PID/ns a descriptor of a process's own namespace is saved as (and opened
// again from): pid_for_children and time_for_children are left out, as restore makes them the
// process's own pid and time namespaces again.
inline constexpr const char* kOwnNamespaces[] = {"net", "uts", "ipc", "mnt", "pid", "cgroup", "user", "time"};

// The inode of the socket a descriptor's link names ("socket:[INODE]"), or nullopt for any other
// target. A socket has one open file description per inode, but for O_PATH opens of it (through
// /proc/PID/fd/N), which are descriptions of their own.
std::optional<uint64_t> SocketInode(absl::string_view target);

// Whether `path` is a file of a process's own /proc entry (/proc/PID/...): its process, not its
// name, says which file it is (a PROC_FILE).
bool ProcessEntryPath(absl::string_view path);

// Every open descriptor of `pid`, ascending, with what /proc/PID/fd/N links to (no fdinfo).
absl::StatusOr<std::vector<std::pair<int, std::string>>> ListFdTargets(pid_t pid);

// Every open descriptor of `pid`, ascending. With `info_for`, only the descriptors whose target
// it accepts get their fdinfo read; the others keep their number and target alone (a caller
// that needs nothing else of them saves most of the cost: fdinfo is two thirds of it).
absl::StatusOr<std::vector<FdInfo>> ReadFds(pid_t pid,
                                            const std::function<bool(absl::string_view)>& info_for = nullptr);

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
