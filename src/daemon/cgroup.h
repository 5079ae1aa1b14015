#pragma once
// A job's cgroup (v1 hierarchies, "cairn/NAME" as engine/job makes it): its CPU and memory
// limits and what it uses. Where a hierarchy is not mounted, its limit cannot be set (an error
// naming it) and its usage reads as absent.

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"

namespace cairn::daemon {

// Creates the job's cgroup in the cpu and memory hierarchies and writes its limits, before any
// process joins it. cpus <= 0 or memory_bytes <= 0: that limit is lifted.
absl::Status SetLimits(const std::string& cgroup, double cpus, int64_t memory_bytes);

struct CgroupUsage {
  std::optional<double> cpu_seconds;        // cpuacct.usage
  std::optional<int64_t> memory_bytes;      // memory.usage_in_bytes
  std::optional<int64_t> memory_limit;      // memory.limit_in_bytes, unset when unlimited
};
CgroupUsage ReadUsage(const std::string& cgroup);

// "some avg10" of /proc/pressure/memory (the node's memory pressure), when the kernel has PSI.
std::optional<double> NodeMemoryPsi();

// Removes the job's (empty) cgroup directories. Best effort.
void RemoveCgroup(const std::string& cgroup);

// Thaws the cgroup's v1 freezer if it is FROZEN (a dump interrupted by a crash could leave it so).
void ThawFreezer(const std::string& cgroup);

// The processes of the job cgroup `cgroup` (its freezer hierarchy's), host ids.
std::vector<pid_t> CgroupPids(const std::string& cgroup);

// SIGKILLs every process in the cgroup (its freezer hierarchy's list), e.g. what a restore the
// daemon's crash interrupted left there. A frozen one dies once the cgroup is thawed. Returns how
// many it signalled.
int KillCgroup(const std::string& cgroup);

// KillCgroup for a copy of a job whose TCP connections are not its own: a migration's copy on
// the node that lost it (uncommitted there, or committed elsewhere), or a restore the daemon's
// crash cut off. Each connection is first switched to repair mode (net/silence.h), so that its
// close sends the peer nothing: the peer keeps talking to the copy that owns the connection,
// and a FIN that found the network lock gone would end it there.
int KillCgroupSilently(const std::string& cgroup);

// The v1 freezer's state (THAWED, FREEZING or FROZEN); "" when the cgroup does not exist.
std::string FreezerState(const std::string& cgroup);

}  // namespace cairn::daemon
