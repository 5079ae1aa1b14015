#pragma once
// How a dump (or another long engine operation) is stopped from outside while it works.
//
// Cancellation: cairn's CLI answers SIGTERM, SIGINT and SIGHUP (what `timeout`, systemd and
// a terminal send) by calling RequestCancel from its handler; the dump notices at its next
// stop point, puts every process back as it was and fails with Cancelled. Nothing of the
// checkpoint is left (DIR.partial is removed).
//
// Fault points, for tests (tests/faults): with CAIRN_FAULT_PAUSE=STAGE in the environment, a
// dump that reaches the stop point STAGE writes "cairn: fault point STAGE" on stderr and
// waits there until it is killed (or cancelled), so that a test can kill it at that
// instant. The stages, in order: frozen, trampoline, scratch, injecting (inside an injected
// call, the thread's registers already the call's), batch (a batch of calls resumed and
// not yet stopped), task_state, tracker_creating and tracker_created (a --track dump making
// its write tracker: before the injected userfaultfd(), and after it before its API), pages (after the first MiB copied), fds, committed (the
// checkpoint renamed into place, the processes not yet killed or let go), thawed (with
// --leave-running: the processes let go, the checkpoint not yet committed). The engine's restore
// has one, restore-building (every task created and held, no memory in yet); cairnd's are listed
// where they are (daemon/migrate.h, daemon/daemon.h, daemon/storage/storage.h), the controller's
// in controller/service/controller.h (all in docs/reliability.md). With CAIRN_FAULT_PAUSE_S=N as
// well, the pause ends by itself after N seconds.

#include "absl/status/status.h"

namespace cairn {

// Async-signal-safe: asks the dump under way (and any later one) to stop.
void RequestCancel(int signal);

// A stop point: pauses here when CAIRN_FAULT_PAUSE names `stage`, then returns Cancelled if
// RequestCancel was called.
absl::Status StopPoint(const char* stage);

// The same without a fault point, for loops.
absl::Status CheckCancelled();

// The fault point alone, where a status cannot be returned.
void FaultPoint(const char* stage);

// Turns fault points off in this process (the dump's guardian, which must never pause).
void DisableFaultPoints();

}  // namespace cairn
