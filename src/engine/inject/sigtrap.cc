#include "engine/inject/sigtrap.h"

#include <sys/mman.h>

#include <signal.h>
#include <sys/syscall.h>
#include <sys/user.h>

#include "common/status.h"
#include "engine/inject/injector.h"
#include "engine/inject/ptrace.h"
#include "engine/inject/trampoline.h"

#include "engine/proc/maps.h"

#include "absl/strings/str_cat.h"

namespace cairn::inject {
namespace {

constexpr uint64_t kRedZone = 128;
constexpr uint64_t kAllSignals = ~0ULL;

// Where the struct goes: below the stack pointer and its red zone, 16-byte aligned.
absl::StatusOr<uint64_t> BelowStack(pid_t tid) {
  ASSIGN_OR_RETURN(user_regs_struct regs, GetRegs(tid));
  return (regs.rsp - kRedZone - sizeof(KernelSigaction)) & ~uint64_t{15};
}

// Runs rt_sigaction(SIGTRAP, act, oldact) at syscall stops with every signal blocked.
absl::Status SigtrapCall(pid_t tid, uint64_t syscall_insn, uint64_t act, uint64_t oldact) {
  ASSIGN_OR_RETURN(uint64_t mask, GetSigmask(tid));
  RETURN_IF_ERROR(SetSigmask(tid, kAllSignals));
  Injector inj(tid, syscall_insn);
  absl::StatusOr<long> rc = inj.RawAtSyscallStops(SYS_rt_sigaction, {SIGTRAP, act, oldact, 8});
  absl::Status unmasked = SetSigmask(tid, mask);
  RETURN_IF_ERROR(rc.status());
  RETURN_IF_ERROR(SyscallResult("rt_sigaction(SIGTRAP)", tid, *rc).status());
  return unmasked;
}

}  // namespace

absl::Status SetSigtrapAction(pid_t tid, uint64_t syscall_insn, const KernelSigaction& action) {
  ASSIGN_OR_RETURN(uint64_t at, BelowStack(tid));
  KernelSigaction before;
  RETURN_IF_ERROR(Annotate(ReadRemote(tid, at, &before, sizeof before), "read the stack below the stack pointer"));
  RETURN_IF_ERROR(WriteRemote(tid, at, &action, sizeof action));
  absl::Status set = SigtrapCall(tid, syscall_insn, at, 0);
  absl::Status put_back = WriteRemote(tid, at, &before, sizeof before);
  RETURN_IF_ERROR(set);
  return put_back;
}

absl::StatusOr<uint64_t> VdsoSyscallInsn(pid_t pid) {
  // FailedPrecondition, not NotFound: a tree dump reads that as a process that exited.
  absl::StatusOr<std::pair<uint64_t, uint64_t>> vdso = VdsoRange(pid);
  if (vdso.ok()) {
    absl::StatusOr<uint64_t> insn = FindSyscallInsn(pid, vdso->first, vdso->second);
    if (absl::IsNotFound(insn.status())) return absl::FailedPreconditionError(insn.status().message());
    return insn;
  }
  // A process without a vDSO: a `syscall` of its own code (its libc has many).
  ASSIGN_OR_RETURN(std::vector<proc::MapEntry> maps, proc::ReadMaps(pid));
  for (const proc::MapEntry& m : maps) {
    if (!(m.prot & PROT_EXEC) || m.shared || m.path.empty() || m.path[0] != '/') continue;
    absl::StatusOr<uint64_t> insn = FindSyscallInsn(pid, m.start, m.end);
    if (insn.ok()) return insn;
  }
  return absl::FailedPreconditionError(absl::StrCat("pid ", pid, " has no vDSO and no syscall instruction in its code"));
}

}  // namespace cairn::inject
