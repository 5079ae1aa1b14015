#pragma once
// A cpu cgroup's share raised for a moment, for work that must not be starved by the machine's
// other load: the scheduler gives a cgroup whose tasks were stopped or idle next to no share
// beside busy loops. Found where a dump kills its processes, which finish dying (their memory
// freed, in their own exit) at their cgroup's share: a 1 GiB process in a cgroup of its own
// took 4-15 s to die beside two busy loops (its run time flat, its wait time growing:
// /proc/PID/schedstat), against 0.08 s with its cgroup's share raised (bench/dump_kill_busy.sh,
// docs/performance.md; in the root cgroup the same wait happens too, less often, and is open). The same holds for a restorer a container runtime places in the
// container's cgroups. CpuShareBoost raises, while it lives, the share of each cpu cgroup of
// the given processes that holds nothing but them (v1 cpu.shares, v2 cpu.weight), then puts it
// back. A cgroup shared with anything else (the machine's root, a session) or with child
// cgroups is left alone. With a ShareJournal (a dump's guardian journal), each share is
// journaled before it is raised, so that a cairn killed while the boost stands has it put back
// by its guardian; the restore's is not journaled (a container's cgroup goes with the container
// its runtime removes after a failed restore).

#include <sys/types.h>

#include <string>
#include <utility>
#include <vector>

namespace cairn::proc {

// Told of each share file before it is raised and once it has its value back.
class ShareJournal {
 public:
  virtual ~ShareJournal() = default;
  // `file` is about to be raised from `before`; false: not journaled, so left alone.
  virtual bool Raising(const std::string& file, const std::string& before) = 0;
  virtual void Back(const std::string& file) = 0;
};

class CpuShareBoost {
 public:
  explicit CpuShareBoost(const std::vector<pid_t>& pids, ShareJournal* journal = nullptr);
  ~CpuShareBoost();  // the shares back (a cgroup gone meanwhile is skipped)
  CpuShareBoost(const CpuShareBoost&) = delete;
  CpuShareBoost& operator=(const CpuShareBoost&) = delete;

 private:
  std::vector<std::pair<std::string, std::string>> saved_;  // a share file, its value before
  ShareJournal* journal_;
};

}  // namespace cairn::proc
