#pragma once
// Putting a restored process's descriptors in place: the calls, planned in the restorer and run
// in the process in one stop (inject/stop_loop.h).
//
// Each process starts with the restorer's "masters", one per open file description, and must
// end with each of its descriptors at its own number, holding its description. The masters
// used to sit above the highest number any process uses, so that a dup3 never landed on one;
// that needs about twice the descriptors the processes hold (proc/fd_limit.h). Here a master
// may sit at any number, also one that some descriptor must take: the plan places first every
// descriptor whose number is free or holds a master no longer needed, and when every remaining
// number holds a master still needed (a cycle), moves one of those masters to a free number.
// What it emits is a sequence of dup3 and fcntl(F_SETFD) calls to numbers it chose, so that the
// outcome never depends on which number the kernel would pick; then the masters left over are
// closed. O(n log n) in the number of descriptors.

#include <set>
#include <vector>

#include "absl/status/statusor.h"

namespace cairn::restore {

struct FdTarget {
  int fd;       // the number the process must hold it at
  int master;   // the master holding its description (the number it has in the process now)
  bool cloexec;
};

struct FdCall {
  enum Kind { kDup3, kClearCloexec, kClose } kind;
  int from, to;  // kDup3: dup3(from, to, cloexec ? O_CLOEXEC : 0); others: `to` only
  bool cloexec = false;
};

// The calls that take a process holding `masters` (each at its own number, close-on-exec) to
// holding `targets` (distinct numbers), leaving the numbers in `pinned` alone and closing every
// master no target keeps. A master may have several targets, or none. Temporary numbers are
// chosen below `limit`; fails when none is free.
absl::StatusOr<std::vector<FdCall>> PlanFdCalls(const std::set<int>& masters, const std::vector<FdTarget>& targets,
                                                const std::set<int>& pinned, int limit);

}  // namespace cairn::restore
