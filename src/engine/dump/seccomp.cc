#include "engine/dump/seccomp.h"

#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/ptrace.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status.h"
#include "engine/proc/stat.h"

namespace cairn::dump {
namespace {

constexpr int kPtraceSeccompGetFilter = 0x420c;
constexpr int kPtraceGetSeccompMetadata = 0x420d;

struct SeccompMetadata {
  uint64_t filter_off;
  uint64_t flags;
};

// Filter `index` of `tid` (0: the most recent). NotFound past the oldest.
absl::StatusOr<image::SeccompFilter> ReadFilter(pid_t tid, unsigned long index) {
  long count = ::ptrace(static_cast<__ptrace_request>(kPtraceSeccompGetFilter), tid, index, nullptr);
  if (count < 0 && errno == ENOENT) return absl::NotFoundError("no such filter");
  if (count < 0) {
    return ErrnoStatus(absl::StrFormat("ptrace(PTRACE_SECCOMP_GET_FILTER) of thread %d, filter %d (it needs "
                                       "CAP_SYS_ADMIN and a kernel with CONFIG_CHECKPOINT_RESTORE)",
                                       tid, index));
  }
  std::string program(static_cast<size_t>(count) * sizeof(sock_filter), '\0');
  if (::ptrace(static_cast<__ptrace_request>(kPtraceSeccompGetFilter), tid, index, program.data()) != count) {
    return ErrnoStatus(absl::StrFormat("ptrace(PTRACE_SECCOMP_GET_FILTER) of thread %d, filter %d", tid, index));
  }
  SeccompMetadata meta{index, 0};
  if (::ptrace(static_cast<__ptrace_request>(kPtraceGetSeccompMetadata), tid, sizeof meta, &meta) < 0) {
    return ErrnoStatus(absl::StrFormat("ptrace(PTRACE_GET_SECCOMP_METADATA) of thread %d, filter %d", tid, index));
  }
  image::SeccompFilter f;
  f.set_program(std::move(program));
  f.set_flags(meta.flags);
  return f;
}

// Every filter of `tid`, oldest first.
absl::StatusOr<std::vector<image::SeccompFilter>> ReadChain(pid_t tid) {
  std::vector<image::SeccompFilter> newest_first;
  for (unsigned long i = 0;; ++i) {
    absl::StatusOr<image::SeccompFilter> f = ReadFilter(tid, i);
    if (absl::IsNotFound(f.status())) break;
    if (!f.ok()) return f.status();
    newest_first.push_back(std::move(*f));
  }
  return std::vector<image::SeccompFilter>(newest_first.rbegin(), newest_first.rend());
}

}  // namespace

bool NotifiesSupervisor(const std::string& program) {
  const size_t n = program.size() / sizeof(sock_filter);
  for (size_t i = 0; i < n; ++i) {
    sock_filter insn;
    std::memcpy(&insn, program.data() + i * sizeof insn, sizeof insn);
    // A return of a constant, or of the accumulator (which could hold anything).
    if (BPF_CLASS(insn.code) != BPF_RET) continue;
    if (BPF_RVAL(insn.code) == BPF_A) return true;
    if ((insn.k & SECCOMP_RET_ACTION_FULL) == SECCOMP_RET_USER_NOTIF) return true;
  }
  return false;
}

absl::Status CaptureSeccompFilters(pid_t pid, int mode, const std::vector<pid_t>& tids, image::Process* out) {
  for (pid_t tid : tids) {
    ASSIGN_OR_RETURN(proc::Status ts, proc::ReadTaskStatus(pid, tid));
    if (ts.seccomp != mode) {
      return absl::UnimplementedError(absl::StrFormat(
          "thread %d of pid %d runs in seccomp mode %d, its main thread in mode %d: cairn restores one chain of "
          "filters per process",
          tid, pid, ts.seccomp, mode));
    }
  }
  if (mode == 0) return absl::OkStatus();
  if (mode == SECCOMP_MODE_STRICT) {
    return absl::UnimplementedError(absl::StrFormat(
        "pid %d runs in strict seccomp mode (only read, write, exit and sigreturn): nothing can be injected into it "
        "to checkpoint it",
        pid));
  }
  ASSIGN_OR_RETURN(std::vector<image::SeccompFilter> chain, ReadChain(pid));
  for (const image::SeccompFilter& f : chain) {
    if (NotifiesSupervisor(f.program())) {
      return absl::UnimplementedError(absl::StrFormat(
          "pid %d runs under a seccomp filter that can hand its system calls to a supervisor (user notification): "
          "the supervisor and its listener are outside the checkpoint",
          pid));
    }
  }
  for (pid_t tid : tids) {
    if (tid == pid) continue;
    ASSIGN_OR_RETURN(std::vector<image::SeccompFilter> other, ReadChain(tid));
    bool same = other.size() == chain.size();
    for (size_t i = 0; same && i < chain.size(); ++i) {
      same = other[i].program() == chain[i].program() && other[i].flags() == chain[i].flags();
    }
    if (!same) {
      return absl::UnimplementedError(absl::StrFormat(
          "thread %d of pid %d runs under other seccomp filters than its main thread: cairn restores one chain per "
          "process",
          tid, pid));
    }
  }
  for (image::SeccompFilter& f : chain) *out->add_seccomp_filters() = std::move(f);
  return absl::OkStatus();
}

}  // namespace cairn::dump
