#pragma once
// Capturing the non-memory state of a frozen process: threads (registers, xstate, masks,
// rseq, robust list, clear-child-tid, alternate stacks), signal handlers and pending
// signals, timers, rlimits, credentials, the mm layout and small per-process values.
// What only the task can tell is asked for with injected syscalls.

#include "absl/status/status.h"
#include "engine/dump/freeze.h"
#include "engine/inject/injector.h"
#include "image.pb.h"

namespace cairn::dump {

// Fills `out` (everything but vmas and fds). `inj` runs in the main thread; `scratch`
// is a writable area in the process. REQUIRES: fp.InstallTrampoline().
absl::Status CaptureTaskState(const FrozenProcess& fp, inject::Injector& inj, inject::RemoteScratch& scratch,
                              image::Process* out);

}  // namespace cairn::dump
