#pragma once
// How many descriptors a restore needs at once, and whether this machine lets it have them.
//
// The restorer opens one "master" per open file description (two per pipe) at the lowest free
// numbers, and each restored process starts with all of them before it puts its own in place,
// around them (restore/fd_moves.h). So a process holding N descriptions up to number M needs
// about max(M, N) + the restorer's own in one table, and a few more to move masters aside. (Until
// session 21 the masters sat above M: M + N, twice what a process near its limit held.) The dump
// checks this before it touches anything (never a process killed by a dump whose restore must
// fail), and the restore raises its limit, or says why it cannot, before it makes anything.

#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace cairn::proc {

// The descriptors a restore of processes whose highest descriptor is `highest_fd`, holding
// `descriptions` open file descriptions of which `pipes` are pipes, needs in one table.
uint64_t DescriptorsToRestore(int highest_fd, uint64_t descriptions, uint64_t pipes);

// The most descriptors this process can have in one table: its hard RLIMIT_NOFILE, or
// fs.nr_open where it may raise the hard limit (CAP_SYS_RESOURCE).
uint64_t DescriptorRoom();

// Raises this process's RLIMIT_NOFILE to hold `need` descriptors (the soft limit to the hard
// one at least). An error naming `what`, the need, the limit and what to do when it cannot.
absl::Status RaiseDescriptorLimit(uint64_t need, const std::string& what);

// Makes room in this process's own table for `count` descriptors more than its highest now: its
// limit raised (as above), and the table
// grown to that size at once. A table grows by doubling when a descriptor lands past its end, and
// in a multi-threaded process each growth waits for an RCU grace period: a dump that took copies
// of a server's thousand connections while it stood frozen waited five times, 50 ms here. Grown
// once before the freeze, it waits at most once, then. An optimisation: callers may go on when it
// fails (the table then grows as it is filled, and EMFILE says when it cannot).
absl::Status ReserveOwnDescriptors(uint64_t count, const std::string& what);

}  // namespace cairn::proc
