#include "engine/dump/task_state.h"

#include <linux/kcmp.h>
#include <linux/membarrier.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <optional>
#include <cstring>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "common/file_util.h"
#include "common/status.h"
#include "engine/dump/seccomp.h"
#include "engine/inject/batch.h"
#include "engine/inject/ptrace.h"
#include "engine/proc/fds.h"
#include "engine/proc/stat.h"

namespace cairn::dump {
namespace {

constexpr int kSignals = 64;
constexpr uint64_t kArchGetXcompPerm = 0x1022;  // asm/prctl.h, Linux 5.16

// Where the batched queries leave their answers in the scratch area; the call table
// (batch.h) sits above them.
constexpr size_t kSigactionsOff = 0;  // kSignals × KernelSigaction
constexpr size_t kItimersOff = 4096;  // 3 × itimerval
constexpr size_t kPdeathsigOff = 4096 + 256;
constexpr size_t kSubreaperOff = 4096 + 264;
constexpr size_t kThreadTidAddrOff = 4096 + 272;
constexpr size_t kThreadAltStackOff = 4096 + 288;  // stack_t
constexpr size_t kXcompPermOff = 4096 + 320;       // uint64_t
constexpr size_t kTimersOff = 8192;                // itimerspec per POSIX timer
constexpr size_t kTimersPerBatch = 128;
constexpr size_t kTableOff = 32 * 1024;
static_assert(kTimersOff + kTimersPerBatch * sizeof(itimerspec) <= kTableOff);
static_assert(kTableOff + 2 * kTimersPerBatch * 64 <= inject::RemoteScratch::kSize);

using inject::KernelSigaction;
static_assert(kSigactionsOff + kSignals * sizeof(KernelSigaction) <= kItimersOff);

constexpr size_t SigactionOff(int sig) { return kSigactionsOff + static_cast<size_t>(sig - 1) * sizeof(KernelSigaction); }

// A batched call's failure, as Injector::Call reports it.
absl::Status Check(const inject::BatchedCall& c, absl::string_view what, pid_t pid) {
  return inject::SyscallResult(what, pid, c.result).status();
}

absl::Status CaptureThread(const FrozenProcess& fp, const FrozenProcess::ThreadState& ts, inject::CallBatch& batch,
                           inject::RemoteScratch& scratch, image::Thread* t) {
  pid_t pid = fp.pid();
  pid_t tid = ts.tid;
  t->set_tid(tid);
  ASSIGN_OR_RETURN(user_regs_struct regs, inject::GetRegs(tid));
  t->mutable_regs()->set_raw(std::string(reinterpret_cast<const char*>(&regs), sizeof regs));
  ASSIGN_OR_RETURN(std::string xstate, inject::GetXstate(tid));
  t->set_xstate(std::move(xstate));
  t->set_blocked_mask(ts.sigmask);
  ASSIGN_OR_RETURN(std::vector<std::string> pending, inject::PeekPendingSignals(tid, /*shared=*/false));
  for (auto& raw : pending) t->add_pending()->set_raw(std::move(raw));
  ASSIGN_OR_RETURN(inject::RseqConfig rseq, inject::GetRseq(tid));
  t->mutable_rseq()->set_addr(rseq.addr);
  t->mutable_rseq()->set_size(rseq.size);
  t->mutable_rseq()->set_signature(rseq.signature);

  uint64_t head = 0;
  size_t len = 0;
  if (::syscall(SYS_get_robust_list, tid, &head, &len) != 0) {
    return ErrnoStatus(absl::StrCat("get_robust_list tid ", tid));
  }
  t->set_robust_list(head);
  t->set_robust_list_len(len);

  ASSIGN_OR_RETURN(std::string comm, ReadFile(absl::StrCat("/proc/", pid, "/task/", tid, "/comm")));
  t->set_comm(std::string(absl::StripTrailingAsciiWhitespace(comm)));

  // The thread's own values: its clear-child-tid address and alternate stack.
  inject::Injector inj = fp.injector(tid);
  std::array<inject::BatchedCall, 2> calls{{
      {SYS_prctl, {PR_GET_TID_ADDRESS, scratch.addr() + kThreadTidAddrOff}},
      {SYS_sigaltstack, {0, scratch.addr() + kThreadAltStackOff}},
  }};
  RETURN_IF_ERROR(batch.Run(inj, scratch, kTableOff, calls));
  RETURN_IF_ERROR(Check(calls[0], "prctl(PR_GET_TID_ADDRESS)", tid));
  RETURN_IF_ERROR(Check(calls[1], "sigaltstack", tid));
  uint64_t tid_addr = 0;
  RETURN_IF_ERROR(scratch.Get(kThreadTidAddrOff, &tid_addr, sizeof tid_addr));
  t->set_clear_child_tid(tid_addr);
  stack_t ss{};
  RETURN_IF_ERROR(scratch.Get(kThreadAltStackOff, &ss, sizeof ss));
  t->mutable_altstack()->set_sp(reinterpret_cast<uint64_t>(ss.ss_sp));
  t->mutable_altstack()->set_flags(ss.ss_flags);
  t->mutable_altstack()->set_size(ss.ss_size);
  return absl::OkStatus();
}

// Guarded injections force no trap, so the SIGTRAP action is read like the others.
absl::Status CaptureSignals(inject::CallBatch& batch, inject::Injector& inj, inject::RemoteScratch& scratch,
                            pid_t pid, image::Process* out) {
  std::array<inject::BatchedCall, kSignals> calls;
  for (int sig = 1; sig <= kSignals; ++sig) {
    calls[sig - 1] = {SYS_rt_sigaction, {static_cast<uint64_t>(sig), 0, scratch.addr() + SigactionOff(sig), 8}};
  }
  RETURN_IF_ERROR(batch.Run(inj, scratch, kTableOff, calls));
  std::array<KernelSigaction, kSignals> actions;
  RETURN_IF_ERROR(scratch.Get(SigactionOff(1), actions.data(), sizeof actions));
  for (int sig = 1; sig <= kSignals; ++sig) {
    RETURN_IF_ERROR(Check(calls[sig - 1], absl::StrCat("rt_sigaction(", sig, ")"), pid));
    const KernelSigaction& ka = actions[sig - 1];
    if (ka.handler == reinterpret_cast<uint64_t>(SIG_DFL) && ka.flags == 0 && ka.mask == 0) continue;
    image::SigAction* a = out->add_sigactions();
    a->set_signo(sig);
    a->set_handler(ka.handler);
    a->set_flags(ka.flags);
    a->set_restorer(ka.restorer);
    a->set_mask(ka.mask);
  }
  ASSIGN_OR_RETURN(std::vector<std::string> shared, inject::PeekPendingSignals(pid, /*shared=*/true));
  for (auto& raw : shared) out->add_shared_pending()->set_raw(std::move(raw));
  return absl::OkStatus();
}

absl::Status CaptureTimers(inject::CallBatch& batch, inject::Injector& inj, inject::RemoteScratch& scratch,
                           pid_t pid, image::Process* out) {
  constexpr std::array<int, 3> kWhich = {ITIMER_REAL, ITIMER_VIRTUAL, ITIMER_PROF};
  std::array<inject::BatchedCall, kWhich.size()> itimer_calls;
  for (size_t i = 0; i < kWhich.size(); ++i) {
    itimer_calls[i] = {SYS_getitimer, {static_cast<uint64_t>(kWhich[i]), scratch.addr() + kItimersOff + i * sizeof(itimerval)}};
  }
  RETURN_IF_ERROR(batch.Run(inj, scratch, kTableOff, itimer_calls));
  std::array<itimerval, kWhich.size()> itimers{};
  RETURN_IF_ERROR(scratch.Get(kItimersOff, itimers.data(), sizeof itimers));
  for (size_t i = 0; i < kWhich.size(); ++i) {
    RETURN_IF_ERROR(Check(itimer_calls[i], "getitimer", pid));
    const itimerval& it = itimers[i];
    if (it.it_value.tv_sec == 0 && it.it_value.tv_usec == 0 && it.it_interval.tv_sec == 0 &&
        it.it_interval.tv_usec == 0) {
      continue;
    }
    image::Itimer* t = out->add_itimers();
    t->set_which(kWhich[i]);
    t->set_interval_us(it.it_interval.tv_sec * 1000000ULL + it.it_interval.tv_usec);
    t->set_value_us(it.it_value.tv_sec * 1000000ULL + it.it_value.tv_usec);
  }

  // POSIX timers, a batch of kTimersPerBatch at a time: the time left and the overrun count.
  ASSIGN_OR_RETURN(std::vector<proc::TimerInfo> timers, proc::ReadTimers(pid));
  for (size_t first = 0; first < timers.size(); first += kTimersPerBatch) {
    size_t n = std::min(kTimersPerBatch, timers.size() - first);
    std::vector<inject::BatchedCall> calls;
    for (size_t k = 0; k < n; ++k) {
      uint64_t id = static_cast<uint64_t>(timers[first + k].id);
      calls.push_back({SYS_timer_gettime, {id, scratch.addr() + kTimersOff + k * sizeof(itimerspec)}});
      calls.push_back({SYS_timer_getoverrun, {id}});
    }
    RETURN_IF_ERROR(batch.Run(inj, scratch, kTableOff, calls));
    std::vector<itimerspec> times(n);
    RETURN_IF_ERROR(scratch.Get(kTimersOff, times.data(), n * sizeof(itimerspec)));
    for (size_t k = 0; k < n; ++k) {
      const proc::TimerInfo& ti = timers[first + k];
      RETURN_IF_ERROR(Check(calls[2 * k], absl::StrCat("timer_gettime(", ti.id, ")"), pid));
      RETURN_IF_ERROR(Check(calls[2 * k + 1], absl::StrCat("timer_getoverrun(", ti.id, ")"), pid));
      const itimerspec& its = times[k];
      image::PosixTimer* t = out->add_posix_timers();
      t->set_id(ti.id);
      t->set_clock(ti.clock);
      if (ti.notify == "none") {
        t->set_notify(SIGEV_NONE);
      } else {
        t->set_notify(ti.to_thread ? SIGEV_THREAD_ID : SIGEV_SIGNAL);
      }
      t->set_signo(ti.signo);
      t->set_sigval(ti.sigval);
      t->set_notify_tid(ti.notify_tid);
      t->set_interval_ns(its.it_interval.tv_sec * 1000000000ULL + its.it_interval.tv_nsec);
      t->set_value_ns(its.it_value.tv_sec * 1000000000ULL + its.it_value.tv_nsec);
      t->set_overrun(static_cast<int32_t>(calls[2 * k + 1].result));
    }
  }
  return absl::OkStatus();
}

// Values the kernel shows (and restore sets) through /proc/PID files.
absl::Status CaptureProcTunables(pid_t pid, image::Process* out) {
  auto read_number = [&](const char* name) -> absl::StatusOr<int64_t> {
    std::string path = absl::StrCat("/proc/", pid, "/", name);
    ASSIGN_OR_RETURN(std::string text, ReadFile(path));
    int64_t v = 0;
    if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(text), &v)) {
      return absl::DataLossError(absl::StrCat(path, ": not a number: '", text, "'"));
    }
    return v;
  };
  ASSIGN_OR_RETURN(int64_t adj, read_number("oom_score_adj"));
  out->set_oom_score_adj(static_cast<int32_t>(adj));
  out->set_has_oom_score_adj(true);
  // Without CONFIG_AUDIT there is no loginuid to keep.
  if (::access(absl::StrCat("/proc/", pid, "/loginuid").c_str(), F_OK) == 0) {
    ASSIGN_OR_RETURN(int64_t loginuid, read_number("loginuid"));
    out->set_has_loginuid(true);
    out->set_loginuid(static_cast<uint32_t>(loginuid));
  }
  return absl::OkStatus();
}

// Everything asked of the process with injected calls, in a few batches (see batch.h).
absl::Status CaptureWithBatch(const FrozenProcess& fp, inject::CallBatch& batch, inject::Injector& inj,
                              inject::RemoteScratch& scratch, int proc_umask, image::Process* out) {
  pid_t pid = fp.pid();
  for (const auto& ts : fp.threads()) {
    RETURN_IF_ERROR(Annotate(CaptureThread(fp, ts, batch, scratch, out->add_threads()),
                             absl::StrCat("capture thread ", ts.tid)));
  }
  RETURN_IF_ERROR(CaptureSignals(batch, inj, scratch, pid, out));
  RETURN_IF_ERROR(CaptureTimers(batch, inj, scratch, pid, out));

  // Small per-process values.
  // The membarrier(2) registrations have no /proc view: an expedited barrier of each kind
  // succeeds only in a process registered for it (EPERM otherwise). With every thread
  // frozen it interrupts no CPU running them.
  std::array<inject::BatchedCall, 9> calls{{
      {SYS_brk, {0}},
      {SYS_personality, {0xffffffffULL}},
      {SYS_prctl, {PR_GET_PDEATHSIG, scratch.addr() + kPdeathsigOff}},
      {SYS_prctl, {PR_GET_DUMPABLE}},
      {SYS_prctl, {PR_GET_CHILD_SUBREAPER, scratch.addr() + kSubreaperOff}},
      {SYS_membarrier, {MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0}},
      {SYS_membarrier, {MEMBARRIER_CMD_PRIVATE_EXPEDITED_SYNC_CORE, 0, 0}},
      {SYS_membarrier, {MEMBARRIER_CMD_PRIVATE_EXPEDITED_RSEQ, 0, 0}},
      {SYS_arch_prctl, {kArchGetXcompPerm, scratch.addr() + kXcompPermOff}},
  }};
  RETURN_IF_ERROR(batch.Run(inj, scratch, kTableOff, calls));
  const char* what[] = {"brk(0)", "personality", "prctl(PR_GET_PDEATHSIG)", "prctl(PR_GET_DUMPABLE)",
                        "prctl(PR_GET_CHILD_SUBREAPER)"};
  for (size_t i = 0; i < std::size(what); ++i) RETURN_IF_ERROR(Check(calls[i], what[i], pid));
  const struct {
    const inject::BatchedCall& probe;
    uint32_t registration;
    const char* name;
  } barriers[] = {
      {calls[5], MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, "PRIVATE_EXPEDITED"},
      {calls[6], MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED_SYNC_CORE, "PRIVATE_EXPEDITED_SYNC_CORE"},
      {calls[7], MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED_RSEQ, "PRIVATE_EXPEDITED_RSEQ"},
  };
  uint32_t registered = 0;
  for (const auto& b : barriers) {
    // EINVAL: the kernel lacks that kind (then nothing can have registered for it).
    if (b.probe.result == 0) {
      registered |= b.registration;
    } else if (b.probe.result != -EPERM && b.probe.result != -EINVAL) {
      return ErrnoStatus(absl::StrFormat("membarrier(%s) in pid %d (to learn its registrations)", b.name, pid),
                         static_cast<int>(-b.probe.result));
    }
  }
  out->set_membarrier_registered(registered);
  if (calls[8].result == 0) {  // EINVAL before Linux 5.16: not known
    uint64_t perm = 0;
    RETURN_IF_ERROR(scratch.Get(kXcompPermOff, &perm, sizeof perm));
    out->set_xcomp_perm(perm);
  }
  out->mutable_mm()->set_brk(static_cast<uint64_t>(calls[0].result));
  out->set_personality(static_cast<uint32_t>(calls[1].result));
  int pdeathsig = 0, subreaper = 0;
  RETURN_IF_ERROR(scratch.Get(kPdeathsigOff, &pdeathsig, sizeof pdeathsig));
  RETURN_IF_ERROR(scratch.Get(kSubreaperOff, &subreaper, sizeof subreaper));
  out->set_pdeathsig(pdeathsig);
  out->mutable_creds()->set_dumpable(static_cast<int32_t>(calls[3].result));
  out->set_child_subreaper(subreaper != 0);
  if (proc_umask >= 0) {
    out->set_umask(static_cast<uint32_t>(proc_umask));
  } else {  // a kernel older than 4.7 does not show it: read it back and set it again
    ASSIGN_OR_RETURN(long mask, inj.Call("umask", SYS_umask, 0));
    RETURN_IF_ERROR(inj.Call("umask", SYS_umask, static_cast<uint64_t>(mask)).status());
    out->set_umask(static_cast<uint32_t>(mask));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CaptureTaskState(const FrozenProcess& fp, inject::Injector& inj, inject::RemoteScratch& scratch,
                              image::Process* out) {
  pid_t pid = fp.pid();
  ASSIGN_OR_RETURN(proc::Stat st, proc::ReadStat(pid));
  out->set_pid(pid);
  out->set_ppid(st.ppid);
  out->set_pgid(st.pgrp);
  out->set_sid(st.session);
  out->set_comm(st.comm);
  if (st.tty_nr != 0) out->set_ctty(proc::TtyDevice(st.tty_nr));
  if (st.tty_nr != 0 && st.session == pid && st.tpgid > 0) out->set_ctty_foreground(static_cast<int32_t>(st.tpgid));
  int since = fp.stop_signal_since_frozen();  // a SIGSTOP let through while frozen
  out->set_stopped(fp.was_stopped() || since != 0);
  // Checked by the dump beforehand (CheckSharing): a root sharing with a parent outside the
  // checkpoint is refused, so only a process of the tree can share with its parent here.
  out->set_shares_files_with_parent(::syscall(SYS_kcmp, pid, st.ppid, KCMP_FILES, 0, 0) == 0);
  out->set_shares_fs_with_parent(::syscall(SYS_kcmp, pid, st.ppid, KCMP_FS, 0, 0) == 0);
  if (fp.was_stopped()) out->set_stop_signal(fp.stop_signal() != 0 ? fp.stop_signal() : SIGSTOP);
  if (!fp.was_stopped() && since != 0) out->set_stop_signal(since);

  ASSIGN_OR_RETURN(proc::Status status, proc::ReadStatus(pid));
  out->set_thp_disabled(status.thp_enabled == 0);
  RETURN_IF_ERROR(CaptureProcTunables(pid, out));
  inject::CallBatch batch = fp.batch();
  RETURN_IF_ERROR(CaptureWithBatch(fp, batch, inj, scratch, status.umask, out));

  // Process (mm) layout.
  image::MmLayout* mm = out->mutable_mm();
  mm->set_start_code(st.start_code);
  mm->set_end_code(st.end_code);
  mm->set_start_data(st.start_data);
  mm->set_end_data(st.end_data);
  mm->set_start_brk(st.start_brk);
  mm->set_start_stack(st.start_stack);
  mm->set_arg_start(st.arg_start);
  mm->set_arg_end(st.arg_end);
  mm->set_env_start(st.env_start);
  mm->set_env_end(st.env_end);
  ASSIGN_OR_RETURN(std::string auxv, ReadFile(absl::StrCat("/proc/", pid, "/auxv")));
  mm->set_auxv(std::move(auxv));

  // From /proc/PID/limits: prlimit(2) on a process with other uids needs CAP_SYS_RESOURCE.
  ASSIGN_OR_RETURN(std::vector<proc::Limit> limits, proc::ReadLimits(pid));
  if (limits.size() < RLIMIT_NLIMITS) {
    return absl::DataLossError(absl::StrCat("/proc/", pid, "/limits shows ", limits.size(), " limits, want ",
                                            static_cast<int>(RLIMIT_NLIMITS)));
  }
  for (int r = 0; r < RLIMIT_NLIMITS; ++r) {
    image::Rlimit* l = out->add_rlimits();
    l->set_resource(r);
    l->set_cur(limits[static_cast<size_t>(r)].cur);
    l->set_max(limits[static_cast<size_t>(r)].max);
  }

  char buf[4096];
  for (const char* what : {"cwd", "root", "exe"}) {
    std::string link = absl::StrCat("/proc/", pid, "/", what);
    ssize_t n = ::readlink(link.c_str(), buf, sizeof buf);
    if (n < 0) return ErrnoStatus("readlink " + link);
    std::string target(buf, static_cast<size_t>(n));
    if (absl::string_view(what) == "cwd") out->set_cwd(target);
    if (absl::string_view(what) == "root") out->set_root(target);
    if (absl::string_view(what) == "exe") {
      mm->set_exe(target);
      struct stat es {};
      if (::stat(link.c_str(), &es) != 0) return ErrnoStatus("stat " + link);
      mm->mutable_exe_id()->set_dev(es.st_dev);
      mm->mutable_exe_id()->set_ino(es.st_ino);
      mm->mutable_exe_id()->set_size(static_cast<uint64_t>(es.st_size));
      mm->mutable_exe_id()->set_mtime_ns(es.st_mtim.tv_sec * 1000000000LL + es.st_mtim.tv_nsec);
    }
  }

  image::Creds* c = out->mutable_creds();
  for (uint32_t u : status.uid) c->add_uids(u);
  for (uint32_t g : status.gid) c->add_gids(g);
  for (uint32_t g : status.groups) c->add_groups(g);
  c->set_cap_inh(status.cap_inh);
  c->set_cap_prm(status.cap_prm);
  c->set_cap_eff(status.cap_eff);
  c->set_cap_bnd(status.cap_bnd);
  c->set_cap_amb(status.cap_amb);
  c->set_no_new_privs(status.no_new_privs);
  std::vector<pid_t> tids;
  for (const auto& t : fp.threads()) tids.push_back(t.tid);
  return CaptureSeccompFilters(pid, status.seccomp, tids, out);
}

}  // namespace cairn::dump
