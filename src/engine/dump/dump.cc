#include "engine/dump/dump.h"

#include <signal.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <chrono>
#include <deque>
#include <map>
#include <set>

#include "absl/strings/str_format.h"
#include "common/log.h"
#include "common/status.h"
#include "engine/dump/files.h"
#include "engine/dump/freeze.h"
#include "engine/dump/memory.h"
#include "engine/dump/namespaces.h"
#include "engine/dump/sysv_ipc.h"
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

// Captures one frozen process's memory areas and task state into `proc` (not its
// descriptors, which are captured tree-wide). Leaves the process frozen.
absl::Status CaptureProcess(FrozenProcess& fp, image::ImageWriter& writer, const DumpOptions& opts,
                            image::Process* proc, MemoryStats* mem, std::set<uint64_t>* saved_shmem,
                            std::set<std::pair<uint64_t, uint64_t>>* saved_files) {
  pid_t pid = fp.pid();
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

  RETURN_IF_ERROR(SaveDeletedMappedFiles(pid, vmas, writer, saved_files));
  ASSIGN_OR_RETURN(MemoryStats m, DumpPages(pid, vmas, writer, opts.progress, saved_shmem));
  for (auto& v : vmas) *proc->add_vmas() = std::move(v);
  mem->pages += m.pages;
  mem->bytes += m.bytes;
  return absl::OkStatus();
}

// The processes of a checkpoint: frozen ones, and zombies (which cannot be traced).
struct FrozenTree {
  std::vector<FrozenProcess> frozen;   // tree order: parents before children
  std::vector<pid_t> order;            // every pid, frozen or zombie, in tree order
  std::map<pid_t, proc::Stat> zombies;

  absl::Status Thaw() {
    absl::Status first;
    for (auto& fp : frozen) {
      absl::Status s = fp.Thaw();
      if (!s.ok() && first.ok()) first = s;
    }
    return first;
  }
  absl::Status Kill() {
    absl::Status first;
    for (auto& fp : frozen) {
      absl::Status s = fp.SendKill();
      if (!s.ok() && first.ok()) first = s;
    }
    for (auto it = frozen.rbegin(); it != frozen.rend(); ++it) it->ReapKilled();
    return first;
  }
};

// Freezes `root` and, with `tree`, every descendant. A process is frozen before its
// children are listed, so children forked meanwhile are found in the next round.
absl::StatusOr<FrozenTree> FreezeTree(pid_t root, bool tree) {
  FrozenTree ft;
  std::deque<pid_t> queue = {root};
  std::set<pid_t> known = {root};
  while (!queue.empty()) {
    pid_t pid = queue.front();
    queue.pop_front();
    ASSIGN_OR_RETURN(proc::Stat st, proc::ReadStat(pid));
    if (st.state == 'Z' || st.state == 'X') {
      if (pid == root) return CheckTarget(pid);
      ft.zombies[pid] = st;
      ft.order.push_back(pid);
      continue;
    }
    auto fp = FrozenProcess::Freeze(pid);
    if (!fp.ok() && pid != root && absl::IsNotFound(fp.status())) {
      // A child that exited while its parent was being frozen: keep it as the zombie it
      // now is, or drop it if it is gone (auto-reaped).
      auto now = proc::ReadStat(pid);
      if (now.ok() && (now->state == 'Z' || now->state == 'X')) {
        ft.zombies[pid] = *now;
        ft.order.push_back(pid);
      }
      continue;
    }
    if (!fp.ok()) {
      absl::Status thaw = ft.Thaw();
      (void)thaw;
      return fp.status();
    }
    ft.frozen.push_back(std::move(*fp));
    ft.order.push_back(pid);
    if (!tree) continue;
    ASSIGN_OR_RETURN(std::vector<pid_t> children, proc::ListChildren(pid));
    for (pid_t c : children) {
      if (known.insert(c).second) queue.push_back(c);
    }
  }
  return ft;
}

// Lists the tree without stopping it, for checks made before anything is frozen.
absl::StatusOr<std::vector<pid_t>> ListTree(pid_t root, bool tree) {
  std::vector<pid_t> out = {root};
  for (size_t i = 0; tree && i < out.size(); ++i) {
    auto children = proc::ListChildren(out[i]);
    if (!children.ok()) continue;  // exited meanwhile
    out.insert(out.end(), children->begin(), children->end());
  }
  return out;
}

absl::StatusOr<DumpResult> DumpFrozen(const DumpOptions& opts, FrozenTree& ft, image::ImageWriter& writer) {
  DumpResult result;
  image::Checkpoint ckpt;
  ckpt.set_cairn_version(CAIRN_VERSION);
  ckpt.set_job_name(opts.job_name);
  utsname uts{};
  if (::uname(&uts) == 0) {
    ckpt.set_hostname(uts.nodename);
    ckpt.set_kernel(absl::StrCat(uts.release, " ", uts.version));
  }
  ckpt.set_created_unix_ns(std::chrono::duration_cast<std::chrono::nanoseconds>(
                               std::chrono::system_clock::now().time_since_epoch())
                               .count());
  std::map<pid_t, FrozenProcess*> by_pid;
  for (auto& fp : ft.frozen) by_pid[fp.pid()] = &fp;
  std::vector<image::Process*> procs;
  std::vector<pid_t> live;
  std::vector<image::Process*> live_procs;
  MemoryStats mem;
  std::set<uint64_t> saved_shmem;
  std::set<std::pair<uint64_t, uint64_t>> saved_files;
  for (pid_t pid : ft.order) {
    image::Process* p = procs.empty() ? ckpt.mutable_process() : ckpt.add_descendants();
    procs.push_back(p);
    if (auto z = ft.zombies.find(pid); z != ft.zombies.end()) {
      p->set_pid(pid);
      p->set_ppid(z->second.ppid);
      p->set_pgid(z->second.pgrp);
      p->set_sid(z->second.session);
      p->set_comm(z->second.comm);
      p->set_zombie(true);
      p->set_exit_code(static_cast<int32_t>(z->second.exit_code));
      continue;
    }
    RETURN_IF_ERROR(
        Annotate(CaptureProcess(*by_pid[pid], writer, opts, p, &mem, &saved_shmem, &saved_files), absl::StrCat("pid ", pid)));
    live.push_back(pid);
    live_procs.push_back(p);
    result.threads += p->threads_size();
    result.areas += p->vmas_size();
  }
  RETURN_IF_ERROR(CaptureFds(live, FdOptions{opts.tcp_close}, &writer, live_procs, &saved_files));
  ASSIGN_OR_RETURN(bool own_ipc, OwnIpcNamespace(opts.pid));
  if (own_ipc) {
    ckpt.set_own_ipc_ns(true);
    RETURN_IF_ERROR(CaptureSysvIpc(opts.pid, writer, ckpt.mutable_ipc()));
  }
  RETURN_IF_ERROR(LocalizeIds(opts.pid, &ckpt));
  RETURN_IF_ERROR(writer.Commit(ckpt));
  result.processes = static_cast<int>(procs.size());
  result.pages = mem.pages;
  result.bytes = mem.bytes;
  return result;
}

// The checks made before anything is frozen: every process's areas and descriptors can
// be saved. A NotFound error may mean a process exited meanwhile; the caller retries.
absl::Status PrecheckTree(const DumpOptions& opts) {
  ASSIGN_OR_RETURN(std::vector<pid_t> pids, ListTree(opts.pid, opts.tree));
  std::vector<pid_t> live;
  std::map<uint64_t, std::pair<uint64_t, uint64_t>> shmem_at;  // shared anonymous object -> its range
  ASSIGN_OR_RETURN(bool own_ipc, OwnIpcNamespace(opts.pid));
  for (pid_t pid : pids) {
    auto st = proc::ReadStat(pid);
    if (!st.ok() || st->state == 'Z' || st->state == 'X') continue;
    if (pid != opts.pid) {
      absl::Status ok = CheckTarget(pid);
      if (absl::IsFailedPrecondition(ok) || absl::IsNotFound(ok)) continue;  // exited meanwhile
      RETURN_IF_ERROR(ok);
    }
    ASSIGN_OR_RETURN(std::vector<proc::MapEntry> maps, proc::ReadSmaps(pid));
    ASSIGN_OR_RETURN(std::vector<image::Vma> vmas, DescribeAreas(pid, maps));
    for (const image::Vma& v : vmas) {
      if (v.kind() == image::Vma::SYSV_SHM && !own_ipc) {
        return absl::UnimplementedError(absl::StrFormat(
            "pid %d has System V shared memory segment %d attached at %#x-%#x, in the machine's own IPC namespace; "
            "checkpoints keep System V objects only for work in an IPC namespace of its own — start it with "
            "`cairn run`",
            pid, v.shmem_id(), v.start(), v.end()));
      }
      if (v.kind() != image::Vma::SHARED_ANON) continue;
      auto [it, fresh] = shmem_at.emplace(v.shmem_id(), std::make_pair(v.start(), v.end()));
      if (!fresh && it->second != std::make_pair(v.start(), v.end())) {
        return absl::UnimplementedError(absl::StrFormat(
            "pid %d maps shared anonymous memory at %#x-%#x that another process of the tree maps at %#x-%#x; "
            "shared memory mapped at different places is not supported yet",
            pid, v.start(), v.end(), it->second.first, it->second.second));
      }
    }
    live.push_back(pid);
  }
  return CheckFdsSupported(live, FdOptions{opts.tcp_close});
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
  RETURN_IF_ERROR(CheckNamespaces(opts.pid));
  // Refuse what cannot be saved before stopping anything. Processes of a tree may exit
  // while they are looked at: then look again.
  absl::Status checked;
  for (int attempt = 0; attempt < 5; ++attempt) {
    checked = PrecheckTree(opts);
    if (!absl::IsNotFound(checked)) break;
    RETURN_IF_ERROR(CheckTarget(opts.pid));  // the root itself is gone: say so
  }
  RETURN_IF_ERROR(checked);

  ASSIGN_OR_RETURN(std::unique_ptr<image::ImageWriter> writer, image::ImageWriter::Create(opts.dir));
  auto t_freeze = Clock::now();
  ASSIGN_OR_RETURN(FrozenTree ft, FreezeTree(opts.pid, opts.tree));
  absl::StatusOr<DumpResult> result = DumpFrozen(opts, ft, *writer);
  if (!result.ok()) {
    writer->Abort();
    absl::Status thaw = ft.Thaw();
    if (!thaw.ok()) CAIRN_LOG_WARN("event=thaw_failed pid={} error=\"{}\"", opts.pid, thaw.ToString());
    return Annotate(result.status(), absl::StrCat("checkpoint of pid ", opts.pid, " failed (the process",
                                                  opts.tree ? "es were" : " was", " left running)"));
  }
  if (opts.leave_running) {
    RETURN_IF_ERROR(ft.Thaw());
  } else {
    RETURN_IF_ERROR(ft.Kill());
  }
  result->frozen_seconds = Since(t_freeze);
  result->total_seconds = Since(t0);
  CAIRN_LOG_INFO("event=dump pid={} dir={} threads={} pages={} seconds={:.3f}", opts.pid, opts.dir,
                 result->threads, result->pages, result->total_seconds);
  return result;
}

}  // namespace cairn::dump
