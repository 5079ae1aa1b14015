#include "engine/inject/injector.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <sys/uio.h>

#include <chrono>
#include <cstring>
#include <string>

#include "absl/strings/str_format.h"
#include "common/log.h"
#include "common/status.h"
#include "common/stop_points.h"
#include "common/unique_fd.h"
#include "engine/inject/ptrace.h"

namespace cairn::inject {

user_regs_struct Injector::CallRegs(const user_regs_struct& saved, long nr, const std::array<uint64_t, 6>& args) const {
  user_regs_struct regs = saved;
  regs.rip = syscall_insn_;
  regs.rax = static_cast<uint64_t>(nr);
  regs.orig_rax = static_cast<uint64_t>(-1);
  regs.rdi = args[0];
  regs.rsi = args[1];
  regs.rdx = args[2];
  regs.r10 = args[3];
  regs.r8 = args[4];
  regs.r9 = args[5];
  return regs;
}

absl::StatusOr<long> Injector::Raw(long nr, std::array<uint64_t, 6> args) {
  if (drive_ == Drive::kGuarded) return Guarded(nr, args);
  ASSIGN_OR_RETURN(user_regs_struct saved, GetRegs(tid_));
  RETURN_IF_ERROR(SetRegs(tid_, CallRegs(saved, nr, args)));
  absl::StatusOr<long> result = StepOverSyscall(nr);
  // Put the thread back as it was on every path, so that a failed injection never leaves
  // a process that would crash when it is let go.
  absl::Status restored = SetRegs(tid_, saved);
  if (!result.ok()) return result;
  RETURN_IF_ERROR(restored);
  return result;
}

absl::Status Injector::EnterWindow(const user_regs_struct& saved, uint64_t mask, const user_regs_struct& call) const {
  constexpr uint64_t kAllSignals = ~0ULL;
  if (in_call_ != nullptr) in_call_->store(1, std::memory_order_seq_cst);
  absl::Status entered = SetSigmask(tid_, kAllSignals);
  if (entered.ok()) entered = SetRegs(tid_, call);
  if (!entered.ok()) (void)LeaveWindow(saved, mask);
  return entered;
}

absl::Status Injector::LeaveWindow(const user_regs_struct& saved, uint64_t mask) const {
  absl::Status restored = SetRegs(tid_, saved);
  absl::Status unmasked = SetSigmask(tid_, mask);
  // The flag stays up unless both are back: the guardian then finishes the job.
  if (restored.ok() && unmasked.ok() && in_call_ != nullptr) in_call_->store(0, std::memory_order_seq_cst);
  RETURN_IF_ERROR(restored);
  return unmasked;
}

absl::StatusOr<long> Injector::Guarded(long nr, const std::array<uint64_t, 6>& args) {
  ASSIGN_OR_RETURN(user_regs_struct saved, GetRegs(tid_));
  ASSIGN_OR_RETURN(uint64_t mask, GetSigmask(tid_));
  user_regs_struct call = CallRegs(saved, nr, args);
  call.eflags &= ~uint64_t{0x100};  // no trap flag: nothing may trap in the window
  RETURN_IF_ERROR(EnterWindow(saved, mask, call));
  FaultPoint("injecting");
  auto t_run = std::chrono::steady_clock::now();
  absl::StatusOr<long> result = RunToSyscallExit(nr);
  CAIRN_LOG_DEBUG("event=guarded_call tid={} nr={} us={:.0f}", tid_, nr,
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - t_run).count() * 1e6);
  absl::Status left = LeaveWindow(saved, mask);
  if (!result.ok()) return result;
  RETURN_IF_ERROR(left);
  return result;
}

absl::StatusOr<long> Injector::StepOverSyscall(long nr) {
  RETURN_IF_ERROR(SingleStep(tid_));
  for (;;) {
    ASSIGN_OR_RETURN(StopInfo stop, WaitStop(tid_));
    if (stop.kind == StopInfo::Kind::kSignalStop && stop.signal == SIGTRAP) break;
    if (stop.kind == StopInfo::Kind::kExited || stop.kind == StopInfo::Kind::kKilled) {
      return absl::AbortedError(absl::StrCat("thread ", tid_, " died during injected syscall ", nr));
    }
    if (stop.kind == StopInfo::Kind::kEventStop) {
      // A fork/clone event (PTRACE_O_TRACEFORK/TRACECLONE) or a leftover interrupt: note
      // the new task's id and keep stepping.
      if (stop.event == PTRACE_EVENT_FORK || stop.event == PTRACE_EVENT_CLONE) {
        unsigned long msg = 0;
        if (::ptrace(PTRACE_GETEVENTMSG, tid_, nullptr, &msg) == 0) last_new_task_ = static_cast<pid_t>(msg);
      }
      RETURN_IF_ERROR(SingleStep(tid_));
      continue;
    }
    return absl::InternalError(absl::StrCat("thread ", tid_, " stopped by signal ", stop.signal,
                                            " during injected syscall ", nr,
                                            " (signals must be blocked while injecting)"));
  }
  ASSIGN_OR_RETURN(user_regs_struct after, GetRegs(tid_));
  // The step over the 2-byte instruction; a SIGTRAP from outside stops the thread elsewhere.
  if (after.rip != syscall_insn_ + 2) {
    return absl::InternalError(absl::StrCat("thread ", tid_, " took a SIGTRAP from outside during injected syscall ",
                                            nr, "; try again"));
  }
  return static_cast<long>(after.rax);
}

absl::StatusOr<long> Injector::RawAtSyscallStops(long nr, std::array<uint64_t, 6> args) {
  ASSIGN_OR_RETURN(user_regs_struct saved, GetRegs(tid_));
  RETURN_IF_ERROR(SetRegs(tid_, CallRegs(saved, nr, args)));
  absl::StatusOr<long> result = RunToSyscallExit(nr);
  absl::Status restored = SetRegs(tid_, saved);
  if (!result.ok()) return result;
  RETURN_IF_ERROR(restored);
  return result;
}

absl::StatusOr<long> Injector::RunToSyscallExit(long nr) {
  // Two syscall stops: at the call's entry, then at its exit. Every catchable signal is
  // blocked, so a SIGTRAP stop here is one of them (reported as SIGTRAP|0x80 with
  // PTRACE_O_TRACESYSGOOD, plain SIGTRAP without).
  absl::Status ran;
  for (int stops = 0; stops < 2 && ran.ok();) {
    ran = Syscall(tid_);
    while (ran.ok()) {
      absl::StatusOr<StopInfo> stop = WaitStop(tid_);
      if (!stop.ok()) {
        ran = stop.status();
        break;
      }
      if (stop->kind == StopInfo::Kind::kSignalStop && (stop->signal & 0x7f) == SIGTRAP) {
        ++stops;
        break;
      }
      if (stop->kind == StopInfo::Kind::kExited || stop->kind == StopInfo::Kind::kKilled) {
        return absl::AbortedError(absl::StrCat("thread ", tid_, " died during injected syscall ", nr));
      }
      if (stop->kind == StopInfo::Kind::kEventStop) {  // a leftover interrupt or a group stop: go on
        ran = Syscall(tid_);
        continue;
      }
      if (stop->kind == StopInfo::Kind::kSignalStop && TakeStopSignal(stop->signal)) {
        ran = Syscall(tid_, stop->signal);
        continue;
      }
      ran = absl::InternalError(absl::StrCat("thread ", tid_, " stopped by signal ", stop->signal,
                                             " during injected syscall ", nr,
                                             " (signals must be blocked while injecting)"));
    }
  }
  RETURN_IF_ERROR(ran);
  ASSIGN_OR_RETURN(user_regs_struct after, GetRegs(tid_));
  return static_cast<long>(after.rax);
}

bool Injector::TakeStopSignal(int signal) const {
  if (signal != SIGSTOP && signal != SIGTSTP && signal != SIGTTIN && signal != SIGTTOU) return false;
  if (stop_note_ != nullptr) stop_note_->store(signal);
  return true;
}

absl::StatusOr<long> Injector::Call(absl::string_view what, long nr, uint64_t a0, uint64_t a1,
                                    uint64_t a2, uint64_t a3, uint64_t a4, uint64_t a5) {
  ASSIGN_OR_RETURN(long rc, Raw(nr, {a0, a1, a2, a3, a4, a5}));
  return SyscallResult(what, tid_, rc);
}

absl::StatusOr<long> SyscallResult(absl::string_view what, pid_t tid, long rc) {
  if (rc < 0 && rc > -4096) return ErrnoStatus(absl::StrCat(what, " (in pid ", tid, ")"), static_cast<int>(-rc));
  return rc;
}

absl::StatusOr<uint64_t> FindSyscallInsn(pid_t pid, uint64_t start, uint64_t end) {
  std::string code(end - start, '\0');
  RETURN_IF_ERROR(ReadRemote(pid, start, code.data(), code.size()));
  for (size_t i = 0; i + 1 < code.size(); ++i) {
    if (static_cast<unsigned char>(code[i]) == 0x0f && static_cast<unsigned char>(code[i + 1]) == 0x05) {
      return start + i;
    }
  }
  return absl::NotFoundError(absl::StrFormat(
      "no syscall instruction in pid %d's area %#x-%#x", pid, start, end));
}

namespace {

absl::Status ProcMemIo(pid_t pid, uint64_t addr, void* buf, size_t len, bool write) {
  std::string path = absl::StrCat("/proc/", pid, "/mem");
  UniqueFd fd(::open(path.c_str(), (write ? O_WRONLY : O_RDONLY) | O_CLOEXEC));
  if (!fd.valid()) return ErrnoStatus("open " + path);
  auto* p = static_cast<char*>(buf);
  while (len > 0) {
    ssize_t n = write ? ::pwrite(fd.get(), p, len, static_cast<off_t>(addr))
                      : ::pread(fd.get(), p, len, static_cast<off_t>(addr));
    if (n <= 0) {
      if (n < 0 && errno == EINTR) continue;
      return ErrnoStatus(absl::StrFormat("%s %s at %#x", write ? "write" : "read", path, addr),
                         n == 0 ? EIO : errno);
    }
    p += n;
    addr += static_cast<uint64_t>(n);
    len -= static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

absl::Status VmIo(pid_t pid, uint64_t addr, void* buf, size_t len, bool write) {
  auto* p = static_cast<char*>(buf);
  while (len > 0) {
    iovec local{p, len};
    iovec remote{reinterpret_cast<void*>(addr), len};
    ssize_t n = write ? ::process_vm_writev(pid, &local, 1, &remote, 1, 0)
                      : ::process_vm_readv(pid, &local, 1, &remote, 1, 0);
    if (n <= 0) return ProcMemIo(pid, addr, p, len, write);
    p += n;
    addr += static_cast<uint64_t>(n);
    len -= static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ReadRemote(pid_t pid, uint64_t addr, void* buf, size_t len) {
  return VmIo(pid, addr, buf, len, /*write=*/false);
}

absl::Status WriteRemote(pid_t pid, uint64_t addr, const void* buf, size_t len) {
  return VmIo(pid, addr, const_cast<void*>(buf), len, /*write=*/true);
}

absl::StatusOr<RemoteScratch> RemoteScratch::Map(Injector& inj, bool shared, uint64_t at) {
  ASSIGN_OR_RETURN(long addr, inj.Call("mmap scratch", SYS_mmap, at, kSize, PROT_READ | PROT_WRITE,
                                       (shared ? MAP_SHARED : MAP_PRIVATE) | MAP_ANONYMOUS |
                                           (at != 0 ? MAP_FIXED_NOREPLACE : 0),
                                       static_cast<uint64_t>(-1), 0));
  if (at != 0 && static_cast<uint64_t>(addr) != at) {  // a kernel before 4.17 takes it as a hint
    (void)inj.Call("munmap scratch", SYS_munmap, static_cast<uint64_t>(addr), kSize);
    return absl::FailedPreconditionError(absl::StrFormat("mmap of the scratch area at %#x gave %#lx", at, addr));
  }
  RemoteScratch scratch(inj.tid(), static_cast<uint64_t>(addr), kSize, /*owned=*/true);
  if (shared) {
    std::string files = absl::StrFormat("/proc/%d/map_files/%x-%x", inj.tid(), addr, addr + kSize);
    if (UniqueFd fd(::open(files.c_str(), O_RDWR | O_CLOEXEC)); fd.valid()) {
      void* local = ::mmap(nullptr, kSize, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
      if (local != MAP_FAILED) scratch.local_.reset(local, [](void* p) { ::munmap(p, kSize); });
    }
  }
  return scratch;
}

absl::StatusOr<uint64_t> RemoteScratch::Put(size_t off, const void* data, size_t len) {
  if (off + len > size_) {
    return absl::OutOfRangeError(absl::StrCat("scratch write of ", len, " bytes at ", off,
                                              " exceeds the ", size_, "-byte scratch area"));
  }
  if (local_ != nullptr) {
    std::memcpy(local() + off, data, len);
  } else {
    RETURN_IF_ERROR(WriteRemote(pid_, addr_ + off, data, len));
  }
  return addr_ + off;
}

absl::StatusOr<uint64_t> RemoteScratch::PutString(size_t off, absl::string_view s) {
  std::string z(s);
  return Put(off, z.c_str(), z.size() + 1);
}

absl::Status RemoteScratch::Get(size_t off, void* out, size_t len) {
  if (off + len > size_) return absl::OutOfRangeError("scratch read out of range");
  if (local_ != nullptr) {
    std::memcpy(out, local() + off, len);
    return absl::OkStatus();
  }
  return ReadRemote(pid_, addr_ + off, out, len);
}

absl::Status RemoteScratch::Unmap(Injector& inj) {
  if (!owned_ || addr_ == 0) return absl::OkStatus();
  local_.reset();
  auto rc = inj.Call("munmap scratch", SYS_munmap, addr_, size_);
  addr_ = 0;
  return rc.status();
}

}  // namespace cairn::inject
