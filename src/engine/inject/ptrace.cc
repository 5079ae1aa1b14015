#include "engine/inject/ptrace.h"

#include <elf.h>
#include <errno.h>
#include <signal.h>
#include <sys/ptrace.h>
#include <sys/uio.h>
#include <sys/user.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "common/status.h"
#include "engine/proc/stat.h"

namespace cairn::inject {
namespace {

constexpr long kGetRseqConfiguration = 0x420f;

long Ptrace(int request, pid_t tid, void* addr, void* data) {
  return ::ptrace(static_cast<__ptrace_request>(request), tid, addr, data);
}

absl::Status Check(long rc, const char* what, pid_t tid) {
  if (rc == -1) return ErrnoStatus(absl::StrCat(what, " tid ", tid));
  return absl::OkStatus();
}

}  // namespace

namespace {

StopInfo Decode(int status) {
  StopInfo info;
  if (WIFEXITED(status)) {
    info.kind = StopInfo::Kind::kExited;
    info.signal = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    info.kind = StopInfo::Kind::kKilled;
    info.signal = WTERMSIG(status);
  } else if (WIFSTOPPED(status)) {
    info.signal = WSTOPSIG(status);
    info.event = (status >> 16) & 0xff;
    info.kind = info.event != 0 ? StopInfo::Kind::kEventStop : StopInfo::Kind::kSignalStop;
  }
  return info;
}

}  // namespace

// A wait for a thread group leader whose process is killed under it (SIGKILL from outside,
// the OOM killer, a seccomp filter) would never end: the kernel reports a leader's death only
// once its other threads are collected, and they are this process's tracees, dead and
// uncollected. A watchdog thread looks, every 20 ms while waits are under way, at the threads
// waited for: a leader found dead by a signal (its exit code says which: a leader that only
// called pthread_exit has none, and its process lives on) has its process killed whole
// (SIGKILL wakes the threads a seccomp kill leaves in our stops), and its other threads' deaths
// are collected (non-blocking; not those another thread of ours is waiting for), which lets
// its own through to the waiting thread. It needs no lock (a fork may copy this process at any
// moment): the waits are atomic slots, and a forked child clears what it copied and starts its
// own watchdog.
class WaitWatchdog {
 public:
  static WaitWatchdog& Get() {
    static WaitWatchdog w;
    return w;
  }
  // A slot for `tid` while it is waited for (-1: all taken; the wait goes unwatched).
  int Enter(pid_t tid) {
    pid_t me = ::getpid();
    if (owner_.load(std::memory_order_acquire) != me) {
      pid_t prev = owner_.exchange(me, std::memory_order_acq_rel);
      if (prev != me) {
        // A fork's copy of its parent's waits (none of them ours): cleared.
        for (auto& slot : slots_) slot.store(0, std::memory_order_relaxed);
        active_.store(0, std::memory_order_release);
        std::thread([this] { Watch(); }).detach();
      }
    }
    for (int i = 0; i < kSlots; ++i) {
      pid_t free = 0;
      if (slots_[i].compare_exchange_strong(free, tid, std::memory_order_acq_rel)) {
        if (active_.fetch_add(1, std::memory_order_acq_rel) == 0) active_.notify_one();
        return i;
      }
    }
    return -1;
  }
  void Leave(int slot) {
    if (slot < 0) return;
    slots_[slot].store(0, std::memory_order_release);
    active_.fetch_sub(1, std::memory_order_acq_rel);
  }

 private:
  static constexpr int kSlots = 64;

  void Watch() {
    for (;;) {
      active_.wait(0, std::memory_order_acquire);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      for (auto& slot : slots_) {
        pid_t tid = slot.load(std::memory_order_acquire);
        if (tid > 0 && Dead(tid)) CollectOthers(tid);
      }
    }
  }
  bool Waited(pid_t tid) const {
    for (const auto& slot : slots_) {
      if (slot.load(std::memory_order_acquire) == tid) return true;
    }
    return false;
  }
  static bool Dead(pid_t tid) {
    absl::StatusOr<proc::Stat> st = proc::ReadStat(tid);
    return st.ok() && (st->state == 'Z' || st->state == 'X');
  }
  // `tid`, a thread group leader, is dead while waited for. Killed by a signal, its process
  // is dying: its other threads are made to follow (a process killed from a seccomp filter
  // leaves them in our ptrace stops, and only the tracing thread could let them go; SIGKILL
  // wakes them). The deaths of the dead ones are collected.
  void CollectOthers(pid_t tid) const {
    absl::StatusOr<proc::Status> status = proc::ReadStatus(tid);
    absl::StatusOr<proc::Stat> st = proc::ReadStat(tid);
    if (!status.ok() || status->tgid != tid || !st.ok()) return;  // a thread's own death is reported at once
    if ((st->exit_code & 0x7f) != 0) ::kill(tid, SIGKILL);  // killed by a signal: its process is dying
    absl::StatusOr<std::vector<pid_t>> tasks = proc::ListTasks(tid);
    if (!tasks.ok()) return;
    for (pid_t t : *tasks) {
      if (t == tid || !Dead(t) || Waited(t)) continue;
      int wstatus = 0;
      ::waitpid(t, &wstatus, __WALL | WNOHANG);
    }
  }

  std::atomic<pid_t> owner_{0};
  std::atomic<int> active_{0};
  std::atomic<pid_t> slots_[kSlots] = {};
};

absl::StatusOr<StopInfo> WaitStop(pid_t tid) {
  WaitWatchdog& w = WaitWatchdog::Get();
  int slot = w.Enter(tid);
  int status = 0;
  pid_t r;
  do {
    r = ::waitpid(tid, &status, __WALL);
  } while (r < 0 && errno == EINTR);
  int e = errno;
  w.Leave(slot);
  errno = e;
  if (r != tid) return ErrnoStatus(absl::StrCat("waitpid tid ", tid));
  return Decode(status);
}

absl::StatusOr<std::optional<StopInfo>> PollStop(pid_t tid) {
  int status = 0;
  for (;;) {
    pid_t r = ::waitpid(tid, &status, __WALL | WNOHANG);
    if (r == tid) return std::optional<StopInfo>(Decode(status));
    if (r == 0) return std::optional<StopInfo>();
    if (r < 0 && errno == EINTR) continue;
    return ErrnoStatus(absl::StrCat("waitpid tid ", tid));
  }
}

absl::Status Seize(pid_t tid, long options) {
  return Check(Ptrace(PTRACE_SEIZE, tid, nullptr, reinterpret_cast<void*>(options)),
               "ptrace(SEIZE)", tid);
}

absl::Status Interrupt(pid_t tid) {
  return Check(Ptrace(PTRACE_INTERRUPT, tid, nullptr, nullptr), "ptrace(INTERRUPT)", tid);
}

absl::Status Detach(pid_t tid, int signal) {
  return Check(Ptrace(PTRACE_DETACH, tid, nullptr, reinterpret_cast<void*>(static_cast<long>(signal))),
               "ptrace(DETACH)", tid);
}

absl::Status Cont(pid_t tid, int signal) {
  return Check(Ptrace(PTRACE_CONT, tid, nullptr, reinterpret_cast<void*>(static_cast<long>(signal))),
               "ptrace(CONT)", tid);
}

absl::Status SingleStep(pid_t tid) {
  return Check(Ptrace(PTRACE_SINGLESTEP, tid, nullptr, nullptr), "ptrace(SINGLESTEP)", tid);
}

absl::Status Syscall(pid_t tid, int signal) {
  return Check(Ptrace(PTRACE_SYSCALL, tid, nullptr, reinterpret_cast<void*>(static_cast<long>(signal))),
               "ptrace(SYSCALL)", tid);
}

absl::StatusOr<user_regs_struct> GetRegs(pid_t tid) {
  user_regs_struct regs{};
  RETURN_IF_ERROR(Check(Ptrace(PTRACE_GETREGS, tid, nullptr, &regs), "ptrace(GETREGS)", tid));
  return regs;
}

absl::Status SetRegs(pid_t tid, const user_regs_struct& regs) {
  return Check(Ptrace(PTRACE_SETREGS, tid, nullptr, const_cast<user_regs_struct*>(&regs)),
               "ptrace(SETREGS)", tid);
}

absl::StatusOr<std::string> GetXstate(pid_t tid) {
  // Large enough for every xsave layout the kernel exposes (AVX-512 + AMX tiles fit in 16 KiB).
  std::string buf(16384, '\0');
  iovec iov{buf.data(), buf.size()};
  long rc = Ptrace(PTRACE_GETREGSET, tid, reinterpret_cast<void*>(NT_X86_XSTATE), &iov);
  if (rc != 0 && errno == ENODEV) {
    // A CPU without XSAVE (Nehalem and older): the FXSAVE area, x87 and SSE, is all there is.
    buf.resize(sizeof(user_fpregs_struct));
    RETURN_IF_ERROR(Check(Ptrace(PTRACE_GETFPREGS, tid, nullptr, buf.data()), "ptrace(GETFPREGS)", tid));
    return buf;
  }
  RETURN_IF_ERROR(Check(rc, "ptrace(GETREGSET xstate)", tid));
  buf.resize(iov.iov_len);
  return buf;
}

absl::Status SetXstate(pid_t tid, const std::string& xstate) {
  std::string buf = xstate;
  if (buf.size() == sizeof(user_fpregs_struct)) {  // FXSAVE's area only (GetXstate)
    return Check(Ptrace(PTRACE_SETFPREGS, tid, nullptr, buf.data()), "ptrace(SETFPREGS)", tid);
  }
  iovec iov{buf.data(), buf.size()};
  return Check(Ptrace(PTRACE_SETREGSET, tid, reinterpret_cast<void*>(NT_X86_XSTATE), &iov),
               "ptrace(SETREGSET xstate)", tid);
}

absl::StatusOr<uint64_t> GetSigmask(pid_t tid) {
  uint64_t mask = 0;
  RETURN_IF_ERROR(Check(Ptrace(PTRACE_GETSIGMASK, tid, reinterpret_cast<void*>(sizeof mask), &mask),
                        "ptrace(GETSIGMASK)", tid));
  return mask;
}

absl::Status SetSigmask(pid_t tid, uint64_t mask) {
  return Check(Ptrace(PTRACE_SETSIGMASK, tid, reinterpret_cast<void*>(sizeof mask), &mask),
               "ptrace(SETSIGMASK)", tid);
}

absl::StatusOr<std::vector<std::string>> PeekPendingSignals(pid_t tid, bool shared) {
  std::vector<std::string> out;
  constexpr int kBatch = 32;
  siginfo_t infos[kBatch];
  for (;;) {
    __ptrace_peeksiginfo_args args{};
    args.off = out.size();
    args.flags = shared ? PTRACE_PEEKSIGINFO_SHARED : 0;
    args.nr = kBatch;
    long n = Ptrace(PTRACE_PEEKSIGINFO, tid, &args, infos);
    RETURN_IF_ERROR(Check(n, "ptrace(PEEKSIGINFO)", tid));
    for (long i = 0; i < n; ++i) {
      out.emplace_back(reinterpret_cast<const char*>(&infos[i]), sizeof(siginfo_t));
    }
    if (n < kBatch) break;
  }
  return out;
}

absl::StatusOr<RseqConfig> GetRseq(pid_t tid) {
  struct {
    uint64_t rseq_abi_pointer;
    uint32_t rseq_abi_size;
    uint32_t signature;
    uint32_t flags;
    uint32_t pad;
  } conf{};
  RETURN_IF_ERROR(Check(Ptrace(kGetRseqConfiguration, tid, reinterpret_cast<void*>(sizeof conf), &conf),
                        "ptrace(GET_RSEQ_CONFIGURATION)", tid));
  return RseqConfig{conf.rseq_abi_pointer, conf.rseq_abi_size, conf.signature};
}

void ReapKilledThreads(std::vector<pid_t> tids) {
  while (!tids.empty()) {
    bool progressed = false;
    for (auto it = tids.begin(); it != tids.end();) {
      int status = 0;
      pid_t r = ::waitpid(*it, &status, __WALL | WNOHANG);
      if (r < 0 && errno == EINTR) continue;
      if (r == 0) {
        ++it;
        continue;
      }
      progressed = true;
      if (r < 0 || WIFEXITED(status) || WIFSIGNALED(status)) {
        it = tids.erase(it);
        continue;
      }
      ::ptrace(PTRACE_CONT, *it, nullptr, nullptr);  // a stop on its way out (an exit event): on to its death
      ++it;
    }
    if (!progressed) ::usleep(200);
  }
}

}  // namespace cairn::inject
