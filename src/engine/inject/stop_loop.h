#pragma once
// Many system calls for the price of one stop, in a process the restore is building.
//
// The restore's processes are traced from birth (PTRACE_TRACEME) and driven by single steps,
// which cost two stops per injected call; putting a thousand descriptors in place was most of a
// restore's time. kStopLoop is a loop over a table of calls (number, six arguments, result: the
// rows of batch.h) that ends in an int3: the tracer blocks every catchable signal, points the
// thread at the loop, lets it run and takes the trap's SIGTRAP stop, then puts back the
// registers and the mask. Unlike the dump's CallBatch it forces a trap, which a process being
// restored can afford (it has never run; a tracer that dies takes it along: PDEATHSIG).
// Calls must not block or depend on each other's results.

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "engine/inject/batch.h"
#include "engine/inject/injector.h"

namespace cairn::inject {

// x86-64: while r13 != 0 { rax, rdi, rsi, rdx, r10, r8, r9 = row[0..6]; syscall; row[7] = rax;
// r12 += 64; r13-- } int3.
inline constexpr unsigned char kStopLoop[] = {
    0x4d, 0x85, 0xed,              // test r13, r13
    0x74, 0x32,                    // jz done
    0x49, 0x8b, 0x04, 0x24,        // mov rax, [r12]
    0x49, 0x8b, 0x7c, 0x24, 0x08,  // mov rdi, [r12+8]
    0x49, 0x8b, 0x74, 0x24, 0x10,  // mov rsi, [r12+16]
    0x49, 0x8b, 0x54, 0x24, 0x18,  // mov rdx, [r12+24]
    0x4d, 0x8b, 0x54, 0x24, 0x20,  // mov r10, [r12+32]
    0x4d, 0x8b, 0x44, 0x24, 0x28,  // mov r8, [r12+40]
    0x4d, 0x8b, 0x4c, 0x24, 0x30,  // mov r9, [r12+48]
    0x0f, 0x05,                    // syscall
    0x49, 0x89, 0x44, 0x24, 0x38,  // mov [r12+56], rax
    0x49, 0x83, 0xc4, 0x40,        // add r12, 64
    0x49, 0xff, 0xcd,              // dec r13
    0xeb, 0xc9,                    // jmp loop
    0xcc,                          // done: int3
};

// Runs `calls` in order through the loop at `loop` (kStopLoop, written there before) in the
// thread `inj` drives, `per_run` rows at a time in `scratch` from offset `table_off`; fills in
// each result. On any error the thread's registers and mask are put back; calls made by then
// stay made (the caller may make them again one by one).
absl::Status RunStopLoop(Injector& inj, RemoteScratch& scratch, uint64_t loop, size_t table_off,
                         std::span<BatchedCall> calls);

// Runs `calls` through the loop, its table from scratch offset `table_off`, and fails on the
// first call the kernel refused, named by `what(i)` (called only then). Where the loop fails,
// some calls may have been made: with `repeatable` (calls that may be made twice: mmap at a fixed
// address, mprotect, rt_sigaction...) every call is then made again one injected call at a time
// (logged); otherwise the loop's failure is returned.
absl::Status RunCalls(Injector& inj, RemoteScratch& scratch, uint64_t loop, std::span<BatchedCall> calls,
                      const std::function<std::string(size_t)>& what, bool repeatable, size_t table_off = 0);

// Calls gathered one by one, each with what it is, for RunCalls; `context` follows the name of a
// call the kernel refused (" (thread 42)").
struct NamedCalls {
  std::vector<BatchedCall> calls;
  std::vector<std::string> what;
  void Add(std::string name, long nr, std::array<uint64_t, 6> args) {
    calls.push_back({nr, args});
    what.push_back(std::move(name));
  }
  absl::Status Run(Injector& inj, RemoteScratch& scratch, uint64_t loop, bool repeatable, size_t table_off = 0,
                   const std::string& context = "") {
    return RunCalls(inj, scratch, loop, calls, [&](size_t i) { return what[i] + context; }, repeatable, table_off);
  }
};

}  // namespace cairn::inject
