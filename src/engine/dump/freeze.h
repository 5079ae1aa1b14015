#pragma once
// Freezing a process from the outside: every thread seized with ptrace and stopped in a
// PTRACE_EVENT_STOP. Freezing changes nothing in the threads (registers, signal mask): a
// dumper that dies leaves a process that carries on as if it had not been frozen, but
// for a thread caught inside an injected call, which the dump's guardian puts back (see
// guardian.h for the whole argument). Thawing lets every thread go as it was.

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <memory>
#include <set>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/dump/guardian.h"
#include "engine/inject/batch.h"
#include "engine/inject/injector.h"
#include "engine/inject/trampoline.h"

namespace cairn::dump {

class FrozenProcess {
 public:
  struct ThreadState {
    pid_t tid = 0;
    uint64_t sigmask = 0;  // the thread's blocked mask
    int journal_slot = -1;
  };

  // Seizes and stops every thread of `pid`, listing /proc/PID/task until no new thread
  // appears, and records each (registers, mask) in `journal` when given. Threads in
  // `seized_already` were seized by this thread before (freezer_hold.h PausedSeize). On
  // failure, every thread already seized is released untouched.
  static absl::StatusOr<FrozenProcess> Freeze(pid_t pid, GuardJournal* journal = nullptr,
                                              const std::set<pid_t>* seized_already = nullptr);

  FrozenProcess(FrozenProcess&& other) noexcept;
  FrozenProcess& operator=(FrozenProcess&&) = delete;
  ~FrozenProcess();  // Thaws if neither Thaw() nor Kill() was called.

  pid_t pid() const { return pid_; }
  // The process was in a group stop (stopped by SIGSTOP, SIGTSTP...) before it was frozen.
  bool was_stopped() const { return was_stopped_; }
  // The signal of that group stop (SIGSTOP, SIGTSTP, SIGTTIN or SIGTTOU), as the kernel
  // reports it in the PTRACE_EVENT_STOP of a seized stopped task; 0 when not stopped.
  int stop_signal() const { return stop_signal_; }
  // A stop signal that arrived while the process was frozen (let through by an injection,
  // inject::Injector::set_stop_note): the process is in a group stop now. 0: none.
  int stop_signal_since_frozen() const { return stop_note_->load(); }
  const std::vector<ThreadState>& threads() const { return threads_; }

  // Writes the injection trampoline into its home in the process (inject/trampoline.h: the
  // vDSO's tail, or a text segment's), journaled. Every injection into a frozen process goes
  // through it; Thaw removes it.
  absl::Status InstallTrampoline(const inject::TrampolineHome& home);
  const inject::Trampoline& trampoline() const { return trampoline_; }
  // A guarded injector for thread `tid` of the process, with its in-call flag in the
  // journal (REQUIRES: InstallTrampoline).
  inject::Injector injector(pid_t tid) const;
  inject::CallBatch batch() const { return inject::CallBatch(trampoline_); }

  GuardJournal* journal() const { return journal_; }
  int journal_index() const { return journal_index_; }

  // Removes the trampoline and detaches, letting the process carry on.
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
  int stop_signal_ = 0;
  std::unique_ptr<std::atomic<int>> stop_note_ = std::make_unique<std::atomic<int>>(0);
  inject::Trampoline trampoline_;
  GuardJournal* journal_ = nullptr;
  int journal_index_ = -1;
};

}  // namespace cairn::dump
