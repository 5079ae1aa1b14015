#pragma once
// Keeping a process's SIGTRAP action across injections.
//
// An injected call ends in a trap the kernel forces on the thread (the single-step of
// Injector::Raw, the int3 of a CallBatch). A forced signal that is blocked (as every
// catchable signal is while the engine works) or ignored resets the process's action for it
// to SIG_DFL, so a program's SIGTRAP handler, or SIG_IGN, would be lost at the first
// injection: in the checkpoint, and in a process left running. The engine reads that action
// before its first injection and puts it back after its last one, with calls driven by
// syscall stops (Injector::RawAtSyscallStops), which force no signal. The action's struct
// is passed below the thread's stack pointer, past the red zone, and what was there is put
// back afterwards.

#include <sys/types.h>

#include <cstdint>
#include <optional>

#include "absl/status/statusor.h"
#include "engine/inject/injector.h"

namespace cairn::inject {

// Whether process `pid` ignores SIGTRAP or has a handler for it (/proc/PID/status): only
// then is there anything to keep.
absl::StatusOr<bool> SigtrapIsSet(pid_t pid);

// Reads the SIGTRAP action of thread `tid`'s process, or sets it, at syscall stops. The
// thread must be in a ptrace stop; `syscall_insn` is a `syscall` instruction in its memory.
// Signals are blocked for the call and the thread's mask put back afterwards.
absl::StatusOr<KernelSigaction> GetSigtrapAction(pid_t tid, uint64_t syscall_insn);
absl::Status SetSigtrapAction(pid_t tid, uint64_t syscall_insn, const KernelSigaction& action);

// The address of a `syscall` instruction in the vDSO of `pid` (FailedPrecondition without).
absl::StatusOr<uint64_t> VdsoSyscallInsn(pid_t pid);

}  // namespace cairn::inject
