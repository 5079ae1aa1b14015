#include "engine/inject/batch.h"

#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/user.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "common/status.h"
#include "engine/inject/ptrace.h"

namespace cairn::inject {
namespace {

constexpr size_t kPage = 4096;
constexpr size_t kEntry = 64;  // one table row: nr, six arguments, result

// The loop, with the table's address in r12 and the number of rows in r13:
//   loop: mov rax,[r12]; mov rdi,[r12+8]; mov rsi,[r12+16]; mov rdx,[r12+24]
//         mov r10,[r12+32]; mov r8,[r12+40]; mov r9,[r12+48]; syscall
//         mov [r12+56],rax; add r12,64; dec r13; jnz loop; int3
constexpr unsigned char kLoop[] = {
    0x49, 0x8b, 0x04, 0x24,        // mov rax, [r12]
    0x49, 0x8b, 0x7c, 0x24, 0x08,  // mov rdi, [r12+0x8]
    0x49, 0x8b, 0x74, 0x24, 0x10,  // mov rsi, [r12+0x10]
    0x49, 0x8b, 0x54, 0x24, 0x18,  // mov rdx, [r12+0x18]
    0x4d, 0x8b, 0x54, 0x24, 0x20,  // mov r10, [r12+0x20]
    0x4d, 0x8b, 0x44, 0x24, 0x28,  // mov r8, [r12+0x28]
    0x4d, 0x8b, 0x4c, 0x24, 0x30,  // mov r9, [r12+0x30]
    0x0f, 0x05,                    // syscall
    0x49, 0x89, 0x44, 0x24, 0x38,  // mov [r12+0x38], rax
    0x49, 0x83, 0xc4, 0x40,        // add r12, 0x40
    0x49, 0xff, 0xcd,              // dec r13
    0x75, 0xce,                    // jnz loop
    0xcc,                          // int3
};

struct Row {
  uint64_t nr;
  uint64_t args[6];
  uint64_t result;
};
static_assert(sizeof(Row) == kEntry);

}  // namespace

absl::StatusOr<CallBatch> CallBatch::Create(Injector& inj) {
  // Mapped read+exec only; the code goes in through /proc/PID/mem (WriteRemote falls back
  // to it), so the process never has a page both writable and executable.
  absl::StatusOr<long> addr = inj.Raw(SYS_mmap, {0, kPage, PROT_READ | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS,
                                                 static_cast<uint64_t>(-1), 0});
  RETURN_IF_ERROR(addr.status());
  if (*addr < 0 && *addr > -4096) {
    CAIRN_LOG_DEBUG("event=call_batch_unavailable tid={} errno={}", inj.tid(), -*addr);
    return CallBatch(0);
  }
  CallBatch batch(static_cast<uint64_t>(*addr));
  absl::Status put = WriteRemote(inj.tid(), batch.code_, kLoop, sizeof kLoop);
  if (!put.ok()) {
    // /proc/PID/mem may refuse to write a read-only page (proc_mem.force_override=never, a
    // security module): call by call then.
    CAIRN_LOG_DEBUG("event=call_batch_unavailable tid={} why=\"{}\"", inj.tid(), std::string(put.message()));
    RETURN_IF_ERROR(batch.Unmap(inj));
    return CallBatch(0);
  }
  return batch;
}

absl::Status CallBatch::Run(Injector& inj, RemoteScratch& scratch, size_t table_off, std::span<BatchedCall> calls) {
  if (calls.empty()) return absl::OkStatus();
  if (code_ == 0) {
    for (BatchedCall& c : calls) {
      ASSIGN_OR_RETURN(c.result, inj.Raw(c.nr, c.args));
    }
    return absl::OkStatus();
  }
  std::vector<Row> rows(calls.size());
  for (size_t i = 0; i < calls.size(); ++i) {
    rows[i].nr = static_cast<uint64_t>(calls[i].nr);
    for (size_t a = 0; a < 6; ++a) rows[i].args[a] = calls[i].args[a];
    rows[i].result = static_cast<uint64_t>(-ENOSYS);  // a row the loop never reached
  }
  ASSIGN_OR_RETURN(uint64_t table, scratch.Put(table_off, rows.data(), rows.size() * kEntry));
  RETURN_IF_ERROR(RunLoop(inj, table, rows.size()));
  RETURN_IF_ERROR(scratch.Get(table_off, rows.data(), rows.size() * kEntry));
  for (size_t i = 0; i < calls.size(); ++i) calls[i].result = static_cast<long>(rows[i].result);
  return absl::OkStatus();
}

absl::Status CallBatch::RunLoop(Injector& inj, uint64_t table, size_t count) {
  pid_t tid = inj.tid();
  ASSIGN_OR_RETURN(user_regs_struct saved, GetRegs(tid));
  user_regs_struct regs = saved;
  regs.rip = code_;
  regs.r12 = table;
  regs.r13 = count;
  regs.eflags &= ~uint64_t{0x100};  // no trap flag (a program single-stepping itself): run to the int3
  regs.orig_rax = static_cast<uint64_t>(-1);  // no syscall-restart fixup on the way out
  RETURN_IF_ERROR(SetRegs(tid, regs));
  absl::Status ran = Cont(tid);
  while (ran.ok()) {
    absl::StatusOr<StopInfo> stop = WaitStop(tid);
    if (!stop.ok()) {
      ran = stop.status();
      break;
    }
    if (stop->kind == StopInfo::Kind::kSignalStop && stop->signal == SIGTRAP) {
      // The loop's int3 leaves rip just past it with every row done; anything else is a
      // SIGTRAP from outside, taken while the loop ran.
      absl::StatusOr<user_regs_struct> at = GetRegs(tid);
      if (at.ok() && at->rip == code_ + sizeof kLoop && at->r13 == 0) break;
      ran = at.ok() ? absl::InternalError(absl::StrCat("thread ", tid, " took a SIGTRAP from outside during a batch of "
                                                       "injected syscalls; try again"))
                    : at.status();
      break;
    }
    if (stop->kind == StopInfo::Kind::kExited || stop->kind == StopInfo::Kind::kKilled) {
      return absl::AbortedError(absl::StrCat("thread ", tid, " died during a batch of injected syscalls"));
    }
    if (stop->kind == StopInfo::Kind::kEventStop) {  // a leftover interrupt: go on
      ran = Cont(tid);
      continue;
    }
    // A fault in the loop (its signal is discarded: the thread is resumed later with 0).
    ran = absl::InternalError(absl::StrCat("thread ", tid, " stopped by signal ", stop->signal,
                                           " during a batch of injected syscalls (signals must be blocked while "
                                           "injecting)"));
  }
  // Put the thread back as it was on every path.
  absl::Status restored = SetRegs(tid, saved);
  RETURN_IF_ERROR(ran);
  return restored;
}

absl::Status CallBatch::Unmap(Injector& inj) {
  if (code_ == 0) return absl::OkStatus();
  uint64_t code = code_;
  code_ = 0;
  return inj.Call("munmap call batch", SYS_munmap, code, kPage).status();
}

}  // namespace cairn::inject
