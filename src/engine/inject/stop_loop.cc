#include "engine/inject/stop_loop.h"

#include <signal.h>
#include <sys/user.h>

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "common/status.h"
#include "engine/inject/ptrace.h"

namespace cairn::inject {
namespace {

absl::Status RunOnce(Injector& inj, uint64_t loop, uint64_t table, size_t count) {
  pid_t tid = inj.tid();
  ASSIGN_OR_RETURN(user_regs_struct saved, GetRegs(tid));
  ASSIGN_OR_RETURN(uint64_t mask, GetSigmask(tid));
  RETURN_IF_ERROR(inj.EnterWindow(saved, mask, LoopRegs(saved, loop, table, count)));
  absl::Status ran = Cont(tid);
  while (ran.ok()) {
    absl::StatusOr<StopInfo> stop = WaitStop(tid);
    if (!stop.ok()) {
      ran = stop.status();
      break;
    }
    if (stop->kind == StopInfo::Kind::kSignalStop && stop->signal == SIGTRAP) {
      // The loop's int3, once every row is done (r13 counted down), or a trap from elsewhere.
      absl::StatusOr<user_regs_struct> at = GetRegs(tid);
      if (!at.ok()) {
        ran = at.status();
      } else if (at->r13 != 0 || at->rip != loop + sizeof kStopLoop) {
        ran = absl::InternalError(absl::StrCat("thread ", tid, " trapped in a loop of injected calls with ", at->r13,
                                               " calls left"));
      }
      break;
    }
    if (stop->kind == StopInfo::Kind::kExited || stop->kind == StopInfo::Kind::kKilled) {
      return absl::AbortedError(absl::StrCat("thread ", tid, " died in a loop of injected calls"));
    }
    ran = absl::InternalError(absl::StrCat("thread ", tid, " stopped in a loop of injected calls (",
                                           stop->kind == StopInfo::Kind::kSignalStop ? "signal " : "event ",
                                           stop->kind == StopInfo::Kind::kSignalStop ? stop->signal : stop->event,
                                           ") instead of at its end"));
  }
  absl::Status left = inj.LeaveWindow(saved, mask);
  RETURN_IF_ERROR(ran);
  return left;
}

}  // namespace

absl::Status RunStopLoop(Injector& inj, RemoteScratch& scratch, uint64_t loop, size_t table_off,
                         std::span<BatchedCall> calls) {
  size_t per_run = std::max<size_t>(1, (scratch.size() - table_off) / sizeof(BatchRow));
  for (size_t at = 0; at < calls.size(); at += per_run) {
    size_t n = std::min(per_run, calls.size() - at);
    std::vector<BatchRow> rows = BatchRows(calls.subspan(at, n));
    ASSIGN_OR_RETURN(uint64_t table, scratch.Put(table_off, rows.data(), n * sizeof(BatchRow)));
    RETURN_IF_ERROR(RunOnce(inj, loop, table, n));
    RETURN_IF_ERROR(scratch.Get(table_off, rows.data(), n * sizeof(BatchRow)));
    for (size_t i = 0; i < n; ++i) calls[at + i].result = static_cast<long>(rows[i].result);
  }
  return absl::OkStatus();
}

absl::Status RunCalls(Injector& inj, RemoteScratch& scratch, uint64_t loop, std::span<BatchedCall> calls,
                      const std::function<std::string(size_t)>& what, bool repeatable, size_t table_off) {
  if (calls.empty()) return absl::OkStatus();
  absl::Status looped = RunStopLoop(inj, scratch, loop, table_off, calls);
  if (!looped.ok()) {
    CAIRN_LOG_WARN("event=stop_loop_failed pid={} repeat={} error=\"{}\"", inj.tid(), repeatable, looped.ToString());
    if (!repeatable) return Annotate(looped, absl::StrCat("a loop of ", calls.size(), " injected calls, from ", what(0)));
  }
  for (size_t i = 0; i < calls.size(); ++i) {
    if (!looped.ok()) {
      ASSIGN_OR_RETURN(calls[i].result, inj.Raw(calls[i].nr, calls[i].args));
    }
    if (calls[i].result < 0 && calls[i].result > -4096) {
      RETURN_IF_ERROR(SyscallResult(what(i), inj.tid(), calls[i].result).status());
    }
  }
  return absl::OkStatus();
}

}  // namespace cairn::inject
