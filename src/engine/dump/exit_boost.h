#pragma once
// The processes a dump kills finish dying (their memory freed, in their own exit) at the CPU
// share of their cpu cgroup. On a busy machine a cgroup whose only tasks were held stopped by
// the dump gets next to none: a 1 GiB process in a cgroup of its own took 4-15 s to die beside
// two busy loops (its run time flat, its wait time growing: /proc/PID/schedstat), against
// 0.1 s in the root cgroup or with its cgroup's share raised (bench/container_runc.sh,
// docs/performance.md). ExitBoost raises, for as long as they die, the share of each cgroup
// that holds nothing but processes being killed (v1 cpu.shares, v2 cpu.weight), then puts it
// back. A cgroup shared with anything else (the machine's root, a session) is left alone.

#include <sys/types.h>

#include <string>
#include <utility>
#include <vector>

namespace cairn::dump {

class ExitBoost {
 public:
  // `pids`: the processes about to be sent SIGKILL.
  explicit ExitBoost(const std::vector<pid_t>& pids);
  ~ExitBoost();  // the shares back (a cgroup gone meanwhile is skipped)
  ExitBoost(const ExitBoost&) = delete;
  ExitBoost& operator=(const ExitBoost&) = delete;

 private:
  std::vector<std::pair<std::string, std::string>> saved_;  // a share file, its value before
};

}  // namespace cairn::dump
