#pragma once
// Freezing a process from the outside: every thread seized with ptrace and stopped in a
// PTRACE_EVENT_STOP, with all catchable signals blocked so that none is dequeued while
// the engine works. Thawing puts every thread back exactly as it was.

#include <sys/types.h>

#include <cstdint>
#include <vector>

#include <optional>

#include "absl/status/statusor.h"
#include "engine/inject/sigtrap.h"

namespace cairn::dump {

class FrozenProcess {
 public:
  struct ThreadState {
    pid_t tid = 0;
    uint64_t sigmask = 0;  // the thread's own blocked mask, before the engine blocked all
  };

  // Seizes and stops every thread of `pid`, listing /proc/PID/task until no new thread
  // appears. On failure, every thread already seized is released untouched.
  static absl::StatusOr<FrozenProcess> Freeze(pid_t pid);

  FrozenProcess(FrozenProcess&& other) noexcept;
  FrozenProcess& operator=(FrozenProcess&&) = delete;
  ~FrozenProcess();  // Thaws if neither Thaw() nor Kill() was called.

  pid_t pid() const { return pid_; }
  // The process was in a group stop (stopped by SIGSTOP, SIGTSTP...) before it was frozen.
  bool was_stopped() const { return was_stopped_; }
  const std::vector<ThreadState>& threads() const { return threads_; }
  // The process's SIGTRAP action as it was before any injection, when it ignores SIGTRAP or
  // has a handler for it (see inject/sigtrap.h); Thaw puts it back.
  const std::optional<inject::KernelSigaction>& sigtrap_action() const { return sigtrap_; }

  // Restores each thread's signal mask and detaches, letting the process carry on.
  absl::Status Thaw();
  // SIGKILLs the process and reaps the tracer's notifications of its threads.
  absl::Status Kill();
  // Kill() in two halves, for trees: send SIGKILL to every process first, then reap each,
  // children before parents (a PID namespace's init waits for its children to be gone).
  absl::Status SendKill();
  void ReapKilled();

 private:
  explicit FrozenProcess(pid_t pid) : pid_(pid) {}
  pid_t pid_;
  std::vector<ThreadState> threads_;
  bool done_ = false;
  bool was_stopped_ = false;
  std::optional<inject::KernelSigaction> sigtrap_;
  uint64_t sigtrap_insn_ = 0;  // the vDSO `syscall` instruction that reads and sets it
};

}  // namespace cairn::dump
