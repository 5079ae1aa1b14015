#include "engine/proc/pidfd.h"

#include <errno.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <array>
#include <atomic>

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace cairn::proc {
namespace {

// The pidfds of the last few processes asked about, per thread: a dump asks about every
// descriptor of a process in turn, and a pidfd_open each time was a third of those calls. A
// pidfd names one process for good: once it has exited, pidfd_getfd fails (ESRCH) and a new
// pidfd is opened for whatever has the id now — as without the cache, never another process
// by mistake. A forked child (the dump's guardian) does not trust what it inherited.
// Bumped in every child a fork makes (pthread_atfork): a cache filled before is its parent's.
std::atomic<uint64_t> forks{0};
const int registered = [] { return ::pthread_atfork(nullptr, nullptr, [] { forks.fetch_add(1); }); }();

struct PidfdCache {
  struct Entry {
    pid_t pid = 0;
    UniqueFd pidfd;
  };
  std::array<Entry, 4> entries;
  size_t next = 0;
  uint64_t generation = 0;  // `forks` when the pidfds were opened

  Entry* Find(pid_t pid) {
    (void)registered;
    if (generation != forks.load(std::memory_order_relaxed)) {
      for (Entry& e : entries) {
        (void)e.pidfd.Release();  // the parent's: their numbers may mean anything here
        e.pid = 0;
      }
      generation = forks.load(std::memory_order_relaxed);
    }
    for (Entry& e : entries) {
      if (e.pid == pid && e.pidfd.valid()) return &e;
    }
    return nullptr;
  }

  absl::StatusOr<int> Open(pid_t pid) {
    UniqueFd pidfd(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
    if (!pidfd.valid()) return ErrnoStatus(absl::StrCat("pidfd_open pid ", pid));
    Entry& e = entries[next++ % entries.size()];
    e.pid = pid;
    e.pidfd = std::move(pidfd);
    return e.pidfd.get();
  }
};

}  // namespace

absl::StatusOr<UniqueFd> CopyFd(pid_t pid, int fd) {
  thread_local PidfdCache cache;
  if (PidfdCache::Entry* e = cache.Find(pid)) {
    UniqueFd theirs(static_cast<int>(::syscall(SYS_pidfd_getfd, e->pidfd.get(), fd, 0)));
    if (theirs.valid()) return theirs;
    if (errno != ESRCH) return ErrnoStatus(absl::StrCat("pidfd_getfd pid ", pid, " fd ", fd));
    e->pidfd.Reset();  // that process has exited: whatever has its id now
    e->pid = 0;
  }
  ASSIGN_OR_RETURN(int pidfd, cache.Open(pid));
  UniqueFd theirs(static_cast<int>(::syscall(SYS_pidfd_getfd, pidfd, fd, 0)));
  if (!theirs.valid()) return ErrnoStatus(absl::StrCat("pidfd_getfd pid ", pid, " fd ", fd));
  return theirs;
}

}  // namespace cairn::proc
