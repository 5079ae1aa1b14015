#pragma once
// Thin, status-returning wrappers over ptrace(2) for one thread (x86-64).
// Nothing here keeps state; ownership of a traced thread is the caller's.

#include <sys/types.h>
#include <sys/user.h>

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"

namespace cairn::inject {

// How a traced thread is stopped, decoded from a waitpid status.
struct StopInfo {
  enum class Kind { kEventStop, kSignalStop, kExited, kKilled, kOther };
  Kind kind = Kind::kOther;
  int signal = 0;  // the stop signal, the exit code, or the killing signal
  int event = 0;   // PTRACE_EVENT_* for kEventStop
};

// Waits for `tid` to change state (waitpid with __WALL); retries EINTR.
absl::StatusOr<StopInfo> WaitStop(pid_t tid);
// The same without waiting: nullopt while `tid` runs.
absl::StatusOr<std::optional<StopInfo>> PollStop(pid_t tid);

// PTRACE_SEIZE `tid` with `options`, without stopping it.
absl::Status Seize(pid_t tid, long options);
// PTRACE_INTERRUPT: asks a seized thread to enter a PTRACE_EVENT_STOP.
absl::Status Interrupt(pid_t tid);
absl::Status Detach(pid_t tid, int signal = 0);
absl::Status Cont(pid_t tid, int signal = 0);

// Collects the deaths of `tids` (the threads of processes sent SIGKILL, traced by this
// process), each thread as soon as it is ready, a group leader only once its other threads
// are: the kernel reports a leader last, and the last thread of a PID namespace's init waits
// (zap_pid_ns_processes) until every other thread of the namespace has been collected, so a
// fixed order can wait forever. Threads already collected (ECHILD) are skipped.
void ReapKilledThreads(std::vector<pid_t> tids);
absl::Status SingleStep(pid_t tid);
// PTRACE_SYSCALL: resume until the next syscall entry or exit.
absl::Status Syscall(pid_t tid, int signal = 0);

absl::StatusOr<user_regs_struct> GetRegs(pid_t tid);
absl::Status SetRegs(pid_t tid, const user_regs_struct& regs);

// The NT_X86_XSTATE regset (FPU, SSE, AVX, AVX-512...), as the kernel lays it out.
absl::StatusOr<std::string> GetXstate(pid_t tid);
absl::Status SetXstate(pid_t tid, const std::string& xstate);

absl::StatusOr<uint64_t> GetSigmask(pid_t tid);
absl::Status SetSigmask(pid_t tid, uint64_t mask);

// Pending signals without consuming them; `shared` selects the process-wide queue.
// Each element is a raw 128-byte siginfo_t.
absl::StatusOr<std::vector<std::string>> PeekPendingSignals(pid_t tid, bool shared);

struct RseqConfig {
  uint64_t addr = 0;
  uint32_t size = 0;
  uint32_t signature = 0;
};
// PTRACE_GET_RSEQ_CONFIGURATION; addr 0 means the thread has no rseq registered.
absl::StatusOr<RseqConfig> GetRseq(pid_t tid);

}  // namespace cairn::inject
