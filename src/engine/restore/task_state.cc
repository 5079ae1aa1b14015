#include "engine/restore/task_state.h"

#include <fcntl.h>
#include <linux/capability.h>
#include <linux/membarrier.h>
#include <linux/sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/user.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "common/file_util.h"
#include "common/unique_fd.h"
#include "common/log.h"
#include "common/status.h"
#include "engine/machine/xstate.h"
#include "engine/restore/file_identity.h"
#include "engine/restore/files.h"
#include "engine/inject/injector.h"
#include "engine/inject/ptrace.h"
#include "engine/inject/stop_loop.h"

namespace cairn::restore {
namespace {

constexpr int kPrTimerCreateRestoreIds = 77;  // linux 6.15+, not in Debian 12's headers

using inject::KernelSigaction;

struct PrctlMmMap {
  uint64_t start_code, end_code, start_data, end_data, start_brk, brk, start_stack;
  uint64_t arg_start, arg_end, env_start, env_end;
  uint64_t auxv;
  uint32_t auxv_size;
  uint32_t exe_fd;
};
static_assert(sizeof(PrctlMmMap) == 104);

// Scratch offsets: strings at 0, structures at 1 KiB, auxv at 8 KiB.
constexpr size_t kStructOff = 1024;

// A timer as the kernel reports it just after restore armed it (times in ns): the same
// interval; no more time left than it was given (or one period, if it already fired and
// re-armed) plus `slack`, and some left if it was given more than 10 ms and has no period.
absl::Status CheckArmed(const std::string& what, uint64_t interval, uint64_t value, uint64_t got_interval,
                        uint64_t got_value, uint64_t slack = 0) {
  bool ok = got_interval == interval && got_value <= std::max(value, interval) + slack &&
            !(interval == 0 && value > 10'000'000 && got_value == 0);
  if (ok) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrFormat(
      "%s read back after the restore armed it differs: checkpoint interval %d ns, %d ns left; restored interval %d "
      "ns, %d ns left",
      what, interval, value, got_interval, got_value));
}
constexpr size_t kAuxvOff = 8192;
// The signal actions set in one stop, and after them that stop's table of calls.
constexpr size_t kActionsOff = 16384;
// A thread's pending signals, set with its other state in one stop; that stop's table after them.
constexpr size_t kPendingOff = 2048;
constexpr size_t kThreadTableOff = 32768;
// A thread's credentials: its groups from kPendingOff, the table in the scratch area's last 4 KiB
// (64 calls a run), so that as many groups fit as before the calls were batched.
constexpr size_t kCredsTableOff = 61440;

// Settings of the process (or its mm) that nothing else carries: transparent huge pages
// off, the AMX permission, membarrier registrations, oom_score_adj and the audit loginuid.
absl::Status RestoreProcessTunables(inject::Injector& inj, inject::RemoteScratch& scratch, const image::Process& proc) {
  pid_t pid = inj.tid();
  if (proc.thp_disabled()) {
    RETURN_IF_ERROR(inj.Call("prctl(PR_SET_THP_DISABLE)", SYS_prctl, PR_SET_THP_DISABLE, 1, 0, 0, 0).status());
  }
  // AMX tile data (XSAVE component 18) is usable only after the process asked for it; asked
  // again here, before the threads' registers (which may hold tile data) are set.
  constexpr uint64_t kArchReqXcompPerm = 0x1023, kXtileData = 18;
  if (proc.xcomp_perm() >> kXtileData & 1) {
    RETURN_IF_ERROR(inj.Call("arch_prctl(ARCH_REQ_XCOMP_PERM, AMX tile data)", SYS_arch_prctl, kArchReqXcompPerm,
                             kXtileData)
                        .status());
  }
  for (uint32_t cmd : {MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED_SYNC_CORE,
                       MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED_RSEQ}) {
    if ((proc.membarrier_registered() & cmd) == 0) continue;
    RETURN_IF_ERROR(inj.Call(absl::StrFormat("membarrier(REGISTER %#x)", cmd), SYS_membarrier, cmd, 0, 0).status());
  }
  // Lowering oom_score_adj below what the restorer has takes CAP_SYS_RESOURCE: without it
  // the restore fails here rather than leave the process easier to kill than it was.
  std::string adj_path = absl::StrCat("/proc/", pid, "/oom_score_adj");
  std::string adj = absl::StrCat(proc.oom_score_adj());
  UniqueFd adj_fd(proc.has_oom_score_adj() ? ::open(adj_path.c_str(), O_WRONLY | O_CLOEXEC) : -1);
  if (proc.has_oom_score_adj() &&
      (!adj_fd.valid() || ::write(adj_fd.get(), adj.data(), adj.size()) != static_cast<ssize_t>(adj.size()))) {
    return ErrnoStatus(absl::StrCat("write ", adj, " to ", adj_path, " (oom_score_adj as the process had it; "
                                    "lowering it below the restorer's needs CAP_SYS_RESOURCE)"));
  }
  if (proc.has_loginuid()) {
    ASSIGN_OR_RETURN(std::string now, ReadFile(absl::StrCat("/proc/", pid, "/loginuid")));
    std::string want = absl::StrCat(proc.loginuid());
    if (std::string(absl::StripAsciiWhitespace(now)) != want) {
      // Only the task itself may write its loginuid.
      ASSIGN_OR_RETURN(uint64_t path, scratch.PutString(0, "/proc/self/loginuid"));
      ASSIGN_OR_RETURN(uint64_t text, scratch.PutString(64, want));
      ASSIGN_OR_RETURN(long fd, inj.Call("open /proc/self/loginuid", SYS_openat, static_cast<uint64_t>(AT_FDCWD), path,
                                         O_WRONLY | O_CLOEXEC, 0));
      absl::StatusOr<long> wrote = inj.Call("write loginuid", SYS_write, static_cast<uint64_t>(fd), text, want.size());
      RETURN_IF_ERROR(inj.Call("close loginuid", SYS_close, static_cast<uint64_t>(fd)).status());
      if (!wrote.ok()) {
        return Annotate(wrote.status(),
                        absl::StrFormat("set the audit loginuid %s (the restorer's is %s; the kernel refuses to change "
                                        "a loginuid once set when audit's loginuid_immutable is on, or without "
                                        "CAP_AUDIT_CONTROL: restore from a process whose loginuid is unset, e.g. a "
                                        "system service)",
                                        want, absl::StripAsciiWhitespace(now)));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status RestoreProcessState(inject::Injector& inj, inject::RemoteScratch& scratch, uint64_t loop,
                                 const image::Process& proc) {
  pid_t pid = inj.tid();
  const image::MmLayout& mm = proc.mm();

  // mm layout, auxv and the exe link in one call.
  ASSIGN_OR_RETURN(uint64_t exe_path, scratch.PutString(0, mm.exe()));
  ASSIGN_OR_RETURN(long exe_fd, inj.Call("open exe " + mm.exe(), SYS_openat, static_cast<uint64_t>(AT_FDCWD),
                                         exe_path, O_RDONLY | O_CLOEXEC, 0));
  {
    std::string link = absl::StrCat("/proc/", pid, "/fd/", exe_fd);
    struct stat st {};
    if (::stat(link.c_str(), &st) != 0) return ErrnoStatus("stat " + link);
    RETURN_IF_ERROR(CheckSameFile(st, mm.exe_id(), "the executable " + mm.exe()));
  }
  ASSIGN_OR_RETURN(uint64_t auxv_addr, scratch.Put(kAuxvOff, mm.auxv().data(), mm.auxv().size()));
  PrctlMmMap m{mm.start_code(), mm.end_code(), mm.start_data(), mm.end_data(), mm.start_brk(), mm.brk(),
               mm.start_stack(), mm.arg_start(), mm.arg_end(), mm.env_start(), mm.env_end(), auxv_addr,
               static_cast<uint32_t>(mm.auxv().size()), static_cast<uint32_t>(exe_fd)};
  ASSIGN_OR_RETURN(uint64_t m_addr, scratch.Put(kStructOff, &m, sizeof m));
  RETURN_IF_ERROR(inj.Call("prctl(PR_SET_MM_MAP)", SYS_prctl, PR_SET_MM, PR_SET_MM_MAP, m_addr, sizeof m).status());
  RETURN_IF_ERROR(inj.Call("close exe", SYS_close, static_cast<uint64_t>(exe_fd)).status());

  // cwd, umask, personality. A cwd that was removed is made again under its name, entered,
  // and removed once more: the process is back in a deleted directory of that name.
  // The parent is reached without following any symlink (openat2 RESOLVE_NO_SYMLINKS) and
  // the directory made and removed relative to it: a path from the image never leads this
  // root process to make or remove a directory anywhere else.
  std::string cwd_path = proc.cwd();
  bool cwd_deleted = absl::EndsWith(cwd_path, " (deleted)");
  if (cwd_deleted) cwd_path.resize(cwd_path.size() - 10);
  ASSIGN_OR_RETURN(uint64_t cwd, scratch.PutString(0, cwd_path));
  UniqueFd parent;
  std::string leaf = std::filesystem::path(cwd_path).filename().string();
  if (cwd_deleted) {
    struct {
      uint64_t flags, mode, resolve;
    } how{O_PATH | O_DIRECTORY | O_CLOEXEC, 0, 0x04 /* RESOLVE_NO_SYMLINKS */};
    std::string dir = std::filesystem::path(cwd_path).parent_path().string();
    // A container's: under its root, where nothing leads out of it.
    parent = UniqueFd(ImageRootActive() ? OpenImagePath(dir, O_PATH | O_DIRECTORY | O_CLOEXEC)
                                        : static_cast<int>(::syscall(SYS_openat2, AT_FDCWD, dir.c_str(), &how,
                                                                     sizeof how)));
    if (!parent.valid() || leaf.empty() || ::mkdirat(parent.get(), leaf.c_str(), 0700) != 0) {
      return ErrnoStatus("make the removed working directory " + cwd_path +
                         " again, to enter it and remove it (its parent must exist, with no symlink on the way, "
                         "and the name must be free)");
    }
  }
  // Its owner the process's own (its file-system ids, the host's): in a user namespace the
  // process, already its root there, could not enter a directory of the host's root.
  if (cwd_deleted && proc.creds().uids_size() == 4 && proc.creds().gids_size() == 4 &&
      ::fchownat(parent.get(), leaf.c_str(), proc.creds().uids(3), proc.creds().gids(3), AT_SYMLINK_NOFOLLOW) != 0) {
    absl::Status owned = ErrnoStatus("give the removed working directory " + cwd_path + " its process's owner");
    ::unlinkat(parent.get(), leaf.c_str(), AT_REMOVEDIR);
    return owned;
  }
  absl::Status entered = inj.Call("chdir " + proc.cwd(), SYS_chdir, cwd).status();
  if (cwd_deleted && ::unlinkat(parent.get(), leaf.c_str(), AT_REMOVEDIR) != 0 && entered.ok()) {
    entered = ErrnoStatus("remove the working directory " + cwd_path + " again");
  }
  RETURN_IF_ERROR(entered);
  RETURN_IF_ERROR(inj.Call("umask", SYS_umask, proc.umask()).status());
  RETURN_IF_ERROR(inj.Call("personality", SYS_personality, proc.personality()).status());
  RETURN_IF_ERROR(RestoreProcessTunables(inj, scratch, proc));

  // Resource limits, from outside. Without CAP_SYS_RESOURCE a hard limit cannot rise.
  for (const image::Rlimit& r : proc.rlimits()) {
    rlimit want{r.cur(), r.max()};
    if (::prlimit(pid, static_cast<__rlimit_resource>(r.resource()), &want, nullptr) != 0) {
      rlimit cur{};
      if (errno == EPERM && ::prlimit(pid, static_cast<__rlimit_resource>(r.resource()), nullptr, &cur) == 0) {
        rlimit capped{std::min(r.cur(), cur.rlim_max), std::min(r.max(), cur.rlim_max)};
        CAIRN_LOG_WARN("event=rlimit_capped resource={} want_max={} have_max={}", r.resource(), r.max(),
                       cur.rlim_max);
        if (::prlimit(pid, static_cast<__rlimit_resource>(r.resource()), &capped, nullptr) == 0) continue;
      }
      return ErrnoStatus(absl::StrCat("prlimit resource ", r.resource(), " of pid ", pid));
    }
  }

  // Signal handlers: every catchable signal gets its saved disposition or the default, all in
  // one stop (inject/stop_loop.h): the 62 structs side by side, the table of calls after them.
  std::map<int, const image::SigAction*> saved;
  for (const image::SigAction& a : proc.sigactions()) saved[a.signo()] = &a;
  std::vector<KernelSigaction> actions;
  std::vector<int> signals;
  for (int sig = 1; sig <= 64; ++sig) {
    if (sig == SIGKILL || sig == SIGSTOP) continue;
    KernelSigaction ka{};
    if (auto it = saved.find(sig); it != saved.end()) {
      ka = {it->second->handler(), it->second->flags(), it->second->restorer(), it->second->mask()};
    }
    actions.push_back(ka);
    signals.push_back(sig);
  }
  ASSIGN_OR_RETURN(uint64_t actions_addr, scratch.Put(kActionsOff, actions.data(), actions.size() * sizeof actions[0]));
  std::vector<inject::BatchedCall> calls;
  for (size_t i = 0; i < signals.size(); ++i) {
    calls.push_back({SYS_rt_sigaction, {static_cast<uint64_t>(signals[i]), actions_addr + i * sizeof actions[0], 0, 8, 0, 0}});
  }
  RETURN_IF_ERROR(inject::RunCalls(
      inj, scratch, loop, calls, [&](size_t i) { return absl::StrCat("rt_sigaction(", signals[i], ")"); },
      /*repeatable=*/true, kActionsOff + actions.size() * sizeof actions[0]));

  // Interval timers.
  for (const image::Itimer& t : proc.itimers()) {
    itimerval it{};
    it.it_interval = {static_cast<time_t>(t.interval_us() / 1000000), static_cast<suseconds_t>(t.interval_us() % 1000000)};
    it.it_value = {static_cast<time_t>(t.value_us() / 1000000), static_cast<suseconds_t>(t.value_us() % 1000000)};
    if (it.it_value.tv_sec == 0 && it.it_value.tv_usec == 0) it.it_value.tv_usec = 1;  // armed: fire soon
    ASSIGN_OR_RETURN(uint64_t addr, scratch.Put(kStructOff, &it, sizeof it));
    RETURN_IF_ERROR(inj.Call("setitimer", SYS_setitimer, static_cast<uint64_t>(t.which()), addr, 0).status());
    // Read back, as --verify would: the kernel keeps what it was given or refuses it.
    RETURN_IF_ERROR(inj.Call("getitimer", SYS_getitimer, static_cast<uint64_t>(t.which()), addr).status());
    itimerval got{};
    RETURN_IF_ERROR(scratch.Get(kStructOff, &got, sizeof got));
    auto us = [](const timeval& v) { return static_cast<uint64_t>(v.tv_sec) * 1000000 + static_cast<uint64_t>(v.tv_usec); };
    // The CPU-time timers (ITIMER_VIRTUAL, ITIMER_PROF) are armed a clock tick late (at most
    // 10 ms, HZ 100).
    uint64_t tick = t.which() == ITIMER_REAL ? 0 : 10'000'000;
    RETURN_IF_ERROR(CheckArmed(absl::StrCat("interval timer ", t.which()), t.interval_us() * 1000, t.value_us() * 1000,
                               us(got.it_interval) * 1000, us(got.it_value) * 1000, tick));
  }
  return absl::OkStatus();
}

absl::Status CreateThreads(inject::Injector& main, inject::RemoteScratch& scratch, const image::Process& proc,
                           std::map<pid_t, inject::Injector>* injectors, IdMap* ids) {
  injectors->emplace(proc.pid(), main);
  for (const image::Thread& t : proc.threads()) {
    if (t.tid() == proc.pid()) continue;
    pid_t tid = t.tid();
    ASSIGN_OR_RETURN(uint64_t tid_addr, scratch.Put(kStructOff + 512, &tid, sizeof tid));
    clone_args args{};
    args.flags = CLONE_VM | CLONE_FS | CLONE_FILES | CLONE_SIGHAND | CLONE_THREAD | CLONE_SYSVSEM;
    args.set_tid = tid_addr;
    args.set_tid_size = 1;
    ASSIGN_OR_RETURN(uint64_t args_addr, scratch.Put(kStructOff, &args, sizeof args));
    auto rc = main.Call(absl::StrCat("clone3 thread ", tid), SYS_clone3, args_addr, sizeof args);
    if (!rc.ok()) {
      if (absl::IsAlreadyExists(rc.status())) {
        return absl::AlreadyExistsError(absl::StrCat("thread id ", tid, " is in use by another process; it must be "
                                                     "free to restore the checkpoint"));
      }
      return rc.status();
    }
    // The new thread is traced from birth (PTRACE_O_TRACECLONE) and starts stopped.
    pid_t host_tid = main.last_new_task() != 0 ? main.last_new_task() : tid;
    ids->Set(tid, host_tid);
    ASSIGN_OR_RETURN(inject::StopInfo stop, inject::WaitStop(host_tid));
    if (stop.kind != inject::StopInfo::Kind::kSignalStop && stop.kind != inject::StopInfo::Kind::kEventStop) {
      return absl::InternalError(absl::StrCat("new thread ", tid, " did not stop"));
    }
    injectors->emplace(tid, inject::Injector(host_tid, main.syscall_insn()));
  }
  return absl::OkStatus();
}

absl::Status RestoreThreadStates(std::map<pid_t, inject::Injector>& injectors, inject::RemoteScratch& scratch,
                                 uint64_t loop, const image::Process& proc, const image::Creds& c) {
  pid_t pid = proc.pid();
  inject::Injector& main = injectors.at(pid);
  // Each thread's own state in one stop of that thread (inject/stop_loop.h): its name, its
  // signal stack and its pending signals side by side in the scratch area, the table after them.
  for (const image::Thread& t : proc.threads()) {
    inject::Injector& inj = injectors.at(t.tid());
    inject::NamedCalls calls;
    calls.Add("set_robust_list", SYS_set_robust_list, {t.robust_list(), t.robust_list_len()});
    calls.Add("set_tid_address", SYS_set_tid_address, {t.clear_child_tid()});
    if (t.rseq().addr() != 0) calls.Add("rseq", SYS_rseq, {t.rseq().addr(), t.rseq().size(), 0, t.rseq().signature()});
    stack_t ss{};
    ss.ss_sp = reinterpret_cast<void*>(t.altstack().sp());
    ss.ss_flags = t.altstack().flags() & ~SS_ONSTACK;
    ss.ss_size = t.altstack().size();
    if (!(ss.ss_flags & SS_DISABLE)) {
      ASSIGN_OR_RETURN(uint64_t ss_addr, scratch.Put(kStructOff, &ss, sizeof ss));
      calls.Add("sigaltstack", SYS_sigaltstack, {ss_addr});
    }
    ASSIGN_OR_RETURN(uint64_t name, scratch.PutString(0, t.comm().substr(0, 15)));
    calls.Add("prctl(PR_SET_NAME)", SYS_prctl, {PR_SET_NAME, name});
    // Queued in order: as many as fit before the table in this stop, the rest one call each after it.
    size_t at = kPendingOff;
    std::vector<siginfo_t> more;
    for (const image::SigInfo& si : t.pending()) {
      siginfo_t info{};
      std::memcpy(&info, si.raw().data(), std::min(si.raw().size(), sizeof info));
      if (!more.empty() || at + sizeof info > kThreadTableOff) {
        more.push_back(info);
        continue;
      }
      ASSIGN_OR_RETURN(uint64_t addr, scratch.Put(at, &info, sizeof info));
      at += sizeof info;
      calls.Add("rt_tgsigqueueinfo", SYS_rt_tgsigqueueinfo,
                {static_cast<uint64_t>(pid), static_cast<uint64_t>(t.tid()), static_cast<uint64_t>(info.si_signo), addr});
    }
    // Not repeatable: a signal queued twice would be delivered twice.
    RETURN_IF_ERROR(
        calls.Run(inj, scratch, loop, /*repeatable=*/false, kThreadTableOff, absl::StrCat(" (thread ", t.tid(), ")")));
    for (const siginfo_t& info : more) {
      ASSIGN_OR_RETURN(uint64_t addr, scratch.Put(kStructOff, &info, sizeof info));
      RETURN_IF_ERROR(inj.Call("rt_tgsigqueueinfo", SYS_rt_tgsigqueueinfo, pid, t.tid(),
                               static_cast<uint64_t>(info.si_signo), addr).status());
    }
  }
  for (const image::SigInfo& si : proc.shared_pending()) {
    siginfo_t info{};
    std::memcpy(&info, si.raw().data(), std::min(si.raw().size(), sizeof info));
    ASSIGN_OR_RETURN(uint64_t addr, scratch.Put(kStructOff, &info, sizeof info));
    RETURN_IF_ERROR(main.Call("rt_sigqueueinfo", SYS_rt_sigqueueinfo, pid, static_cast<uint64_t>(info.si_signo), addr)
                        .status());
  }

  // POSIX timers keep their ids (PR_TIMER_CREATE_RESTORE_IDS, Linux 6.15+).
  if (proc.posix_timers_size() > 0) {
    RETURN_IF_ERROR(main.Call("prctl(PR_TIMER_CREATE_RESTORE_IDS, on)", SYS_prctl, kPrTimerCreateRestoreIds, 1)
                        .status());
    for (const image::PosixTimer& pt : proc.posix_timers()) {
      sigevent sev{};
      sev.sigev_notify = pt.notify();
      sev.sigev_signo = pt.signo();
      sev.sigev_value.sival_ptr = reinterpret_cast<void*>(pt.sigval());
      if (pt.notify() == SIGEV_THREAD_ID) sev._sigev_un._tid = pt.notify_tid();
      ASSIGN_OR_RETURN(uint64_t sev_addr, scratch.Put(kStructOff, &sev, sizeof sev));
      int id = pt.id();
      ASSIGN_OR_RETURN(uint64_t id_addr, scratch.Put(kStructOff + 256, &id, sizeof id));
      RETURN_IF_ERROR(main.Call(absl::StrCat("timer_create id ", pt.id()), SYS_timer_create,
                                static_cast<uint64_t>(pt.clock()), sev_addr, id_addr).status());
      itimerspec its{};
      its.it_interval = {static_cast<time_t>(pt.interval_ns() / 1000000000), static_cast<long>(pt.interval_ns() % 1000000000)};
      its.it_value = {static_cast<time_t>(pt.value_ns() / 1000000000), static_cast<long>(pt.value_ns() % 1000000000)};
      if (its.it_value.tv_sec == 0 && its.it_value.tv_nsec == 0 && (pt.interval_ns() != 0)) its.it_value.tv_nsec = 1;
      ASSIGN_OR_RETURN(uint64_t its_addr, scratch.Put(kStructOff + 512, &its, sizeof its));
      RETURN_IF_ERROR(main.Call("timer_settime", SYS_timer_settime, static_cast<uint64_t>(pt.id()), 0, its_addr, 0)
                          .status());
      RETURN_IF_ERROR(main.Call("timer_gettime", SYS_timer_gettime, static_cast<uint64_t>(pt.id()), its_addr).status());
      itimerspec got{};
      RETURN_IF_ERROR(scratch.Get(kStructOff + 512, &got, sizeof got));
      auto ns = [](const timespec& v) { return static_cast<uint64_t>(v.tv_sec) * 1000000000 + static_cast<uint64_t>(v.tv_nsec); };
      RETURN_IF_ERROR(CheckArmed(absl::StrCat("POSIX timer id ", pt.id()), pt.interval_ns(), pt.value_ns(),
                                 ns(got.it_interval), ns(got.it_value)));
    }
    RETURN_IF_ERROR(main.Call("prctl(PR_TIMER_CREATE_RESTORE_IDS, off)", SYS_prctl, kPrTimerCreateRestoreIds, 0)
                        .status());
  }

  // Credentials last: they may take away the rights the steps above needed. Credentials
  // are per thread in the kernel, so every thread sets its own.
  bool root_full = c.uids_size() == 4 && c.gids_size() == 4;
  for (int i = 0; i < 4 && root_full; ++i) root_full = c.uids(i) == 0 && c.gids(i) == 0;
  // Each thread's in one stop of that thread (inject/stop_loop.h), in the order they must be
  // made: the groups and the capability sets side by side in the scratch area, the table after.
  std::vector<uint32_t> groups(c.groups().begin(), c.groups().end());
  if (kPendingOff + groups.size() * sizeof(uint32_t) > kCredsTableOff) {
    return absl::UnimplementedError(absl::StrCat("pid ", pid, " has ", groups.size(),
                                                 " supplementary groups; a restore sets at most ",
                                                 (kCredsTableOff - kPendingOff) / sizeof(uint32_t)));
  }
  __user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2]{};
  data[0] = {static_cast<uint32_t>(c.cap_eff()), static_cast<uint32_t>(c.cap_prm()), static_cast<uint32_t>(c.cap_inh())};
  data[1] = {static_cast<uint32_t>(c.cap_eff() >> 32), static_cast<uint32_t>(c.cap_prm() >> 32),
             static_cast<uint32_t>(c.cap_inh() >> 32)};
  // Written once: every thread's calls read them from the shared address space, and their tables
  // lie above them.
  ASSIGN_OR_RETURN(uint64_t gaddr, scratch.Put(kPendingOff, groups.data(), groups.size() * sizeof(uint32_t)));
  ASSIGN_OR_RETURN(uint64_t haddr, scratch.Put(kStructOff, &hdr, sizeof hdr));
  ASSIGN_OR_RETURN(uint64_t daddr, scratch.Put(kStructOff + 64, data, sizeof data));
  for (auto& [tid, inj] : injectors) {
    inject::NamedCalls calls;
    calls.Add("setgroups", SYS_setgroups, {groups.size(), gaddr});
    for (int cap = 0; cap < 64; ++cap) {
      if (!(c.cap_bnd() & (1ULL << cap)) && cap <= CAP_LAST_CAP) {
        calls.Add("prctl(PR_CAPBSET_DROP)", SYS_prctl, {PR_CAPBSET_DROP, static_cast<uint64_t>(cap)});
      }
    }
    if (c.uids_size() == 4 && c.gids_size() == 4 && !root_full) {
      calls.Add("prctl(PR_SET_KEEPCAPS)", SYS_prctl, {PR_SET_KEEPCAPS, 1});
      calls.Add("setresgid", SYS_setresgid, {c.gids(0), c.gids(1), c.gids(2)});
      calls.Add("setfsgid", SYS_setfsgid, {c.gids(3)});
      calls.Add("setresuid", SYS_setresuid, {c.uids(0), c.uids(1), c.uids(2)});
      calls.Add("setfsuid", SYS_setfsuid, {c.uids(3)});
      calls.Add("prctl(PR_SET_KEEPCAPS)", SYS_prctl, {PR_SET_KEEPCAPS, 0});
    }
    calls.Add("capset", SYS_capset, {haddr, daddr});
    // Ambient capabilities, each raised on its own (the kernel allows it for a capability
    // both permitted and inheritable, which the capset above restored).
    for (int cap = 0; cap <= CAP_LAST_CAP; ++cap) {
      if (!(c.cap_amb() & (1ULL << cap))) continue;
      calls.Add(absl::StrFormat("prctl(PR_CAP_AMBIENT_RAISE, %d)", cap), SYS_prctl,
                {PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, static_cast<uint64_t>(cap)});
    }
    // Not repeatable: once setresuid has dropped root, the calls before it would be refused.
    RETURN_IF_ERROR(
        calls.Run(inj, scratch, loop, /*repeatable=*/false, kCredsTableOff, absl::StrCat(" (thread ", tid, ")")));
  }
  if (c.no_new_privs()) {
    RETURN_IF_ERROR(main.Call("prctl(PR_SET_NO_NEW_PRIVS)", SYS_prctl, PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0).status());
  }
  RETURN_IF_ERROR(main.Call("prctl(PR_SET_DUMPABLE)", SYS_prctl, PR_SET_DUMPABLE,
                            static_cast<uint64_t>(c.dumpable())).status());
  if (proc.child_subreaper()) {
    RETURN_IF_ERROR(main.Call("prctl(PR_SET_CHILD_SUBREAPER)", SYS_prctl, PR_SET_CHILD_SUBREAPER, 1).status());
  }
  RETURN_IF_ERROR(main.Call("prctl(PR_SET_PDEATHSIG)", SYS_prctl, PR_SET_PDEATHSIG,
                            static_cast<uint64_t>(proc.pdeathsig())).status());
  return absl::OkStatus();
}

absl::Status SetFinalRegisters(const image::Process& proc, const IdMap& ids, const image::Machine* machine) {
  std::vector<machine::XsaveComponent> layout;
  if (machine != nullptr) {
    for (const image::XsaveComponent& c : machine->xsave_components()) layout.push_back({c.index(), c.offset(), c.size()});
  }
  uint32_t saved_size = machine != nullptr ? machine->xsave_size() : 0;
  for (const image::Thread& t : proc.threads()) {
    user_regs_struct regs{};
    if (t.regs().raw().size() != sizeof regs) {
      return absl::DataLossError(absl::StrCat("thread ", t.tid(), ": saved registers have the wrong size"));
    }
    std::memcpy(&regs, t.regs().raw().data(), sizeof regs);
    if (static_cast<int64_t>(regs.orig_rax) >= 0) {
      switch (static_cast<int64_t>(regs.rax)) {
        case -512:  // ERESTARTSYS
        case -513:  // ERESTARTNOINTR
        case -514:  // ERESTARTNOHAND
          regs.rax = regs.orig_rax;
          regs.rip -= 2;
          break;
        case -516:  // ERESTART_RESTARTBLOCK: its remaining time lived in the kernel
          regs.rax = static_cast<uint64_t>(-EINTR);
          break;
        default:
          break;
      }
      regs.orig_rax = static_cast<uint64_t>(-1);
    }
    pid_t tid = ids.Host(t.tid());
    std::string xstate = t.xstate();
    if (saved_size != 0) {
      ASSIGN_OR_RETURN(std::string fresh, inject::GetXstate(tid));
      absl::StatusOr<std::string> fitted = machine::FitXstate(xstate, layout, saved_size, fresh, machine::ThisCpu());
      if (!fitted.ok()) return Annotate(fitted.status(), absl::StrCat("thread ", t.tid()));
      xstate = std::move(*fitted);
    }
    RETURN_IF_ERROR(inject::SetXstate(tid, xstate));
    RETURN_IF_ERROR(inject::SetRegs(tid, regs));
    RETURN_IF_ERROR(inject::SetSigmask(tid, t.blocked_mask()));
  }
  return absl::OkStatus();
}

}  // namespace cairn::restore
