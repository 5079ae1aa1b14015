#include "engine/dump/freeze.h"

#include <signal.h>
#include <sys/ptrace.h>

#include <algorithm>
#include <cerrno>
#include <set>

#include "common/log.h"
#include "common/status.h"
#include "engine/inject/ptrace.h"
#include "engine/proc/stat.h"
#include "engine/dump/tracker.h"

namespace cairn::dump {

using inject::StopInfo;

namespace {
constexpr long kPtraceSuspendSeccomp = 1 << 21;  // PTRACE_O_SUSPEND_SECCOMP
}  // namespace

absl::StatusOr<FrozenProcess> FrozenProcess::Freeze(pid_t pid, GuardJournal* journal,
                                                   const std::set<pid_t>* seized_already) {
  FrozenProcess fp(pid);
  fp.journal_ = journal;
  if (auto st = proc::ReadStat(pid); st.ok()) fp.was_stopped_ = st->state == 'T';
  std::set<pid_t> seized;
  for (int round = 0;; ++round) {
    if (round > 1000) return absl::UnavailableError(absl::StrCat("pid ", pid, " keeps creating threads; cannot freeze it"));
    ASSIGN_OR_RETURN(std::vector<pid_t> tids, proc::ListTasks(pid));
    bool added = false;
    for (pid_t tid : tids) {
      if (seized.count(tid)) continue;
      bool ours = seized_already != nullptr && seized_already->count(tid) != 0;
      absl::Status s = ours ? absl::OkStatus() : inject::Seize(tid, PTRACE_O_TRACESYSGOOD);
      if (!s.ok()) {
        if (absl::IsNotFound(s)) continue;  // the thread exited between listing and seizing
        // A thread that is exiting (or a zombie) cannot be traced either: skip it.
        auto ts = proc::ReadStat(tid);
        if (!ts.ok() || ts->state == 'Z' || ts->state == 'X') continue;
        if (absl::IsPermissionDenied(s)) {
          return absl::PermissionDeniedError(absl::StrCat(
              "cannot trace pid ", pid, " (ptrace: Operation not permitted): run cairn as root, or as the "
              "process's owner with CAP_SYS_PTRACE and CAP_CHECKPOINT_RESTORE"));
        }
        return s;
      }
      seized.insert(tid);
      fp.threads_.push_back({tid, 0});
      absl::Status is = ours ? absl::OkStatus() : inject::Interrupt(tid);  // (theirs was sent then)
      if (!is.ok()) return is;
      added = true;
    }
    if (!added) break;
  }
  // Collect the stops. A thread that died meanwhile is dropped.
  std::vector<ThreadState> alive;
  for (ThreadState& t : fp.threads_) {
    for (;;) {
      ASSIGN_OR_RETURN(StopInfo stop, inject::WaitStop(t.tid));
      if (stop.kind == StopInfo::Kind::kEventStop && stop.event == PTRACE_EVENT_STOP) {
        // A task in a group stop reports that stop's signal; a running one SIGTRAP. A stop
        // signal let through below also ends in a group stop.
        if (stop.signal != SIGTRAP && (t.tid == pid || fp.stop_signal_ == 0)) {
          fp.was_stopped_ = true;
          fp.stop_signal_ = stop.signal;
        }
        break;
      }
      if (stop.kind == StopInfo::Kind::kExited || stop.kind == StopInfo::Kind::kKilled) {
        t.tid = 0;
        break;
      }
      // A signal-delivery stop before our interrupt was handled: let the signal through
      // (it was going to be delivered anyway) and wait for the interrupt stop.
      RETURN_IF_ERROR(inject::Cont(t.tid, stop.kind == StopInfo::Kind::kSignalStop ? stop.signal : 0));
    }
    if (t.tid != 0) alive.push_back(t);
  }
  fp.threads_ = std::move(alive);
  // The calls the dump makes the threads run are cairn's, not the program's: its seccomp
  // filters (a container runtime's profile denies userfaultfd, which write tracking needs; a
  // strict one could kill the process for a call it never made) are suspended while it is
  // stopped here, and the suspension ends with the trace (a detach, or the dumper's death).
  // Asked for only now that every thread is stopped: the program itself never runs without
  // its filters. Needs CAP_SYS_ADMIN; without it the filters stay (and a call they deny fails).
  for (const ThreadState& t : fp.threads_) {
    if (::ptrace(PTRACE_SETOPTIONS, t.tid, nullptr,
                 reinterpret_cast<void*>(static_cast<long>(PTRACE_O_TRACESYSGOOD | kPtraceSuspendSeccomp))) == 0 ||
        errno == ESRCH) {
      continue;  // suspended, or the thread is gone
    }
    CAIRN_LOG_DEBUG("event=seccomp_not_suspended pid={} errno={}", pid, errno);
    break;  // EPERM (no CAP_SYS_ADMIN) or EINVAL: the same for every thread
  }
  // The leader first. It need not have the lowest id: threads created after the pid
  // numbers wrapped around have lower ones.
  auto leader = std::find_if(fp.threads_.begin(), fp.threads_.end(), [&](const ThreadState& t) { return t.tid == pid; });
  if (leader == fp.threads_.end()) {
    return absl::NotFoundError(absl::StrCat("pid ", pid, " exited while being frozen"));
  }
  std::rotate(fp.threads_.begin(), leader, leader + 1);
  if (journal != nullptr) {
    ASSIGN_OR_RETURN(uint64_t start, ProcessStartTime(pid));
    ASSIGN_OR_RETURN(fp.journal_index_, journal->AddProcess(pid, start));
  }
  for (ThreadState& t : fp.threads_) {
    ASSIGN_OR_RETURN(t.sigmask, inject::GetSigmask(t.tid));
    if (journal == nullptr) continue;
    ASSIGN_OR_RETURN(user_regs_struct regs, inject::GetRegs(t.tid));
    ASSIGN_OR_RETURN(t.journal_slot, journal->AddThread(fp.journal_index_, t.tid, regs, t.sigmask));
  }
  CAIRN_LOG_DEBUG("event=frozen pid={} threads={}", pid, fp.threads_.size());
  return fp;
}

FrozenProcess::FrozenProcess(FrozenProcess&& other) noexcept
    : pid_(other.pid_),
      threads_(std::move(other.threads_)),
      done_(other.done_),
      was_stopped_(other.was_stopped_),
      stop_signal_(other.stop_signal_),
      stop_note_(std::move(other.stop_note_)),
      trampoline_(std::move(other.trampoline_)),
      journal_(other.journal_),
      journal_index_(other.journal_index_) {
  other.done_ = true;
}

FrozenProcess::~FrozenProcess() {
  if (!done_) {
    absl::Status s = Thaw();
    if (!s.ok()) CAIRN_LOG_WARN("event=thaw_failed pid={} error=\"{}\"", pid_, s.ToString());
  }
}

inject::Injector FrozenProcess::injector(pid_t tid) const {
  inject::Injector inj(tid, trampoline_.syscall_insn(), inject::Injector::Drive::kGuarded);
  inj.set_stop_note(stop_note_.get());
  for (const ThreadState& t : threads_) {
    if (t.tid == tid && journal_ != nullptr && t.journal_slot >= 0) inj.set_in_call_flag(journal_->InCallFlag(t.journal_slot));
  }
  return inj;
}

absl::Status FrozenProcess::InstallTrampoline(const inject::TrampolineHome& home) {
  if (trampoline_.installed()) return absl::OkStatus();
  if (journal_ != nullptr) journal_->TrampolineWriting(journal_index_);
  ASSIGN_OR_RETURN(trampoline_, inject::Trampoline::Install(pid_, home));
  if (journal_ != nullptr) journal_->TrampolineAt(journal_index_, trampoline_.addr());
  return absl::OkStatus();
}

absl::Status FrozenProcess::Thaw() {
  done_ = true;
  // Every thread has its own registers and mask back (no injection is under way), so once
  // the trampoline is gone there is nothing of the dump left to undo.
  absl::Status first = trampoline_.Remove();
  if (journal_ != nullptr && first.ok()) journal_->Thawed(journal_index_);
  for (const ThreadState& t : threads_) {
    absl::Status s = inject::Detach(t.tid, 0);
    if (!s.ok() && first.ok() && !absl::IsNotFound(s)) first = s;
  }
  return first;
}

absl::Status FrozenProcess::Kill() {
  RETURN_IF_ERROR(SendKill());
  ReapKilled();
  return absl::OkStatus();
}

absl::Status FrozenProcess::SendKill() {
  done_ = true;
  if (::kill(pid_, SIGKILL) != 0) return ErrnoStatus(absl::StrCat("kill pid ", pid_));
  return absl::OkStatus();
}

void FrozenProcess::ReapKilled() {
  std::vector<pid_t> tids;
  for (const ThreadState& t : threads_) tids.push_back(t.tid);
  inject::ReapKilledThreads(std::move(tids));
}

}  // namespace cairn::dump
