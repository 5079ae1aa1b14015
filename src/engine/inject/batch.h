#pragma once
// Many injected system calls for the price of one resume of the thread.
//
// Every injected call costs round trips through the scheduler (two syscall stops for a
// guarded call), and a dump asks each process for ~70 values (64 signal actions alone). A
// CallBatch runs the loop of a Trampoline (trampoline.h) over a table of calls kept in a
// RemoteScratch (number and six arguments in, the kernel's return value out). The loop
// writes a done word past the table, wakes a futex on it and goes to sleep: the tracer
// resumes the thread once, waits for the word (with the futex, through its own mapping of a
// shared scratch area; otherwise by polling), and takes the thread from its sleep into a
// stop with PTRACE_INTERRUPT. No trap is
// forced, and a tracer that dies meanwhile leaves the thread asleep inside the trampoline,
// where the dump's guardian finds it.
//
// The loop touches no stack and no memory but the table, so the thread's state is put
// back exactly as after a single guarded call (registers, and the signal mask blocked for
// the loop only). Calls in a batch must not block or depend on each other's results.
// Without a trampoline, Run makes one call at a time with the Injector.
//
// REQUIRES: the thread is in a ptrace stop.

#include <sys/user.h>

#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/inject/injector.h"
#include "engine/inject/trampoline.h"

namespace cairn::inject {

struct BatchedCall {
  long nr = 0;
  std::array<uint64_t, 6> args{};
  long result = 0;  // the kernel's raw return value (a negative errno on failure)
};

// One row of the table a loop of calls reads in the process (this batch's, and the restore's,
// stop_loop.h): number, six arguments, result.
struct BatchRow {
  uint64_t nr;
  uint64_t args[6];
  uint64_t result;
};
static_assert(sizeof(BatchRow) == 64);

// The rows for `calls` (results preset to -ENOSYS: a row the loop never reached).
std::vector<BatchRow> BatchRows(std::span<const BatchedCall> calls);

// `saved` pointed at a loop at `code` over `count` rows at `table` (r12, r13), with no trap flag
// and no syscall-restart fixup.
user_regs_struct LoopRegs(const user_regs_struct& saved, uint64_t code, uint64_t table, size_t count);

class CallBatch {
 public:
  // Runs its loop in `trampoline` (installed in the process of the threads it is run in).
  explicit CallBatch(const Trampoline& trampoline)
      : code_(trampoline.batch_loop()), done_(trampoline.batch_done()), wait_(trampoline.batch_wait()) {}
  // A batch without a loop: every call is injected alone.
  static CallBatch OneByOne() { return CallBatch(); }

  // Runs `calls` in order in the thread of `inj` (any thread of the process), with their
  // table at offset `table_off` of `scratch`; fills in each result. A status error means
  // the injection failed (the thread vanished, or stopped for a reason other than the
  // loop's end); the thread's registers are put back on every path.
  absl::Status Run(Injector& inj, RemoteScratch& scratch, size_t table_off, std::span<BatchedCall> calls);

  // Whether calls run as one batch (false: one injected call each).
  bool batched() const { return code_ != 0; }

 private:
  CallBatch() = default;

  // `done_here`: the done word in a local mapping of the table (nullptr: read it remotely).
  absl::Status RunLoop(const Injector& inj, uint64_t table, size_t count, const uint32_t* done_here);

  uint64_t code_ = 0;  // the loop's address in the process; 0 when there is none
  uint64_t done_ = 0, wait_ = 0;  // where the thread may stop once the loop is done
};

}  // namespace cairn::inject
