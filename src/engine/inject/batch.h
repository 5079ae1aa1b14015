#pragma once
// Many injected system calls for the price of one resume of the thread.
//
// Injector::Raw single-steps one `syscall` instruction per call: every call costs a
// round trip through the scheduler (~80 µs here), and a dump asks each process for ~70
// values (64 signal actions alone). A CallBatch places a small loop in an executable page
// of the process; the loop runs a table of calls kept in a RemoteScratch (number and six
// arguments in, the kernel's return value out) and ends on an int3, so the whole table
// costs one PTRACE_CONT and one stop.
//
// The loop touches no stack and no memory but the table, so the thread's state is the
// Injector's to put back, exactly as after a single call. Calls in a batch must not block
// or depend on each other's results. Where the page cannot be made executable (a security
// module refusing it), Run falls back to one single-step per call.
//
// REQUIRES: as for Injector (thread in a ptrace stop, catchable signals blocked).

#include <array>
#include <cstdint>
#include <span>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/inject/injector.h"

namespace cairn::inject {

struct BatchedCall {
  long nr = 0;
  std::array<uint64_t, 6> args{};
  long result = 0;  // the kernel's raw return value (a negative errno on failure)
};

class CallBatch {
 public:
  // Maps the loop's page into the process of `inj`'s thread. Never fails for want of an
  // executable page: the batch then runs call by call.
  static absl::StatusOr<CallBatch> Create(Injector& inj);
  // A batch without the page: every call is single-stepped (what Create falls back to).
  static CallBatch OneByOne() { return CallBatch(0); }

  // Move-only: one owner unmaps the page.
  CallBatch(CallBatch&& other) noexcept : code_(other.code_) { other.code_ = 0; }
  CallBatch& operator=(CallBatch&&) = delete;
  CallBatch(const CallBatch&) = delete;

  // Runs `calls` in order in the thread of `inj` (any thread of the process), with their
  // table at offset `table_off` of `scratch`; fills in each result. A status error means
  // the injection failed (the thread vanished, or stopped for a reason other than the
  // loop's end); the thread's registers are put back on every path.
  absl::Status Run(Injector& inj, RemoteScratch& scratch, size_t table_off, std::span<BatchedCall> calls);

  // Whether calls run as one batch (false: one single-step each).
  bool batched() const { return code_ != 0; }

  // Unmaps the page. Call before the process runs again.
  absl::Status Unmap(Injector& inj);

 private:
  explicit CallBatch(uint64_t code) : code_(code) {}

  absl::Status RunLoop(Injector& inj, uint64_t table, size_t count);

  uint64_t code_ = 0;  // the loop's address in the process; 0 when there is none
};

}  // namespace cairn::inject
