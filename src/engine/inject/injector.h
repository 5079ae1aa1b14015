#pragma once
// Syscall injection: run a system call inside a ptrace-stopped thread as if the thread
// had made it itself. This is how the engine learns and sets state that only the task
// can tell or change (signal handlers, brk, timers, mappings, descriptors...).
//
// Mechanism: save the thread's registers, point rip at a `syscall` instruction (0f 05)
// that exists in the thread's address space, load the number and arguments, single-step
// over the instruction (the kernel reports the step at syscall exit), read rax, and put
// the registers back exactly. orig_rax is set to -1 so the kernel applies no
// syscall-restart fixup to the injected call.
//
// Two ways to drive the call:
// - kSingleStep (the restorer's tasks, which die with the restorer anyway): the caller
//   has blocked every catchable signal, and the syscall instruction may be anywhere.
// - kGuarded (a checkpoint of a live process, whose death must never hurt it): the
//   instruction is a Trampoline's (trampoline.h), followed by a sleep, and the call runs
//   between two syscall stops, so no trap signal is ever forced on the thread. The
//   thread's signal mask is blocked only for the call. Entering, the in-call flag is set,
//   then the mask blocked, then the registers set; leaving, the reverse. So no signal
//   handler runs with rip in the trampoline, and at every instant the thread has its own
//   registers and mask, or is flagged. A thread whose tracer died mid-call runs the call
//   and sleeps there; the dump's guardian (dump/guardian.h) puts it back.
//
// REQUIRES: the thread is in a ptrace stop; with kSingleStep, every catchable signal is
// blocked (PTRACE_SETSIGMASK) so that no signal is dequeued between steps.
// Not thread-safe: one Injector per traced thread, used from the tracer thread only.

#include <sys/types.h>
#include <sys/user.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include "absl/strings/string_view.h"

#include "absl/status/statusor.h"

namespace cairn::inject {

class Injector {
 public:
  enum class Drive { kSingleStep, kGuarded };

  // `syscall_insn` is the address of a `syscall` instruction in `tid`'s address space (for
  // kGuarded, a Trampoline's syscall_insn()).
  Injector(pid_t tid, uint64_t syscall_insn, Drive drive = Drive::kSingleStep)
      : tid_(tid), syscall_insn_(syscall_insn), drive_(drive) {}

  pid_t tid() const { return tid_; }
  uint64_t syscall_insn() const { return syscall_insn_; }

  // kGuarded: a word set to 1 before the thread's mask is blocked for a call and to 0 once
  // it is put back, for whoever must finish the call's work if this tracer dies (the dump's
  // guardian journal). Not owned.
  void set_in_call_flag(std::atomic<uint32_t>* flag) { in_call_ = flag; }

  // SIGSTOP cannot be blocked: one sent while a call runs stops the thread for delivery.
  // It is let through (the process enters its group stop, which the kernel makes real once
  // the tracer detaches), the call goes on, and the signal is written to `note` if set, so
  // that a checkpoint taken meanwhile records the process as stopped. Not owned.
  void set_stop_note(std::atomic<int>* note) { stop_note_ = note; }
  // At a signal-delivery stop for `signal`: whether it is a stop signal, noted and to be
  // let through by the caller.
  bool TakeStopSignal(int signal) const;

  // kGuarded's window around a call (the class comment), for Raw and for a CallBatch: sets
  // the in-call flag, blocks every signal, then loads `call`; on failure puts back `saved`
  // and `mask` itself. Leave puts back the registers, the mask, then clears the flag.
  absl::Status EnterWindow(const user_regs_struct& saved, uint64_t mask, const user_regs_struct& call) const;
  absl::Status LeaveWindow(const user_regs_struct& saved, uint64_t mask) const;

  // The message of the last PTRACE_EVENT_FORK/CLONE seen while injecting: the new task's
  // id as the tracer sees it (its host id, even when the caller lives in a PID namespace).
  pid_t last_new_task() const { return last_new_task_; }

  // Runs syscall `nr` as the Drive says; returns the kernel's raw return value (a
  // negative errno on failure). A status error means the injection itself failed (thread
  // vanished...).
  absl::StatusOr<long> Raw(long nr, std::array<uint64_t, 6> args = {});

  // Like Raw, but driven by syscall stops (PTRACE_SYSCALL: one at entry, one at exit)
  // instead of a single-step. Twice the round trips, but no trap signal: the single-step's
  // SIGTRAP is forced on the thread, and a forced signal that is blocked or ignored resets
  // the process's action for it to SIG_DFL (see sigtrap.h).
  // The thread is left at a syscall-exit stop, not inside the kernel's signal handling: a
  // call it was frozen in is restarted only because detaching (Detach) sends it through the
  // signal handling again (wl_sighandlers checks a read() blocked across a checkpoint).
  absl::StatusOr<long> RawAtSyscallStops(long nr, std::array<uint64_t, 6> args = {});

  // Like Raw, but a negative return becomes an error naming `what`.
  absl::StatusOr<long> Call(absl::string_view what, long nr, uint64_t a0 = 0, uint64_t a1 = 0,
                            uint64_t a2 = 0, uint64_t a3 = 0, uint64_t a4 = 0, uint64_t a5 = 0);

 private:
  // `saved` with rip at the syscall instruction, the call's number and arguments loaded,
  // and orig_rax -1 so the kernel applies no syscall-restart fixup to the injected call.
  user_regs_struct CallRegs(const user_regs_struct& saved, long nr, const std::array<uint64_t, 6>& args) const;
  // Single-steps over the syscall instruction and returns rax at the syscall's exit.
  absl::StatusOr<long> StepOverSyscall(long nr);
  // Resumes with PTRACE_SYSCALL to the call's entry and exit stops; returns rax at the exit.
  absl::StatusOr<long> RunToSyscallExit(long nr);
  // kGuarded: the mask blocked for the call only, syscall stops, the order of guarded().
  absl::StatusOr<long> Guarded(long nr, const std::array<uint64_t, 6>& args);

  pid_t tid_;
  uint64_t syscall_insn_;
  Drive drive_ = Drive::kSingleStep;
  std::atomic<uint32_t>* in_call_ = nullptr;
  std::atomic<int>* stop_note_ = nullptr;
  pid_t last_new_task_ = 0;
};

// `rc`, the raw return of a system call injected into `tid`, or (a negative errno) an
// error naming `what` and the thread.
absl::StatusOr<long> SyscallResult(absl::string_view what, pid_t tid, long rc);

// The kernel's struct sigaction for rt_sigaction on x86-64.
struct KernelSigaction {
  uint64_t handler = 0;
  uint64_t flags = 0;
  uint64_t restorer = 0;
  uint64_t mask = 0;
};

// Finds a `syscall` instruction inside [start, end) of `pid`'s memory (typically the vDSO).
absl::StatusOr<uint64_t> FindSyscallInsn(pid_t pid, uint64_t start, uint64_t end);

// Reads/writes another process's memory: process_vm_readv/writev, falling back to
// /proc/PID/mem for areas without the needed permission.
absl::Status ReadRemote(pid_t pid, uint64_t addr, void* buf, size_t len);
absl::Status WriteRemote(pid_t pid, uint64_t addr, const void* buf, size_t len);

// A scratch area mapped inside a stopped process with injected mmap, for syscall
// arguments that live in memory. Unmap() before the process runs again.
class RemoteScratch {
 public:
  static constexpr size_t kSize = 64 * 1024;

  // Maps kSize bytes read/write anywhere in the process. `shared`: as shared anonymous
  // memory, which never merges with a neighbouring area and shows in /proc/PID/maps as an
  // area of its own ("/dev/zero (deleted)"), so that it can be found again by its address;
  // it is then mapped here too (local()), and Put/Get copy through that mapping.
  // `at`: at this address exactly (MAP_FIXED_NOREPLACE), 0 for anywhere.
  static absl::StatusOr<RemoteScratch> Map(Injector& inj, bool shared = false, uint64_t at = 0);
  // Uses an existing area the caller owns (e.g. a page the restorer mapped itself).
  RemoteScratch(pid_t pid, uint64_t addr, size_t size, bool owned)
      : pid_(pid), addr_(addr), size_(size), owned_(owned) {}

  uint64_t addr() const { return addr_; }
  size_t size() const { return size_; }
  // The same memory mapped in this process, or nullptr (a private area, or no /proc/PID/
  // map_files here): a tracer can wait on a futex in it that the process wakes.
  char* local() const { return static_cast<char*>(local_.get()); }

  // Copies `data` to offset `off` of the area; returns its remote address.
  absl::StatusOr<uint64_t> Put(size_t off, const void* data, size_t len);
  absl::StatusOr<uint64_t> PutString(size_t off, absl::string_view s);  // NUL-terminated
  absl::Status Get(size_t off, void* out, size_t len);

  absl::Status Unmap(Injector& inj);

 private:
  pid_t pid_;
  uint64_t addr_;
  size_t size_;
  bool owned_;
  std::shared_ptr<void> local_;  // unmapped with the last copy
};

}  // namespace cairn::inject
