#include "engine/restore/restore.h"

#include <linux/sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <map>
#include <thread>

#include "absl/strings/str_format.h"
#include "common/file_util.h"
#include "common/log.h"
#include "common/status.h"
#include "engine/image/image.h"
#include "engine/inject/injector.h"
#include "engine/inject/ptrace.h"
#include "engine/proc/maps.h"
#include "engine/proc/stat.h"
#include "engine/restore/files.h"
#include "engine/restore/memory.h"
#include "engine/restore/task_state.h"

namespace cairn::restore {
namespace {

using Clock = std::chrono::steady_clock;

// The restorer's work area in the new task: one page holding a `syscall` instruction,
// then scratch space for syscall arguments.
constexpr uint64_t kWorkAreaSize = 4096 + inject::RemoteScratch::kSize;

// Runs in the new task, a copy of the restorer: raw syscalls only (no locks, no malloc).
[[noreturn]] void ChildMain(uint64_t work_area) {
  ::syscall(SYS_prctl, PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
  void* p = reinterpret_cast<void*>(
      ::syscall(SYS_mmap, work_area, kWorkAreaSize, PROT_READ | PROT_WRITE | PROT_EXEC,
                MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0));
  if (p != reinterpret_cast<void*>(work_area)) ::syscall(SYS_exit_group, 120);
  auto* code = static_cast<unsigned char*>(p);
  code[0] = 0x0f;  // syscall
  code[1] = 0x05;
  code[2] = 0xcc;  // int3, never reached: the tracer single-steps
  ::syscall(SYS_ptrace, PTRACE_TRACEME, 0, 0, 0);
  ::syscall(SYS_kill, ::syscall(SYS_getpid), SIGSTOP);
  ::syscall(SYS_exit_group, 121);
  __builtin_unreachable();
}

absl::Status CheckIdsFree(const image::Process& proc) {
  for (const image::Thread& t : proc.threads()) {
    auto st = proc::ReadStat(t.tid());
    // A process killed by `cairn dump` stays a zombie until its parent reaps it; give
    // the parent a moment, as a restore right after a dump is the common case.
    for (int i = 0; i < 40 && st.ok() && st->state == 'Z'; ++i) {
      ::usleep(50000);
      st = proc::ReadStat(t.tid());
    }
    if (st.ok() && st->state == 'Z') {
      return absl::AlreadyExistsError(absl::StrFormat(
          "pid %d is still taken by the exited process '%s', which its parent (pid %d) has not reaped; the "
          "parent must wait() for it before the checkpoint can be restored with this pid",
          t.tid(), st->comm, st->ppid));
    }
    if (st.ok()) {
      return absl::AlreadyExistsError(absl::StrFormat(
          "%s %d is in use by process '%s' (pid %d): it must be free to restore the checkpoint; stop that process "
          "or restore on another machine",
          t.tid() == proc.pid() ? "pid" : "thread id", t.tid(), st->comm, st->pid));
    }
  }
  return absl::OkStatus();
}

// A half-built task: killed and reaped unless released.
class Child {
 public:
  explicit Child(pid_t pid) : pid_(pid) {}
  ~Child() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      int status;
      while (::waitpid(pid_, &status, __WALL) < 0 && errno == EINTR) {
      }
    }
  }
  void Release() { pid_ = -1; }

 private:
  pid_t pid_;
};

absl::Status Build(const image::ImageReader& img, const RestoreOptions& opts, uint64_t work_area,
                   std::vector<std::string>* temp_paths) {
  const image::Process& proc = img.meta().process();
  pid_t pid = proc.pid();
  inject::Injector inj(pid, work_area);
  inject::RemoteScratch scratch(pid, work_area + 4096, inject::RemoteScratch::kSize, /*owned=*/false);

  // The copy of the restorer registered glibc's rseq area; drop it before its memory goes.
  ASSIGN_OR_RETURN(inject::RseqConfig rseq, inject::GetRseq(pid));
  if (rseq.addr != 0) {
    RETURN_IF_ERROR(inj.Call("rseq unregister", SYS_rseq, rseq.addr, rseq.size, 1, rseq.signature).status());
  }
  RETURN_IF_ERROR(inj.Call("close_range", SYS_close_range, 0, ~0U, 0).status());
  RETURN_IF_ERROR(ReplaceAddressSpace(inj, proc, {work_area, work_area + kWorkAreaSize}));
  CAIRN_LOG_DEBUG("event=restore_stage stage=address_space_replaced pid={}", pid);
  int threads = opts.fill_threads > 0 ? opts.fill_threads
                                      : std::min(8, static_cast<int>(std::thread::hardware_concurrency()) + 1);
  RETURN_IF_ERROR(MapAndFill(inj, scratch, img, threads));
  CAIRN_LOG_DEBUG("event=restore_stage stage=memory_filled pid={}", pid);
  RETURN_IF_ERROR(RestoreProcessState(inj, scratch, proc));
  RETURN_IF_ERROR(RestoreFds(inj, scratch, img, temp_paths));
  std::map<pid_t, inject::Injector> injectors;
  RETURN_IF_ERROR(CreateThreads(inj, scratch, proc, &injectors));
  RETURN_IF_ERROR(RestoreThreadStates(injectors, scratch, proc));
  // The last injected call removes the work area itself: single-stepping stops at the
  // syscall's exit, before the (now unmapped) next instruction would run.
  RETURN_IF_ERROR(inj.Call("munmap work area", SYS_munmap, work_area, kWorkAreaSize).status());
  CAIRN_LOG_DEBUG("event=restore_stage stage=state_restored pid={}", pid);
  return SetFinalRegisters(proc);
}

}  // namespace

absl::StatusOr<RestoreResult> Restore(const RestoreOptions& opts) {
  ASSIGN_OR_RETURN(std::unique_ptr<image::ImageReader> img, image::ImageReader::Open(opts.dir));
  const image::Process& proc = img->meta().process();
  if (proc.threads_size() == 0 || proc.threads(0).tid() != proc.pid()) {
    return absl::DataLossError(opts.dir + ": the checkpoint has no main thread (corrupt image)");
  }
  RETURN_IF_ERROR(CheckIdsFree(proc));
  auto t0 = Clock::now();  // restore time excludes waiting for a dumped zombie to be reaped

  // A work area free both in the saved layout and in our own.
  ASSIGN_OR_RETURN(std::vector<proc::MapEntry> own, proc::ReadSmaps(::getpid()));
  std::vector<Range> avoid;
  for (const auto& m : own) avoid.push_back({m.start, m.end});
  ASSIGN_OR_RETURN(uint64_t work_area, FindFreeRange(proc, avoid, kWorkAreaSize));

  pid_t want = proc.pid();
  clone_args args{};
  args.flags = CLONE_CLEAR_SIGHAND;
  args.exit_signal = SIGCHLD;
  args.set_tid = reinterpret_cast<uint64_t>(&want);
  args.set_tid_size = 1;
  long rc = ::syscall(SYS_clone3, &args, sizeof args);
  if (rc == 0) ChildMain(work_area);
  if (rc < 0) {
    if (errno == EEXIST) {
      return absl::AlreadyExistsError(absl::StrCat("pid ", want, " is in use: it must be free to restore the checkpoint"));
    }
    if (errno == EPERM) {
      return absl::PermissionDeniedError(absl::StrCat(
          "cannot create a process with pid ", want, ": restore needs root (CAP_CHECKPOINT_RESTORE or CAP_SYS_ADMIN)"));
    }
    return ErrnoStatus(absl::StrCat("clone3 with pid ", want));
  }
  Child child(want);
  ASSIGN_OR_RETURN(inject::StopInfo stop, inject::WaitStop(want));
  if (stop.kind != inject::StopInfo::Kind::kSignalStop || stop.signal != SIGSTOP) {
    return absl::InternalError(absl::StrCat("new task ", want, " did not start as expected (state ",
                                            static_cast<int>(stop.kind), ", code ", stop.signal, ")"));
  }
  if (::ptrace(PTRACE_SETOPTIONS, want, nullptr,
               reinterpret_cast<void*>(PTRACE_O_TRACECLONE | PTRACE_O_EXITKILL)) != 0) {
    return ErrnoStatus(absl::StrCat("ptrace(SETOPTIONS) pid ", want));
  }
  RETURN_IF_ERROR(inject::SetSigmask(want, ~0ULL));

  std::vector<std::string> temp_paths;
  absl::Status built = Build(*img, opts, work_area, &temp_paths);
  if (!built.ok()) {
    for (const std::string& p : temp_paths) ::unlink(p.c_str());
    return Annotate(built, absl::StrCat("restore of pid ", want, " from ", opts.dir, " failed (nothing was left running)"));
  }
  for (const image::Thread& t : proc.threads()) {
    RETURN_IF_ERROR(inject::Detach(t.tid(), 0));
  }
  child.Release();
  RestoreResult result;
  result.pid = want;
  for (const image::Vma& v : proc.vmas()) {
    for (const image::PageBlock& b : v.blocks()) result.bytes += b.length();
  }
  result.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  CAIRN_LOG_INFO("event=restore pid={} dir={} bytes={} seconds={:.3f}", want, opts.dir, result.bytes, result.seconds);
  return result;
}

}  // namespace cairn::restore
