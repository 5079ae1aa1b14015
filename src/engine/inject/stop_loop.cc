#include "engine/inject/stop_loop.h"

#include <signal.h>
#include <sys/user.h>

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "engine/inject/ptrace.h"

namespace cairn::inject {
namespace {

struct Row {
  uint64_t nr;
  uint64_t args[6];
  uint64_t result;
};
static_assert(sizeof(Row) == 64);

absl::Status RunOnce(Injector& inj, uint64_t loop, uint64_t table, size_t count) {
  pid_t tid = inj.tid();
  ASSIGN_OR_RETURN(user_regs_struct saved, GetRegs(tid));
  ASSIGN_OR_RETURN(uint64_t mask, GetSigmask(tid));
  user_regs_struct regs = saved;
  regs.rip = loop;
  regs.r12 = table;
  regs.r13 = count;
  regs.eflags &= ~uint64_t{0x100};            // no trap flag
  regs.orig_rax = static_cast<uint64_t>(-1);  // no syscall-restart fixup on the way in
  RETURN_IF_ERROR(inj.EnterWindow(saved, mask, regs));
  absl::Status ran = Cont(tid);
  while (ran.ok()) {
    absl::StatusOr<StopInfo> stop = WaitStop(tid);
    if (!stop.ok()) {
      ran = stop.status();
      break;
    }
    if (stop->kind == StopInfo::Kind::kSignalStop && stop->signal == SIGTRAP) break;  // the loop's int3
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
  size_t per_run = std::max<size_t>(1, (scratch.size() - table_off) / sizeof(Row));
  for (size_t at = 0; at < calls.size(); at += per_run) {
    size_t n = std::min(per_run, calls.size() - at);
    std::vector<Row> rows(n);
    for (size_t i = 0; i < n; ++i) {
      rows[i].nr = static_cast<uint64_t>(calls[at + i].nr);
      for (size_t a = 0; a < 6; ++a) rows[i].args[a] = calls[at + i].args[a];
      rows[i].result = static_cast<uint64_t>(-ENOSYS);  // a row the loop never reached
    }
    ASSIGN_OR_RETURN(uint64_t table, scratch.Put(table_off, rows.data(), n * sizeof(Row)));
    RETURN_IF_ERROR(RunOnce(inj, loop, table, n));
    RETURN_IF_ERROR(scratch.Get(table_off, rows.data(), n * sizeof(Row)));
    for (size_t i = 0; i < n; ++i) calls[at + i].result = static_cast<long>(rows[i].result);
  }
  return absl::OkStatus();
}

}  // namespace cairn::inject
