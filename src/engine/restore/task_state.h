#pragma once
// Restoring the non-memory state of a process being rebuilt: process-wide values
// (mm layout, cwd, umask, personality, session, rlimits, signal handlers, timers),
// threads, and each thread's own state; then the final registers and credentials.

#include <sys/types.h>

#include <map>

#include "absl/status/status.h"
#include "engine/image/image.h"
#include "engine/inject/injector.h"
#include "engine/restore/ids.h"

namespace cairn::restore {

// Process-wide state, injected in the main thread. REQUIRES: the address space is rebuilt.
absl::Status RestoreProcessState(inject::Injector& inj, inject::RemoteScratch& scratch, uint64_t loop,
                                 const image::Process& proc);

// Creates every saved thread but the main one with its saved TID; fills `injectors`
// (saved tid -> injector) including the main thread's, and records host ids in `ids`.
absl::Status CreateThreads(inject::Injector& main, inject::RemoteScratch& scratch, const image::Process& proc,
                           std::map<pid_t, inject::Injector>* injectors, IdMap* ids);

// Per-thread state (robust list, clear-child-tid, rseq, alternate stack, name, pending
// signals), then POSIX timers, then shared pending signals and credentials `creds` (the
// process's, as it names them in its own user namespace: container.h CredsInside).
absl::Status RestoreThreadStates(std::map<pid_t, inject::Injector>& injectors, inject::RemoteScratch& scratch,
                                 uint64_t loop, const image::Process& proc, const image::Creds& creds);

// Sets every thread's final registers, xstate and signal mask. Converts a syscall that
// was interrupted into its restart (or into EINTR when its kernel-held state is lost).
// `machine`: the checkpoint's (a thread's XSAVE area is laid out again for this CPU when
// the two differ, machine/xstate.h); null or empty for images that predate it.
absl::Status SetFinalRegisters(const image::Process& proc, const IdMap& ids, const image::Machine* machine);

}  // namespace cairn::restore
