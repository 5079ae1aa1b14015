#pragma once
// A process named so that a reused PID is not mistaken for it: its PID plus its start time
// (clock ticks since boot, /proc/PID/stat field 22). The daemon records both for each job and
// adopts a job again after a restart only when both still match; a job's owner is named so too
// (daemon/owner_watch.h).

#include <sys/types.h>

#include <cstdint>
#include <optional>

namespace cairn {

// The start time of `pid`, or nullopt when it does not exist (or is a zombie: it ran and ended).
std::optional<uint64_t> ProcessStartTime(pid_t pid);

// True when `pid` runs and started at `start_time`.
bool SameProcess(pid_t pid, uint64_t start_time);

}  // namespace cairn
