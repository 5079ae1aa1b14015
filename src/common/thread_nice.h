#pragma once
// A thread's CPU priority (its nice value) changed for a while and put back. Linux keeps a nice
// value per thread (setpriority with PRIO_PROCESS and 0 names the calling thread).
//
// Two uses: work the user waits for while their processes stand frozen runs ahead of the
// machine's other work (kUrgent: on a busy node every wait for a core is downtime), and work
// in the background runs behind it (kBackground: a pre-copy while the process runs).
//
// Threads started meanwhile: a raised priority is not passed on (SCHED_RESET_ON_FORK): a
// library's threads started from this one (gRPC starts its workers from whichever thread
// finds work) live on after it and must not keep it. A stage's own helper threads take it
// explicitly: `ThreadNice same(ThreadNice::Current())` as they start. A lowered priority is
// passed on (the kernel resets negative values only): a background stage's helpers inherit it.
// Raising a priority needs CAP_SYS_NICE (or RLIMIT_NICE); without it the thread keeps its own.

#include <sched.h>
#include <sys/resource.h>

namespace cairn {

class ThreadNice {
 public:
  static constexpr int kUrgent = -10;
  static constexpr int kBackground = 19;

  // The calling thread's nice value.
  static int Current() { return ::getpriority(PRIO_PROCESS, 0); }

  explicit ThreadNice(int nice) : old_(Current()) {
    if (nice == old_ || (::sched_getscheduler(0) & ~SCHED_RESET_ON_FORK) != SCHED_OTHER) return;
    sched_param none{};
    if (nice < 0) {  // not passed on: set first, or not raised at all
      if (::sched_setscheduler(0, SCHED_OTHER | SCHED_RESET_ON_FORK, &none) != 0) return;
      reset_on_fork_ = true;
    }
    if (::setpriority(PRIO_PROCESS, 0, nice) != 0) {
      if (reset_on_fork_) (void)::sched_setscheduler(0, SCHED_OTHER, &none);
      reset_on_fork_ = false;
      return;
    }
    active_ = true;
  }
  ~ThreadNice() { End(); }
  ThreadNice(const ThreadNice&) = delete;
  ThreadNice& operator=(const ThreadNice&) = delete;

  // Back to the thread's own priority (once; later calls do nothing).
  void End() {
    if (!active_) return;
    active_ = false;
    if (reset_on_fork_) {
      sched_param none{};
      (void)::sched_setscheduler(0, SCHED_OTHER, &none);  // keeps the nice value
    }
    (void)::setpriority(PRIO_PROCESS, 0, old_);
  }

 private:
  int old_;
  bool active_ = false;
  bool reset_on_fork_ = false;
};

}  // namespace cairn
