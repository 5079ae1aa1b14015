#include "engine/proc/pidfd.h"

#include <errno.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <array>

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace cairn::proc {
namespace {

// The pidfds of the last few processes asked about, per thread: a dump asks about every
// descriptor of a process in turn, and a pidfd_open each time was a third of those calls. A
// pidfd names one process for good: once it has exited, pidfd_getfd fails (ESRCH) and a new
// pidfd is opened for whatever has the id now — as without the cache, never another process
// by mistake. A forked child (the dump's guardian) does not trust what it inherited.
struct PidfdCache {
  struct Entry {
    pid_t pid = 0;
    UniqueFd pidfd;
  };
  std::array<Entry, 4> entries;
  size_t next = 0;
  pid_t owner = 0;  // the process the pidfds were opened in

  Entry* Find(pid_t pid) {
    if (owner != ::getpid()) {
      for (Entry& e : entries) {
        (void)e.pidfd.Release();  // the parent's: their numbers may mean anything here
        e.pid = 0;
      }
      owner = ::getpid();
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
