#include "engine/inject/batch.h"

#include <signal.h>
#include <linux/futex.h>
#include <time.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <sys/user.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/log.h"
#include "common/status.h"
#include "common/stop_points.h"
#include "engine/inject/ptrace.h"

namespace cairn::inject {
namespace {

constexpr size_t kEntry = sizeof(BatchRow);
// A batch that has not finished in this long is stuck (its calls must not block).
constexpr auto kBatchTimeout = std::chrono::seconds(10);

}  // namespace

std::vector<BatchRow> BatchRows(std::span<const BatchedCall> calls) {
  std::vector<BatchRow> rows(calls.size());
  for (size_t i = 0; i < calls.size(); ++i) {
    rows[i].nr = static_cast<uint64_t>(calls[i].nr);
    for (size_t a = 0; a < 6; ++a) rows[i].args[a] = calls[i].args[a];
    rows[i].result = static_cast<uint64_t>(-ENOSYS);
  }
  return rows;
}

user_regs_struct LoopRegs(const user_regs_struct& saved, uint64_t code, uint64_t table, size_t count) {
  user_regs_struct regs = saved;
  regs.rip = code;
  regs.r12 = table;
  regs.r13 = count;
  regs.eflags &= ~uint64_t{0x100};  // no trap flag (a program single-stepping itself)
  regs.orig_rax = static_cast<uint64_t>(-1);  // no syscall-restart fixup on the way out
  return regs;
}

absl::Status CallBatch::Run(Injector& inj, RemoteScratch& scratch, size_t table_off, std::span<BatchedCall> calls) {
  if (calls.empty()) return absl::OkStatus();
  if (code_ == 0) {
    for (BatchedCall& c : calls) {
      ASSIGN_OR_RETURN(c.result, inj.Raw(c.nr, c.args));
    }
    return absl::OkStatus();
  }
  // The rows, then one more whose first word the loop sets when every call is done.
  std::vector<BatchRow> rows = BatchRows(calls);
  rows.push_back(BatchRow{});
  ASSIGN_OR_RETURN(uint64_t table, scratch.Put(table_off, rows.data(), rows.size() * kEntry));
  // With a shared scratch area, the loop's done word is waited for with a futex in this
  // process's mapping of it rather than polled.
  const uint32_t* done = scratch.local() == nullptr
                             ? nullptr
                             : reinterpret_cast<const uint32_t*>(scratch.local() + table_off + calls.size() * kEntry);
  RETURN_IF_ERROR(RunLoop(inj, table, calls.size(), done));
  RETURN_IF_ERROR(scratch.Get(table_off, rows.data(), calls.size() * kEntry));
  for (size_t i = 0; i < calls.size(); ++i) calls[i].result = static_cast<long>(rows[i].result);
  return absl::OkStatus();
}

absl::Status CallBatch::RunLoop(const Injector& inj, uint64_t table, size_t count, const uint32_t* done_here) {
  pid_t tid = inj.tid();
  ASSIGN_OR_RETURN(user_regs_struct saved, GetRegs(tid));
  ASSIGN_OR_RETURN(uint64_t mask, GetSigmask(tid));
  RETURN_IF_ERROR(inj.EnterWindow(saved, mask, LoopRegs(saved, code_, table, count)));
  auto t_start = std::chrono::steady_clock::now();
  absl::Status ran = Cont(tid);
  bool resumed = ran.ok();
  int polls = 0;
  FaultPoint("batch");
  // Wait for the done word, watching for a stop of the thread meanwhile (a fault in the
  // loop, the thread killed).
  uint64_t done_at = table + count * kEntry;
  auto deadline = std::chrono::steady_clock::now() + kBatchTimeout;
  bool stopped = false;
  for (int spins = 0; ran.ok(); ++spins) {
    uint64_t done = 0;
    ++polls;
    if (done_here != nullptr) {
      done = __atomic_load_n(done_here, __ATOMIC_ACQUIRE);
    } else {
      ran = ReadRemote(tid, done_at, &done, sizeof done);
    }
    if (!ran.ok() || done == 1) break;
    absl::StatusOr<std::optional<StopInfo>> stop = PollStop(tid);
    if (!stop.ok()) {
      ran = stop.status();
    } else if (stop->has_value()) {
      const StopInfo& s = **stop;
      if (s.kind == StopInfo::Kind::kExited || s.kind == StopInfo::Kind::kKilled) {
        return absl::AbortedError(absl::StrCat("thread ", tid, " died during a batch of injected syscalls"));
      }
      if (s.kind == StopInfo::Kind::kEventStop) {  // a leftover interrupt or a group stop: go on
        ran = Cont(tid);
        continue;
      }
      if (s.kind == StopInfo::Kind::kSignalStop && inj.TakeStopSignal(s.signal)) {
        ran = Cont(tid, s.signal);
        continue;
      }
      // A fault in the loop (its signal is discarded: the thread is resumed later with 0).
      stopped = true;
      ran = absl::InternalError(absl::StrCat("thread ", tid, " stopped by signal ", s.signal,
                                             " during a batch of injected syscalls"));
    } else if (std::chrono::steady_clock::now() > deadline) {
      ran = absl::DeadlineExceededError(absl::StrCat("thread ", tid, " did not finish a batch of injected syscalls"));
    } else if (done_here != nullptr) {
      // Asleep until the loop's wake (a thread that faults or dies instead is seen within
      // the timeout). A blocking wait also lets the scheduler run the thread here at once.
      timespec timeout{0, 2'000'000};
      ::syscall(SYS_futex, done_here, FUTEX_WAIT, 0, &timeout, nullptr, 0);
    } else if (spins > 8) {
      // Sleep, not yield: the thread may have been woken on this CPU, and a yield does not
      // reliably let it run (batches took 2-4 ms with sched_yield).
      timespec pause{0, 5'000};
      ::nanosleep(&pause, nullptr);
    }
  }
  {
    // Take the thread from its sleep (or wherever it is, on an error) into a ptrace stop; a
    // fault's stop is left for it, so that no signal waits to be delivered in the thread.
    // (Not resumed: it is still in its stop, and an interrupt would never be reported.)
    absl::Status interrupted = resumed ? Interrupt(tid) : absl::OkStatus();
    if (interrupted.ok() && resumed && stopped) interrupted = Cont(tid, 0);
    while (interrupted.ok() && resumed) {
      absl::StatusOr<StopInfo> stop = WaitStop(tid);
      if (!stop.ok()) {
        interrupted = stop.status();
        break;
      }
      if (stop->kind == StopInfo::Kind::kExited || stop->kind == StopInfo::Kind::kKilled) {
        return absl::AbortedError(absl::StrCat("thread ", tid, " died during a batch of injected syscalls"));
      }
      if (stop->kind == StopInfo::Kind::kEventStop && stop->event == PTRACE_EVENT_STOP) break;
      interrupted = Cont(tid, 0);  // a fault's stop before the interrupt: discard it and stop
    }
    if (ran.ok()) ran = interrupted;
    if (ran.ok() && interrupted.ok()) {
      absl::StatusOr<user_regs_struct> at = GetRegs(tid);
      if (!at.ok()) {
        ran = at.status();
      } else if (at->rip < done_ || at->rip > wait_ || at->r13 != 0) {
        ran = absl::InternalError(absl::StrFormat("thread %d left a batch of injected syscalls at %#x, not at its end",
                                                  tid, at->rip));
      }
    }
  }
  CAIRN_LOG_DEBUG("event=batch tid={} calls={} polls={} us={:.0f}", tid, count, polls,
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count() * 1e6);
  absl::Status left = inj.LeaveWindow(saved, mask);
  RETURN_IF_ERROR(ran);
  return left;
}

}  // namespace cairn::inject
