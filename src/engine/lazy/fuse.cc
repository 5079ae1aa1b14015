#include "engine/lazy/fuse.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/user.h>
#include <unistd.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "engine/inject/injector.h"
#include "engine/inject/ptrace.h"
#include "engine/inject/sigtrap.h"
#include "engine/proc/pidfd.h"

namespace cairn::lazy {

namespace {

// Arms the read end `fd`: the owner first, then the signal, then O_ASYNC, so that it is armed
// only once complete. The kernel records our credentials (root's) as the sender's, which may
// signal any process.
absl::Status Arm(int fd, pid_t target) {
  f_owner_ex owner{F_OWNER_PID, target};
  if (::fcntl(fd, F_SETOWN_EX, &owner) != 0) return ErrnoStatus(absl::StrCat("fcntl(F_SETOWN_EX) of the fuse to pid ", target));
  if (::fcntl(fd, F_SETSIG, SIGKILL) != 0) return ErrnoStatus("fcntl(F_SETSIG SIGKILL) of the fuse");
  int fl = ::fcntl(fd, F_GETFL);
  if (fl < 0 || ::fcntl(fd, F_SETFL, fl | O_ASYNC) != 0) return ErrnoStatus("fcntl(O_ASYNC) of the fuse");
  return absl::OkStatus();
}

// The calls in the holder: pipe2 into two ints below its stack's red zone (what was there put
// back), both ends taken, the write end closed there and the read end moved to `at`.
absl::StatusOr<Fuse> Make(inject::Injector& inj, pid_t holder, int at) {
  ASSIGN_OR_RETURN(user_regs_struct regs, inject::GetRegs(holder));
  uint64_t addr = (regs.rsp - 128 - 2 * sizeof(int)) & ~uint64_t{15};
  int before[2], ends[2];
  RETURN_IF_ERROR(inject::ReadRemote(holder, addr, before, sizeof before));
  absl::StatusOr<long> made = inj.Call("pipe2 (a lazy restore's fuse)", SYS_pipe2, addr, O_CLOEXEC);
  absl::Status read = made.ok() ? inject::ReadRemote(holder, addr, ends, sizeof ends) : made.status();
  RETURN_IF_ERROR(inject::WriteRemote(holder, addr, before, sizeof before));
  RETURN_IF_ERROR(read);
  absl::StatusOr<UniqueFd> r = proc::CopyFd(holder, ends[0]), w = proc::CopyFd(holder, ends[1]);
  absl::Status moved = inj.Call("close (the fuse's write end)", SYS_close, static_cast<uint64_t>(ends[1])).status();
  if (moved.ok() && ends[0] != at) {
    moved = inj.Call(absl::StrCat("dup3 (the fuse to fd ", at, ")"), SYS_dup3, static_cast<uint64_t>(ends[0]),
                     static_cast<uint64_t>(at), O_CLOEXEC)
                .status();
    absl::Status closed = inj.Call("close", SYS_close, static_cast<uint64_t>(ends[0])).status();
    if (moved.ok()) moved = closed;
  }
  RETURN_IF_ERROR(moved);
  if (!r.ok()) return r.status();
  if (!w.ok()) return w.status();
  return Fuse{std::move(*r), std::move(*w)};
}

}  // namespace

absl::StatusOr<Fuse> MakeFuseIn(pid_t holder, int at, pid_t target) {
  ASSIGN_OR_RETURN(uint64_t insn, inject::VdsoSyscallInsn(holder));
  ASSIGN_OR_RETURN(uint64_t mask, inject::GetSigmask(holder));
  // Single-stepped injection needs every catchable signal blocked (inject/injector.h).
  RETURN_IF_ERROR(inject::SetSigmask(holder, ~0ULL));
  inject::Injector inj(holder, insn);
  absl::StatusOr<Fuse> f = Make(inj, holder, at);
  absl::Status unmasked = inject::SetSigmask(holder, mask);
  if (!f.ok()) return Annotate(f.status(), absl::StrCat("make a lazy restore's fuse in pid ", holder));
  RETURN_IF_ERROR(unmasked);
  RETURN_IF_ERROR(Arm(f->read.get(), target));
  return f;
}

void DisarmFuse(int fd) {
  int fl = ::fcntl(fd, F_GETFL);
  if (fl >= 0) ::fcntl(fd, F_SETFL, fl & ~O_ASYNC);
}

bool HoldsFuses(std::string_view comm) { return comm == "cairn-init"; }

bool IsFuseFd(std::string_view comm, int fd) { return fd >= kFuseFloor && HoldsFuses(comm); }

int NextFuseFd(pid_t holder, int made) {
  rlimit lim{};
  if (::prlimit(holder, RLIMIT_NOFILE, nullptr, &lim) != 0) return -1;
  int64_t top = static_cast<int64_t>(std::min<rlim_t>(lim.rlim_cur, 1u << 20)) - 1 - made;
  return top >= kFuseFloor ? static_cast<int>(top) : -1;
}

}  // namespace cairn::lazy
