#pragma once
// Runs the calling (tracer) thread on the CPU where a traced thread last ran, for the
// lifetime of the object, and puts its CPU mask back afterwards.
//
// An injected call is a few round trips between tracer and tracee (syscall stops, or a
// resume and a futex wake). On different CPUs each one wakes the other CPU, which in a
// virtual machine is often halted: the hand-over then costs the host's latency (guarded
// calls took 3-5 ms each here). On one CPU the two hand it to each other directly. Only the
// tracer's own affinity changes, never the process's.

#include <sched.h>
#include <sys/types.h>

#include "engine/proc/stat.h"

namespace cairn::inject {

class SameCpu {
 public:
  explicit SameCpu(pid_t tid) {
    auto st = proc::ReadStat(tid);
    if (!st.ok() || st->processor < 0 || ::sched_getaffinity(0, sizeof old_, &old_) != 0) return;
    if (!CPU_ISSET(st->processor, &old_)) return;  // not a CPU this tracer may use
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(st->processor, &one);
    pinned_ = ::sched_setaffinity(0, sizeof one, &one) == 0;
  }
  ~SameCpu() {
    if (pinned_) (void)::sched_setaffinity(0, sizeof old_, &old_);
  }
  SameCpu(const SameCpu&) = delete;
  SameCpu& operator=(const SameCpu&) = delete;

 private:
  cpu_set_t old_{};
  bool pinned_ = false;
};

}  // namespace cairn::inject
