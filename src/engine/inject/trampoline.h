#pragma once
// The injection trampoline: the few instructions a checkpoint runs inside a process it has
// frozen, placed where the process never looks, and built so that the dumper's death at any
// instant leaves nothing the process would run into.
//
// Where: the unused tail of the process's vDSO page (past the end of the vDSO's ELF image,
// zeros the process never executes or reads). A process that unmapped its vDSO has it in the
// last bytes of its highest private executable file mapping instead: the zero padding past
// the end of a text segment, up to its page's end, which the process never executes (Install
// checks they are zeros; the dump saves that page with its zeros, dump/memory.h). The bytes go
// in through /proc/PID/mem, which copies the page for this process alone (the vDSO mapping, and
// a private mapping, allow a debugger's write), and Remove() writes the zeros back. Nothing is mapped into the process for it, so no mapping
// can be left behind, and it exists before the first injected call (an injected mmap of a
// code page would itself need somewhere safe to run from).
//
// What: every sequence ends asleep (pause(), or a futex wait), never in a trap.
//   syscall_insn():  syscall ; asleep          one call, driven by syscall stops
//   batch_loop():    (a table of calls, see batch.h) ; done=1 ; futex wake ; asleep
// A tracer drives a thread through them with PTRACE_SYSCALL stops or PTRACE_INTERRUPT (which
// ends the sleep) and puts its registers back. If the tracer dies instead, the thread
// finishes the call(s) it was given and sleeps at a known address — its signals are blocked
// for the call, so only a PTRACE_INTERRUPT wakes it — until the dump's guardian
// (dump/guardian.h) puts its registers and signal mask back. No trap is forced and no signal
// sent: with PTRACE_O_TRACESYSGOOD, a syscall stop the tracer never answered
// delivers nothing when the kernel detaches the thread.

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <utility>

#include "absl/status/statusor.h"

namespace cairn::inject {

// The area the trampoline lives in: the vDSO, or (`vdso` false) the private executable file
// mapping whose last kSize bytes it takes.
struct TrampolineHome {
  uint64_t start = 0;
  uint64_t end = 0;
  bool vdso = true;
};

// The home of `pid`'s trampoline: its vDSO, or, when it unmapped it, its highest private
// executable file mapping (the choice depends on the layout alone, so that a guardian finds
// the same one). FailedPrecondition when it has neither.
absl::StatusOr<TrampolineHome> FindTrampolineHome(pid_t pid);

class Trampoline {
 public:
  // Bytes of the tail it occupies (16-byte aligned start). The tail is zeros before (Install
  // checks it), so putting it back is writing zeros.
  static constexpr size_t kSize = 112;

  // Writes the code into the free tail of `home` (FindTrampolineHome). FailedPrecondition
  // when it has no free tail of kSize bytes (zeros, or this very code left by a dumper whose
  // guardian died too).
  static absl::StatusOr<Trampoline> Install(pid_t pid, const TrampolineHome& home);
  // Where Install puts (or put) the code in `home`, whatever is there now.
  static absl::StatusOr<uint64_t> Locate(pid_t pid, const TrampolineHome& home);
  // One already written at `addr` (by a dumper that died; see dump/guardian.h).
  static Trampoline Adopt(pid_t pid, uint64_t addr) { return Trampoline(pid, addr); }

  Trampoline() = default;
  Trampoline(Trampoline&& other) noexcept { *this = std::move(other); }
  Trampoline& operator=(Trampoline&& other) noexcept;
  Trampoline(const Trampoline&) = delete;
  ~Trampoline() = default;  // Remove() is explicit: a process that died needs nothing back.

  bool installed() const { return addr_ != 0; }
  uint64_t addr() const { return addr_; }

  uint64_t syscall_insn() const { return addr_; }         // `syscall`
  uint64_t batch_loop() const { return addr_ + 16; }      // the CallBatch loop (batch.h)
  // Where a thread taken from the loop's sleep by PTRACE_INTERRUPT stops, and where the
  // code after the loop's done store starts: a thread stopped in [batch_done, batch_wait]
  // has made every call.
  uint64_t batch_wait() const;
  uint64_t batch_done() const;
  // Whether `rip` lies in the trampoline: the thread is inside an injection.
  bool Contains(uint64_t rip) const { return addr_ != 0 && rip >= addr_ && rip < addr_ + kSize; }

  // Writes the tail's zeros back. Idempotent.
  absl::Status Remove();
  // Writes zeros over `pid`'s kSize bytes at `addr` only if each is a zero or the trampoline's
  // own byte there (what a dumper that died may have left, whole or in part): a guardian never
  // overwrites anything else. FailedPrecondition otherwise.
  static absl::Status ClearIfOurs(pid_t pid, uint64_t addr);

 private:
  Trampoline(pid_t pid, uint64_t addr) : pid_(pid), addr_(addr) {}

  pid_t pid_ = 0;
  uint64_t addr_ = 0;
};

// The [vdso] area of `pid`: FailedPrecondition when it has none (it unmapped it). Restore
// uses it (sigtrap.h); injection finds its home with FindTrampolineHome.
absl::StatusOr<std::pair<uint64_t, uint64_t>> VdsoRange(pid_t pid);

}  // namespace cairn::inject
