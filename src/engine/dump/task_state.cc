#include "engine/dump/task_state.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <unistd.h>

#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/str_format.h"
#include "common/file_util.h"
#include "common/status.h"
#include "engine/inject/ptrace.h"
#include "engine/proc/fds.h"
#include "engine/proc/stat.h"

namespace cairn::dump {
namespace {

// The kernel's struct sigaction for rt_sigaction on x86-64.
struct KernelSigaction {
  uint64_t handler;
  uint64_t flags;
  uint64_t restorer;
  uint64_t mask;
};

absl::Status CaptureThread(pid_t pid, const FrozenProcess::ThreadState& ts, uint64_t syscall_insn,
                           inject::RemoteScratch& scratch, image::Thread* t) {
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

  inject::Injector inj(tid, syscall_insn);
  RETURN_IF_ERROR(inj.Call("prctl(PR_GET_TID_ADDRESS)", SYS_prctl, PR_GET_TID_ADDRESS, scratch.addr()).status());
  uint64_t tid_addr = 0;
  RETURN_IF_ERROR(scratch.Get(0, &tid_addr, sizeof tid_addr));
  t->set_clear_child_tid(tid_addr);

  RETURN_IF_ERROR(inj.Call("sigaltstack", SYS_sigaltstack, 0, scratch.addr()).status());
  stack_t ss{};
  RETURN_IF_ERROR(scratch.Get(0, &ss, sizeof ss));
  t->mutable_altstack()->set_sp(reinterpret_cast<uint64_t>(ss.ss_sp));
  t->mutable_altstack()->set_flags(ss.ss_flags);
  t->mutable_altstack()->set_size(ss.ss_size);
  return absl::OkStatus();
}

absl::Status CaptureSignals(inject::Injector& inj, inject::RemoteScratch& scratch, pid_t pid,
                            image::Process* out) {
  for (int sig = 1; sig <= 64; ++sig) {
    if (sig == SIGKILL || sig == SIGSTOP) continue;
    RETURN_IF_ERROR(inj.Call(absl::StrCat("rt_sigaction(", sig, ")"), SYS_rt_sigaction, sig, 0,
                             scratch.addr(), 8).status());
    KernelSigaction ka{};
    RETURN_IF_ERROR(scratch.Get(0, &ka, sizeof ka));
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

absl::Status CaptureTimers(inject::Injector& inj, inject::RemoteScratch& scratch, pid_t pid,
                           image::Process* out) {
  for (int which : {ITIMER_REAL, ITIMER_VIRTUAL, ITIMER_PROF}) {
    RETURN_IF_ERROR(inj.Call("getitimer", SYS_getitimer, which, scratch.addr()).status());
    itimerval it{};
    RETURN_IF_ERROR(scratch.Get(0, &it, sizeof it));
    if (it.it_value.tv_sec == 0 && it.it_value.tv_usec == 0 && it.it_interval.tv_sec == 0 &&
        it.it_interval.tv_usec == 0) {
      continue;
    }
    image::Itimer* t = out->add_itimers();
    t->set_which(which);
    t->set_interval_us(it.it_interval.tv_sec * 1000000ULL + it.it_interval.tv_usec);
    t->set_value_us(it.it_value.tv_sec * 1000000ULL + it.it_value.tv_usec);
  }
  ASSIGN_OR_RETURN(std::vector<proc::TimerInfo> timers, proc::ReadTimers(pid));
  for (const proc::TimerInfo& ti : timers) {
    RETURN_IF_ERROR(inj.Call(absl::StrCat("timer_gettime(", ti.id, ")"), SYS_timer_gettime, ti.id,
                             scratch.addr()).status());
    itimerspec its{};
    RETURN_IF_ERROR(scratch.Get(0, &its, sizeof its));
    ASSIGN_OR_RETURN(long overrun, inj.Call("timer_getoverrun", SYS_timer_getoverrun, ti.id));
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
    t->set_overrun(static_cast<int32_t>(overrun));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CaptureTaskState(const FrozenProcess& fp, uint64_t syscall_insn, inject::Injector& inj,
                              inject::RemoteScratch& scratch, image::Process* out) {
  pid_t pid = fp.pid();
  ASSIGN_OR_RETURN(proc::Stat st, proc::ReadStat(pid));
  out->set_pid(pid);
  out->set_ppid(st.ppid);
  out->set_pgid(st.pgrp);
  out->set_sid(st.session);
  out->set_comm(st.comm);
  out->set_stopped(fp.was_stopped());

  for (const auto& ts : fp.threads()) {
    RETURN_IF_ERROR(Annotate(CaptureThread(pid, ts, syscall_insn, scratch, out->add_threads()),
                             absl::StrCat("capture thread ", ts.tid)));
  }
  RETURN_IF_ERROR(CaptureSignals(inj, scratch, pid, out));
  RETURN_IF_ERROR(CaptureTimers(inj, scratch, pid, out));

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
  ASSIGN_OR_RETURN(long brk, inj.Call("brk(0)", SYS_brk, 0));
  mm->set_brk(static_cast<uint64_t>(brk));
  ASSIGN_OR_RETURN(std::string auxv, ReadFile(absl::StrCat("/proc/", pid, "/auxv")));
  mm->set_auxv(std::move(auxv));

  // Small per-process values.
  ASSIGN_OR_RETURN(long mask, inj.Call("umask", SYS_umask, 0));
  RETURN_IF_ERROR(inj.Call("umask", SYS_umask, static_cast<uint64_t>(mask)).status());
  out->set_umask(static_cast<uint32_t>(mask));
  ASSIGN_OR_RETURN(long pers, inj.Call("personality", SYS_personality, 0xffffffffULL));
  out->set_personality(static_cast<uint32_t>(pers));
  RETURN_IF_ERROR(inj.Call("prctl(PR_GET_PDEATHSIG)", SYS_prctl, PR_GET_PDEATHSIG, scratch.addr()).status());
  int pdeathsig = 0;
  RETURN_IF_ERROR(scratch.Get(0, &pdeathsig, sizeof pdeathsig));
  out->set_pdeathsig(pdeathsig);
  ASSIGN_OR_RETURN(long dumpable, inj.Call("prctl(PR_GET_DUMPABLE)", SYS_prctl, PR_GET_DUMPABLE));
  RETURN_IF_ERROR(inj.Call("prctl(PR_GET_CHILD_SUBREAPER)", SYS_prctl, PR_GET_CHILD_SUBREAPER, scratch.addr()).status());
  int subreaper = 0;
  RETURN_IF_ERROR(scratch.Get(0, &subreaper, sizeof subreaper));
  out->set_child_subreaper(subreaper != 0);

  for (int r = 0; r < RLIMIT_NLIMITS; ++r) {
    rlimit rl{};
    if (::prlimit(pid, static_cast<__rlimit_resource>(r), nullptr, &rl) != 0) {
      return ErrnoStatus(absl::StrCat("prlimit pid ", pid, " resource ", r));
    }
    image::Rlimit* l = out->add_rlimits();
    l->set_resource(r);
    l->set_cur(rl.rlim_cur);
    l->set_max(rl.rlim_max);
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

  ASSIGN_OR_RETURN(proc::Status status, proc::ReadStatus(pid));
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
  c->set_dumpable(static_cast<int32_t>(dumpable));
  return absl::OkStatus();
}

}  // namespace cairn::dump
