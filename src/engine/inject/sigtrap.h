#pragma once
// Setting a process's SIGTRAP action without a trap.
//
// A single-stepped injected call (Injector::Raw with Drive::kSingleStep, what a restore uses
// in the tasks it builds) ends in a trap the kernel forces on the thread. A forced signal that
// is blocked or ignored resets the process's action for it to SIG_DFL, so a restore sets the
// saved SIGTRAP action after its last such call, with a call driven by syscall stops
// (Injector::RawAtSyscallStops), which forces no signal. (A dump's injections are guarded and
// force no trap at all: inject/injector.h.) The action's struct is passed below the thread's
// stack pointer, past the red zone, and what was there is put back afterwards.

#include <sys/types.h>

#include <cstdint>
#include <optional>

#include "absl/status/statusor.h"
#include "engine/inject/injector.h"

namespace cairn::inject {

// Sets the SIGTRAP action of thread `tid`'s process at syscall stops. The thread must be in
// a ptrace stop; `syscall_insn` is a `syscall` instruction in its memory. Signals are blocked
// for the call and the thread's mask put back afterwards.
absl::Status SetSigtrapAction(pid_t tid, uint64_t syscall_insn, const KernelSigaction& action);

// The address of a `syscall` instruction in the vDSO of `pid` (FailedPrecondition without).
absl::StatusOr<uint64_t> VdsoSyscallInsn(pid_t pid);

}  // namespace cairn::inject
