#include "engine/dump/dump.h"

#include <signal.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <chrono>

#include "absl/strings/str_format.h"
#include "common/log.h"
#include "common/status.h"
#include "engine/dump/files.h"
#include "engine/dump/freeze.h"
#include "engine/dump/memory.h"
#include "engine/dump/task_state.h"
#include "engine/image/format.h"
#include "engine/image/image.h"
#include "engine/inject/injector.h"
#include "engine/proc/maps.h"
#include "engine/proc/stat.h"

namespace cairn::dump {
namespace {

using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

absl::StatusOr<uint64_t> VdsoChecksum(pid_t pid, const std::vector<image::Vma>& vmas, uint64_t* start,
                                      uint64_t* end) {
  for (const image::Vma& v : vmas) {
    if (v.kind() != image::Vma::VDSO) continue;
    std::string bytes(v.end() - v.start(), '\0');
    RETURN_IF_ERROR(inject::ReadRemote(pid, v.start(), bytes.data(), bytes.size()));
    *start = v.start();
    *end = v.end();
    return image::Checksum(bytes.data(), bytes.size());
  }
  return absl::FailedPreconditionError(absl::StrCat("pid ", pid, " has no vDSO; cannot inject syscalls"));
}

// Everything that happens while the process is frozen. Leaves the process frozen.
absl::StatusOr<DumpResult> DumpFrozen(const DumpOptions& opts, FrozenProcess& fp, image::ImageWriter& writer) {
  pid_t pid = opts.pid;
  DumpResult result;
  image::Checkpoint ckpt;
  ckpt.set_cairn_version(CAIRN_VERSION);
  utsname uts{};
  if (::uname(&uts) == 0) {
    ckpt.set_hostname(uts.nodename);
    ckpt.set_kernel(absl::StrCat(uts.release, " ", uts.version));
  }
  ckpt.set_created_unix_ns(std::chrono::duration_cast<std::chrono::nanoseconds>(
                               std::chrono::system_clock::now().time_since_epoch())
                               .count());
  image::Process* proc = ckpt.mutable_process();

  // Memory areas are read before the engine maps its scratch area into the process.
  ASSIGN_OR_RETURN(std::vector<proc::MapEntry> maps, proc::ReadSmaps(pid));
  ASSIGN_OR_RETURN(std::vector<image::Vma> vmas, DescribeAreas(pid, maps));
  uint64_t vdso_start = 0, vdso_end = 0;
  ASSIGN_OR_RETURN(uint64_t vdso_sum, VdsoChecksum(pid, vmas, &vdso_start, &vdso_end));
  proc->set_vdso_xxh3(vdso_sum);
  ASSIGN_OR_RETURN(uint64_t syscall_insn, inject::FindSyscallInsn(pid, vdso_start, vdso_end));

  inject::Injector inj(pid, syscall_insn);
  ASSIGN_OR_RETURN(inject::RemoteScratch scratch, inject::RemoteScratch::Map(inj));
  absl::Status st = CaptureTaskState(fp, syscall_insn, inj, scratch, proc);
  absl::Status unmap = scratch.Unmap(inj);
  RETURN_IF_ERROR(st);
  RETURN_IF_ERROR(unmap);

  RETURN_IF_ERROR(CaptureFds(pid, &writer, proc));
  ASSIGN_OR_RETURN(MemoryStats mem, DumpPages(pid, vmas, writer, opts.progress));
  for (auto& v : vmas) *proc->add_vmas() = std::move(v);

  RETURN_IF_ERROR(writer.Commit(ckpt));
  result.threads = proc->threads_size();
  result.areas = proc->vmas_size();
  result.pages = mem.pages;
  result.bytes = mem.bytes;
  return result;
}

}  // namespace

absl::Status CheckTarget(pid_t pid) {
  if (pid <= 0) return absl::InvalidArgumentError(absl::StrCat("invalid pid ", pid));
  if (pid == ::getpid()) {
    return absl::InvalidArgumentError(absl::StrCat("pid ", pid, " is cairn itself; it cannot checkpoint itself"));
  }
  auto st = proc::ReadStat(pid);
  if (!st.ok()) {
    if (absl::IsNotFound(st.status())) {
      return absl::NotFoundError(absl::StrCat("no process with pid ", pid));
    }
    return st.status();
  }
  if (st->IsKernelThread()) {
    return absl::InvalidArgumentError(
        absl::StrCat("pid ", pid, " (", st->comm, ") is a kernel thread; only user processes can be checkpointed"));
  }
  if (st->state == 'Z' || st->state == 'X') {
    return absl::FailedPreconditionError(absl::StrCat(
        "pid ", pid, " (", st->comm, ") is a zombie: it has exited and only waits for its parent to reap it; "
        "there is nothing to checkpoint"));
  }
  ASSIGN_OR_RETURN(proc::Status status, proc::ReadStatus(pid));
  if (status.seccomp != 0) {
    return absl::UnimplementedError(absl::StrCat(
        "pid ", pid, " (", st->comm, ") runs under a seccomp filter; such processes are not supported yet"));
  }
  ASSIGN_OR_RETURN(std::vector<pid_t> tids, proc::ListTasks(pid));
  if (tids.empty() || tids.front() > pid || std::find(tids.begin(), tids.end(), pid) == tids.end()) {
    return absl::InvalidArgumentError(absl::StrCat("pid ", pid, " is a thread, not a process; pass its process id"));
  }
  return absl::OkStatus();
}

absl::StatusOr<DumpResult> Dump(const DumpOptions& opts) {
  auto t0 = Clock::now();
  RETURN_IF_ERROR(CheckTarget(opts.pid));
  // Refuse what cannot be saved before stopping the process at all.
  ASSIGN_OR_RETURN(std::vector<proc::MapEntry> maps, proc::ReadSmaps(opts.pid));
  RETURN_IF_ERROR(DescribeAreas(opts.pid, maps).status());
  RETURN_IF_ERROR(CheckFdsSupported(opts.pid));

  ASSIGN_OR_RETURN(std::unique_ptr<image::ImageWriter> writer, image::ImageWriter::Create(opts.dir));
  auto t_freeze = Clock::now();
  ASSIGN_OR_RETURN(FrozenProcess fp, FrozenProcess::Freeze(opts.pid));
  absl::StatusOr<DumpResult> result = DumpFrozen(opts, fp, *writer);
  if (!result.ok()) {
    writer->Abort();
    absl::Status thaw = fp.Thaw();
    if (!thaw.ok()) CAIRN_LOG_WARN("event=thaw_failed pid={} error=\"{}\"", opts.pid, thaw.ToString());
    return Annotate(result.status(), absl::StrCat("checkpoint of pid ", opts.pid, " failed (the process was left running)"));
  }
  if (opts.leave_running) {
    RETURN_IF_ERROR(fp.Thaw());
  } else {
    RETURN_IF_ERROR(fp.Kill());
  }
  result->frozen_seconds = Since(t_freeze);
  result->total_seconds = Since(t0);
  CAIRN_LOG_INFO("event=dump pid={} dir={} threads={} pages={} seconds={:.3f}", opts.pid, opts.dir,
                 result->threads, result->pages, result->total_seconds);
  return result;
}

}  // namespace cairn::dump
