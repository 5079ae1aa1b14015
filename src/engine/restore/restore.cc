#include "engine/restore/restore.h"

#include <linux/sched.h>
#include <sched.h>
#include <signal.h>
#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/sysmacros.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/boot_id.h"
#include "common/file_util.h"
#include "common/log.h"
#include "common/status.h"
#include "common/stop_points.h"
#include "engine/image/chain.h"
#include "engine/image/image.h"
#include "engine/inject/injector.h"
#include "engine/inject/stop_loop.h"
#include "engine/inject/ptrace.h"
#include "engine/inject/sigtrap.h"
#include "engine/job/job.h"
#include "engine/proc/fd_limit.h"
#include "engine/proc/maps.h"
#include "engine/proc/stat.h"
#include "common/unique_fd.h"
#include "engine/restore/devices.h"
#include "engine/restore/files.h"
#include "engine/restore/seccomp.h"
#include "engine/restore/sockets.h"
#include "engine/restore/sysv_ipc.h"
#include "engine/restore/ids.h"
#include "engine/machine/machine.h"
#include "engine/lazy/fuse.h"
#include "engine/lazy/page_client.h"
#include "engine/restore/memory.h"
#include "engine/restore/task_state.h"
#include "engine/restore/time_ns.h"
#include "engine/restore/verify.h"
#include "engine/net/netlock.h"
#include "engine/proc/cpu_share_boost.h"

namespace cairn::restore {
namespace {

using Clock = std::chrono::steady_clock;

// The restorer's work area in every new task: one page holding a `syscall` instruction,
// then scratch space for syscall arguments.
constexpr uint64_t kWorkAreaSize = 4096 + inject::RemoteScratch::kSize;
// The work area's first page: a syscall instruction at 0 (single-stepped injections), the loop
// of inject/stop_loop.h here.
constexpr uint64_t kStopLoopAt = 64;

// Runs in the first new task, a copy of the restorer: raw syscalls only (no locks, no malloc).
// A container's root task makes the container's world before it stops (container.h): the
// plan, and a pipe's write end for the step that failed. Set only while a restore clones it.
// Thread-local: the clone copies the calling thread, and restores on other threads are not
// containers' because this one's is.
thread_local const ContainerPlan* g_container_plan = nullptr;
thread_local int g_container_report = -1;

[[noreturn]] void ChildMain(uint64_t work_area) {
  ::syscall(SYS_prctl, PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
  if (g_container_plan != nullptr) {
    int failed[2] = {-1, 0};
    failed[0] = g_container_plan->Run(&failed[1]);
    if (failed[0] >= 0) {
      if (::write(g_container_report, failed, sizeof failed) < 0) ::syscall(SYS_exit_group, 123);
      ::syscall(SYS_exit_group, 122);
    }
  }
  void* p = reinterpret_cast<void*>(
      ::syscall(SYS_mmap, work_area, kWorkAreaSize, PROT_READ | PROT_WRITE | PROT_EXEC,
                MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0));
  if (p != reinterpret_cast<void*>(work_area)) ::syscall(SYS_exit_group, 120);
  auto* code = static_cast<unsigned char*>(p);
  code[0] = 0x0f;  // syscall
  code[1] = 0x05;
  code[2] = 0xcc;  // int3, never reached: the tracer single-steps
  for (size_t i = 0; i < sizeof inject::kStopLoop; ++i) code[kStopLoopAt + i] = inject::kStopLoop[i];
  ::syscall(SYS_ptrace, PTRACE_TRACEME, 0, 0, 0);
  ::syscall(SYS_kill, ::syscall(SYS_getpid), SIGSTOP);
  ::syscall(SYS_exit_group, 121);
  __builtin_unreachable();
}

// Creates the root task from a helper process that first enters what the task must start in
// but the restorer itself cannot: a new time namespace whose clocks' offsets are `*offsets`
// (time_ns.h; they can be set only before any task has entered it, and
// unshare(CLONE_NEWTIME) sends only the caller's later children there), and the network
// namespace `net_ns_fd` (-1: none), joined before a new user namespace the task is cloned into
// (container.h NetNsBeforeClone), and the PID namespace `pid_ns_fd` (-1: none) the task is made
// in (PidNsBeforeClone). The helper creates the task as this thread's child
// (CLONE_PARENT, so that it is traced and reaped here as on the plain path), then exits.
// Returns the task's host pid, or -1 with errno (of the step that failed).
long CloneThroughHelper(clone_args args, const std::string* offsets, int net_ns_fd, int pid_ns_fd,
                        uint64_t work_area) {
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) return -1;
  // A task made to share the restorer's descriptor table (a container's root) is made by a
  // helper that shares it too.
  pid_t helper;
  if (args.flags & CLONE_FILES) {
    clone_args h{};
    h.flags = CLONE_FILES;
    h.exit_signal = SIGCHLD;
    helper = static_cast<pid_t>(::syscall(SYS_clone3, &h, sizeof h));
  } else {
    helper = ::fork();
  }
  if (helper < 0) {
    int e = errno;
    ::close(pipe_fds[0]);
    ::close(pipe_fds[1]);
    errno = e;
    return -1;
  }
  if (helper == 0) {  // async-signal-safe calls only: the restorer may have threads
    long out[2] = {-1, 0};
    bool set = net_ns_fd < 0 || ::setns(net_ns_fd, CLONE_NEWNET) == 0;
    if (set && pid_ns_fd >= 0 && ::setns(pid_ns_fd, CLONE_NEWPID) != 0) set = false;  // for its children
    if (set && offsets != nullptr && ::unshare(CLONE_NEWTIME) != 0) set = false;
    if (set && offsets != nullptr) {
      int fd = ::open("/proc/self/timens_offsets", O_WRONLY | O_CLOEXEC);
      set = fd >= 0 && ::write(fd, offsets->data(), offsets->size()) == static_cast<ssize_t>(offsets->size());
      if (fd >= 0) ::close(fd);  // in a table it may share with the restorer
    }
    if (set) {
      args.flags |= CLONE_PARENT;
      args.exit_signal = 0;  // with CLONE_PARENT, the caller's (SIGCHLD) and must be 0 here
      long rc = ::syscall(SYS_clone3, &args, sizeof args);
      if (rc == 0) ChildMain(work_area);
      out[0] = rc;
    }
    out[1] = errno;
    if (::write(pipe_fds[1], out, sizeof out) < 0) ::_exit(1);
    ::_exit(0);
  }
  // A helper sharing our table has its write end only through it: it is waited for before
  // anything is closed, and what it wrote waits in the pipe.
  auto reap_helper = [helper] {
    while (::waitpid(helper, nullptr, 0) < 0 && errno == EINTR) {
    }
  };
  if (args.flags & CLONE_FILES) reap_helper();
  ::close(pipe_fds[1]);
  long out[2] = {-1, EIO};
  ssize_t n;
  do {
    n = ::read(pipe_fds[0], out, sizeof out);
  } while (n < 0 && errno == EINTR);
  ::close(pipe_fds[0]);
  if (!(args.flags & CLONE_FILES)) reap_helper();
  if (n != static_cast<ssize_t>(sizeof out)) out[0] = -1;
  if (out[0] < 0) errno = static_cast<int>(out[1]);
  return out[0];
}

absl::Status CheckIdsFree(const std::vector<const image::Process*>& procs) {
  for (const image::Process* p : procs) {
    std::vector<pid_t> ids = {p->pid()};
    for (const image::Thread& t : p->threads()) {
      if (t.tid() != p->pid()) ids.push_back(t.tid());
    }
    for (pid_t id : ids) {
      auto st = proc::ReadStat(id);
      // A process killed by `cairn dump` stays a zombie until its parent reaps it; give
      // the parent a moment, as a restore right after a dump is the common case.
      for (int i = 0; i < 40 && st.ok() && st->state == 'Z'; ++i) {
        ::usleep(50000);
        st = proc::ReadStat(id);
      }
      if (st.ok() && st->state == 'Z') {
        return absl::AlreadyExistsError(absl::StrFormat(
            "pid %d is still taken by the exited process '%s', which its parent (pid %d) has not reaped; the "
            "parent must wait() for it before the checkpoint can be restored with this pid",
            id, st->comm, st->ppid));
      }
      if (st.ok()) {
        return absl::AlreadyExistsError(absl::StrFormat(
            "%s %d is in use by process '%s' (pid %d): it must be free to restore the checkpoint; stop that "
            "process or restore on another machine",
            id == p->pid() ? "pid" : "thread id", id, st->comm, st->pid));
      }
    }
  }
  return absl::OkStatus();
}

// The checkpoint's vDSO image when this machine's differs (restored processes get a proxy of
// it, machine/vdso.h), else null.
const std::string* OldVdso(const image::ImageReader& img) {
  return machine::NeedsVdsoProxy(img.meta()) ? &img.meta().machine().vdso() : nullptr;
}

// The tasks created so far: killed and reaped unless released.
class Tasks {
 public:
  ~Tasks() {
    if (released_) return;
    for (pid_t pid : pids_) ::kill(pid, SIGKILL);
    std::vector<pid_t> tids;
    for (auto it = pids_.rbegin(); it != pids_.rend(); ++it) {
      if (auto listed = proc::ListTasks(*it); listed.ok()) tids.insert(tids.end(), listed->begin(), listed->end());
      if (std::find(tids.begin(), tids.end(), *it) == tids.end()) tids.push_back(*it);
    }
    inject::ReapKilledThreads(std::move(tids));
  }
  void Add(pid_t pid) { pids_.push_back(pid); }
  void Release() { released_ = true; }

 private:
  std::vector<pid_t> pids_;
  bool released_ = false;
};

// Checks the tree's shape: the root first, every other process after its parent.
// RestoreOptions::only_as: every process is the owner's, with no capabilities unless root.
absl::Status CheckOwner(const std::vector<const image::Process*>& procs, const RestoreOptions::Owner& owner,
                        const std::string& where) {
  for (const image::Process* p : procs) {
    const image::Creds& c = p->creds();
    bool same = c.uids_size() == 4 && c.gids_size() == 4;
    for (int i = 0; i < 4 && same; ++i) same = c.uids(i) == owner.uid && c.gids(i) == owner.gid;
    bool caps = c.cap_prm() != 0 || c.cap_eff() != 0 || c.cap_amb() != 0 || c.cap_inh() != 0;
    if (same && (owner.uid == 0 || !caps)) continue;
    return absl::PermissionDeniedError(absl::StrFormat(
        "restore from %s refused (nothing was restored): process %d (%s) of the checkpoint runs as uid %s gid %s%s, "
        "and it may be restored only as user %s (uid %u, gid %u)%s",
        where, p->pid(), p->comm(), absl::StrJoin(c.uids(), "/"), absl::StrJoin(c.gids(), "/"),
        caps ? " with capabilities" : "", owner.name, owner.uid, owner.gid,
        " (a job's checkpoint comes back only with its owner's credentials)"));
  }
  return absl::OkStatus();
}

absl::Status CheckTreeOrder(const std::vector<const image::Process*>& procs, const std::string& dir) {
  std::map<pid_t, const image::Process*> seen;
  for (size_t i = 0; i < procs.size(); ++i) {
    const image::Process* p = procs[i];
    if (p->pid() <= 0 || seen.count(p->pid())) {
      return absl::DataLossError(absl::StrCat(dir, ": invalid or repeated pid ", p->pid(), " (corrupt image)"));
    }
    if (i > 0 && !seen.count(p->ppid())) {
      return absl::DataLossError(absl::StrCat(dir, ": pid ", p->pid(), " comes before its parent ", p->ppid(),
                                              " (corrupt image)"));
    }
    if (!p->zombie() && (p->threads_size() == 0 || p->threads(0).tid() != p->pid())) {
      return absl::DataLossError(absl::StrCat(dir, ": pid ", p->pid(), " has no main thread (corrupt image)"));
    }
    seen[p->pid()] = p;
  }
  return absl::OkStatus();
}

// Forks `c` with its saved pid from the task `inj` drives (its restored parent).
absl::Status ForkChild(inject::Injector& inj, inject::RemoteScratch& sc, const image::Process& c, Tasks& tasks,
                       IdMap& ids) {
  pid_t want = c.pid();
  ASSIGN_OR_RETURN(uint64_t tid_addr, sc.Put(512, &want, sizeof want));
  clone_args args{};
  args.exit_signal = SIGCHLD;
  args.set_tid = tid_addr;
  args.set_tid_size = 1;
  // Its parent's descriptor table or fs (cwd, root, umask), shared as they were.
  if (c.shares_files_with_parent()) args.flags |= CLONE_FILES;
  if (c.shares_fs_with_parent()) args.flags |= CLONE_FS;
  ASSIGN_OR_RETURN(uint64_t args_addr, sc.Put(0, &args, sizeof args));
  auto rc = inj.Call(absl::StrCat("clone3 pid ", want), SYS_clone3, args_addr, sizeof args);
  // In a PID namespace that was another's (a pod's), the killed original may still wait as a
  // zombie for that namespace's init to reap it: a moment for it, as for the root (Restore).
  for (int i = 0; i < 40 && !rc.ok() && absl::IsAlreadyExists(rc.status()); ++i) {
    ::usleep(50000);
    rc = inj.Call(absl::StrCat("clone3 pid ", want), SYS_clone3, args_addr, sizeof args);
  }
  if (!rc.ok()) {
    if (absl::IsAlreadyExists(rc.status())) {
      return absl::AlreadyExistsError(absl::StrCat("pid ", want, " is in use: it must be free to restore"));
    }
    return rc.status();
  }
  pid_t child_host = inj.last_new_task() != 0 ? inj.last_new_task() : want;
  ids.Set(want, child_host);
  tasks.Add(child_host);
  ASSIGN_OR_RETURN(inject::StopInfo stop, inject::WaitStop(child_host));
  if (stop.kind != inject::StopInfo::Kind::kSignalStop && stop.kind != inject::StopInfo::Kind::kEventStop) {
    return absl::InternalError(absl::StrCat("new process ", want, " did not stop"));
  }
  return absl::OkStatus();
}

// A stand-in leader for a process group or session whose leader had exited: a process
// with the group's (or session's) id as its pid, made leader of a new group (or session)
// of that id, for as long as the members take to join it (or to be forked from it).
struct StandIn {
  pid_t group = 0;   // the group's or session's id
  pid_t host = 0;    // the stand-in as the restorer sees it
  pid_t parent = 0;  // host pid of the process that forked it, which reaps it
};

// Forks the stand-in for `id` from the task `parent` (clone3 with `id` as pid and no exit
// signal, so the parent gets no SIGCHLD) and makes it a group leader, or with `session` a
// session leader. Returns nothing when the id is taken (by a live process outside the
// checkpoint, such as the shell whose group it is).
absl::StatusOr<std::optional<StandIn>> MakeStandIn(pid_t parent, pid_t want, bool session, uint64_t work_area) {
  inject::Injector inj(parent, work_area);
  inject::RemoteScratch sc(parent, work_area + 4096, inject::RemoteScratch::kSize, false);
  ASSIGN_OR_RETURN(uint64_t tid_addr, sc.Put(512, &want, sizeof want));
  clone_args args{};
  args.exit_signal = 0;
  args.set_tid = tid_addr;
  args.set_tid_size = 1;
  ASSIGN_OR_RETURN(uint64_t args_addr, sc.Put(0, &args, sizeof args));
  const char* what = session ? "session" : "group";
  auto rc = inj.Call(absl::StrCat("clone3 pid ", want, " (stand-in leader of ", what, " ", want, ")"), SYS_clone3,
                     args_addr, sizeof args);
  if (!rc.ok()) {
    if (absl::IsAlreadyExists(rc.status())) return std::nullopt;
    return rc.status();
  }
  StandIn s{want, inj.last_new_task() != 0 ? inj.last_new_task() : want, parent};
  ASSIGN_OR_RETURN(inject::StopInfo stop, inject::WaitStop(s.host));
  if (stop.kind != inject::StopInfo::Kind::kSignalStop && stop.kind != inject::StopInfo::Kind::kEventStop) {
    return absl::InternalError(absl::StrCat("stand-in leader of group ", want, " did not stop"));
  }
  inject::Injector stand_in(s.host, work_area);
  if (session) {
    RETURN_IF_ERROR(stand_in.Call(absl::StrCat("setsid (stand-in leader of session ", want, ")"), SYS_setsid).status());
  } else {
    RETURN_IF_ERROR(stand_in.Call(absl::StrCat("setpgid (stand-in leader of group ", want, ")"), SYS_setpgid, 0, 0)
                        .status());
  }
  return s;
}

// The stand-ins of a stage of the skeleton. End() kills them once their groups have
// members (or their sessions' members are forked), and has each one reaped by the process
// that forked it, after the restorer, its tracer, has seen it exit; the destructor does the
// same on the way out of a failed restore.
class StandIns {
 public:
  explicit StandIns(uint64_t work_area) : work_area_(work_area) {}
  ~StandIns() { (void)End(); }
  StandIns(const StandIns&) = delete;
  StandIns& operator=(const StandIns&) = delete;

  const StandIn* Find(pid_t id) const {
    for (const StandIn& s : all_) {
      if (s.group == id) return &s;
    }
    return nullptr;
  }
  const StandIn* Add(const StandIn& s) {
    all_.push_back(s);
    return &all_.back();
  }
  absl::Status End() {
    absl::Status result;
    for (const StandIn& s : all_) {
      ::kill(s.host, SIGKILL);
      int status;
      while (::waitpid(s.host, &status, __WALL) < 0 && errno == EINTR) {
      }
      inject::Injector parent(s.parent, work_area_);
      auto rc = parent.Call(absl::StrCat("wait4 for the stand-in leader of ", s.group), SYS_wait4,
                            static_cast<uint64_t>(s.group), 0, __WALL, 0);
      if (result.ok() && !rc.ok()) result = rc.status();
    }
    all_.clear();
    return result;
  }

 private:
  uint64_t work_area_;
  std::deque<StandIn> all_;  // stable addresses for Find and Add
};

// The path of terminal device `rdev`: from a descriptor of the checkpoint open on it, else
// the pseudo-terminal slave it must be. Empty when neither.
std::string TerminalPath(uint64_t rdev, const std::vector<const image::Process*>& procs) {
  for (const image::Process* p : procs) {
    for (const image::Fd& fd : p->fds()) {
      if (fd.kind() == image::Fd::CHAR_DEVICE && fd.rdev() == rdev) return fd.path();
    }
  }
  unsigned maj = major(rdev), min = minor(rdev);
  if (maj >= 136 && maj <= 143) return absl::StrFormat("/dev/pts/%u", (maj - 136) * 256 + min);
  return "";
}

// In session leader `p` (a copy of the restorer), with `foreground` false: makes its saved
// terminal its controlling terminal (TIOCSCTTY); with true: gives that terminal the saved
// foreground process group (TIOCSPGRP). The terminal is opened for the call and closed.
absl::Status TakeTerminal(inject::Injector& inj, inject::RemoteScratch& sc, const image::Process& p,
                          const std::vector<const image::Process*>& procs, bool foreground) {
  std::string path = TerminalPath(p.ctty(), procs);
  if (path.empty()) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "its controlling terminal (device %u:%u) is no descriptor of the checkpoint and not a pseudo-terminal: "
        "restore cannot find it again",
        major(p.ctty()), minor(p.ctty())));
  }
  ASSIGN_OR_RETURN(uint64_t path_addr, sc.PutString(2048, path));
  ASSIGN_OR_RETURN(long fd, inj.Call("open the controlling terminal " + path, SYS_openat,
                                     static_cast<uint64_t>(AT_FDCWD), path_addr, O_RDWR | O_NOCTTY | O_NONBLOCK, 0));
  absl::StatusOr<long> rc;
  if (!foreground) {
    rc = inj.Call("ioctl(TIOCSCTTY) on " + path +
                      " (it must not be the controlling terminal of another session: the original's, if it was "
                      "checkpointed with --leave-running?)",
                  SYS_ioctl, static_cast<uint64_t>(fd), TIOCSCTTY, 0);
  } else {
    pid_t pgrp = p.ctty_foreground();
    absl::StatusOr<uint64_t> at = sc.Put(2048, &pgrp, sizeof pgrp);
    rc = at.ok() ? inj.Call(absl::StrFormat("ioctl(TIOCSPGRP, %d) on %s", pgrp, path), SYS_ioctl,
                            static_cast<uint64_t>(fd), TIOCSPGRP, *at)
                 : at.status();
  }
  RETURN_IF_ERROR(inj.Call("close", SYS_close, static_cast<uint64_t>(fd)).status());
  return rc.status();
}

// Creates the tree's skeleton top-down: each process is forked (with its saved pid) by
// its restored parent, which is still a copy of the restorer, so every task inherits the
// work area and the master descriptors. Sessions are created before the children that
// belong to them are forked; process groups are joined once every group exists.
absl::Status BuildSkeleton(const image::ImageReader& img, const std::vector<const image::Process*>& procs,
                           uint64_t work_area, const SharedAnonStaging& staging, bool mount_proc, bool own_pid_ns,
                           int fill_threads, Tasks& tasks, IdMap& ids) {
  for (const image::Process* p : procs) {
    pid_t host = ids.Host(p->pid());
    inject::Injector inj(host, work_area);
    inject::RemoteScratch sc(host, work_area + 4096, inject::RemoteScratch::kSize, false);
    // The copy of the restorer has glibc's rseq area registered; drop it before its
    // memory goes (children forked below then inherit none).
    ASSIGN_OR_RETURN(inject::RseqConfig rseq, inject::GetRseq(host));
    if (rseq.addr != 0) {
      RETURN_IF_ERROR(inj.Call("rseq unregister", SYS_rseq, rseq.addr, rseq.size, 1, rseq.signature).status());
    }
    if (p == procs[0]) {
      // Shared anonymous memory is created in the root, on an address space emptied of the
      // restorer's areas, before anything is forked: every process inherits it.
      RETURN_IF_ERROR(ReplaceAddressSpace(inj, *p, {work_area, work_area + kWorkAreaSize}, {}, OldVdso(img),
                                          /*skeleton=*/true));
      RETURN_IF_ERROR(CreateSharedAnon(inj, sc, img, procs, staging, fill_threads));
    }
    if (p == procs[0] && mount_proc) {
      // The job's own mount namespace: private propagation, and a /proc that shows its
      // own PID namespace.
      ASSIGN_OR_RETURN(uint64_t root_path, sc.PutString(1024, "/"));
      RETURN_IF_ERROR(inj.Call("mount --make-rprivate /", SYS_mount, 0, root_path, 0, MS_REC | MS_PRIVATE, 0).status());
      ASSIGN_OR_RETURN(uint64_t proc_str, sc.PutString(1024, "proc"));
      ASSIGN_OR_RETURN(uint64_t proc_path, sc.PutString(1100, "/proc"));
      RETURN_IF_ERROR(inj.Call("mount /proc", SYS_mount, proc_str, proc_path, proc_str, 0, 0).status());
    }
    // A session leader may have children still in the session it left when it called
    // setsid: fork those first, then create its session, then fork the others.
    bool leader = p->sid() == p->pid();
    // Children in a session whose leader had exited (re-parented to this process, a child
    // subreaper or the namespace's init) are forked by a stand-in leader of that session,
    // which then exits, so that they are re-parented here again.
    StandIns sessions(work_area);
    bool reaper = p->child_subreaper() || (p == procs[0] && own_pid_ns);
    for (int phase = 0; phase < 2; ++phase) {
      if (phase == 1 && leader) {
        RETURN_IF_ERROR(inj.Call("setsid", SYS_setsid).status());
        // Its controlling terminal, before the members of its session are forked: they
        // inherit it (nothing can give one to a process that exists already).
        if (p->ctty() != 0) RETURN_IF_ERROR(Annotate(TakeTerminal(inj, sc, *p, procs, false), absl::StrCat("pid ", p->pid())));
      }
      for (const image::Process* c : procs) {
        if (c->ppid() != p->pid() || c == procs[0]) continue;
        bool in_old_session = leader && c->sid() != p->pid();
        if (in_old_session != (phase == 0)) continue;
        bool orphaned_session = !in_old_session && c->sid() != p->sid() && c->sid() != c->pid() && c->sid() != 0 &&
                                !std::any_of(procs.begin(), procs.end(), [&](auto* o) { return o->pid() == c->sid(); });
        if (!orphaned_session) {
          RETURN_IF_ERROR(ForkChild(inj, sc, *c, tasks, ids));
          continue;
        }
        const StandIn* s = sessions.Find(c->sid());
        if (s == nullptr && reaper) {
          // Children come back here when the stand-in exits only if this process reaps orphans.
          if (p->child_subreaper()) {
            RETURN_IF_ERROR(inj.Call("prctl(PR_SET_CHILD_SUBREAPER)", SYS_prctl, PR_SET_CHILD_SUBREAPER, 1).status());
          }
          ASSIGN_OR_RETURN(std::optional<StandIn> made, MakeStandIn(host, c->sid(), true, work_area));
          if (made) s = sessions.Add(*made);
        }
        if (s == nullptr) {
          CAIRN_LOG_WARN("event=sid_not_restored pid={} sid={} reason=\"the session's leader had exited and {}\"",
                         c->pid(), c->sid(),
                         reaper ? "its id is taken on this machine" : "the parent is not a child subreaper");
          RETURN_IF_ERROR(ForkChild(inj, sc, *c, tasks, ids));
          continue;
        }
        if (c->shares_files_with_parent() || c->shares_fs_with_parent()) {
          return absl::UnimplementedError(absl::StrFormat(
              "pid %d shares its descriptor table or cwd with its parent %d and is in a session whose leader had "
              "exited: restore cannot rebuild both",
              c->pid(), p->pid()));
        }
        inject::Injector stand_in(s->host, work_area);
        inject::RemoteScratch stand_in_sc(s->host, work_area + 4096, inject::RemoteScratch::kSize, false);
        RETURN_IF_ERROR(ForkChild(stand_in, stand_in_sc, *c, tasks, ids));
      }
    }
    RETURN_IF_ERROR(sessions.End());
  }
  // Process groups: leaders first, then members (a group must exist to be joined).
  std::map<pid_t, const image::Process*> by_pid;
  for (const image::Process* p : procs) by_pid[p->pid()] = p;
  // A group whose leader had exited gets a stand-in leader with its id, from its first
  // member, for as long as the members take to join it.
  StandIns stand_ins(work_area);
  for (const image::Process* p : procs) {
    if (p->zombie() || p->pgid() == 0 || p->pgid() == p->pid() || p->sid() == p->pid() || by_pid.count(p->pgid())) {
      continue;
    }
    if (stand_ins.Find(p->pgid()) != nullptr) continue;
    ASSIGN_OR_RETURN(std::optional<StandIn> s, MakeStandIn(ids.Host(p->pid()), p->pgid(), false, work_area));
    if (s) stand_ins.Add(*s);
  }
  for (int pass = 0; pass < 2; ++pass) {
    for (const image::Process* p : procs) {
      bool leader = p->pgid() == p->pid();
      if (p->sid() == p->pid() || leader != (pass == 0)) continue;
      inject::Injector inj(ids.Host(p->pid()), work_area);
      if (leader) {
        RETURN_IF_ERROR(inj.Call("setpgid (group leader)", SYS_setpgid, 0, 0).status());
      } else if (p->pgid() == 0) {
        // The group lies outside the job's PID namespace: the process stays in the restorer's.
      } else if (auto g = by_pid.find(p->pgid());
                 (g != by_pid.end() && g->second->sid() == p->sid()) || stand_ins.Find(p->pgid()) != nullptr) {
        RETURN_IF_ERROR(inj.Call(absl::StrCat("setpgid to group ", p->pgid()), SYS_setpgid, 0,
                                 static_cast<uint64_t>(p->pgid())).status());
      } else {
        // Expected for a lone process whose group belongs to its shell; a loss when other
        // processes of the tree were in that group too (its leader had exited).
        int members = 0;
        for (const image::Process* o : procs) members += o->pgid() == p->pgid();
        if (members > 1) {
          CAIRN_LOG_WARN("event=pgid_not_restored pid={} pgid={} reason=\"the group's leader had exited and its id "
                         "is taken on this machine: the process stays in the restorer's group\"",
                         p->pid(), p->pgid());
        } else {
          CAIRN_LOG_INFO("event=pgid_not_restored pid={} pgid={} reason=\"the group's leader is not in the "
                         "checkpoint\"", p->pid(), p->pgid());
        }
      }
    }
  }
  RETURN_IF_ERROR(stand_ins.End());
  // A member that had given up the session's terminal (TIOCNOTTY) inherited it at its fork:
  // it lets go of it again.
  for (const image::Process* p : procs) {
    if (p->zombie() || p->ctty() != 0 || p->sid() == p->pid()) continue;
    auto leader = std::find_if(procs.begin(), procs.end(), [&](auto* o) { return o->pid() == p->sid(); });
    if (leader == procs.end() || (*leader)->ctty() == 0) continue;
    inject::Injector inj(ids.Host(p->pid()), work_area);
    inject::RemoteScratch sc(ids.Host(p->pid()), work_area + 4096, inject::RemoteScratch::kSize, false);
    ASSIGN_OR_RETURN(uint64_t tty, sc.PutString(2048, "/dev/tty"));
    ASSIGN_OR_RETURN(long fd, inj.Call("open /dev/tty", SYS_openat, static_cast<uint64_t>(AT_FDCWD), tty,
                                       O_RDWR | O_NOCTTY | O_NONBLOCK, 0));
    absl::Status dropped = inj.Call(absl::StrCat("ioctl(TIOCNOTTY) in pid ", p->pid()), SYS_ioctl,
                                    static_cast<uint64_t>(fd), TIOCNOTTY, 0)
                               .status();
    RETURN_IF_ERROR(inj.Call("close", SYS_close, static_cast<uint64_t>(fd)).status());
    RETURN_IF_ERROR(dropped);
  }
  // The foreground process group of each session's terminal, once every group exists.
  std::set<pid_t> groups;
  for (const image::Process* p : procs) groups.insert(p->pgid());
  for (const image::Process* p : procs) {
    if (p->sid() != p->pid() || p->ctty() == 0 || !groups.count(p->ctty_foreground())) continue;
    inject::Injector inj(ids.Host(p->pid()), work_area);
    inject::RemoteScratch sc(ids.Host(p->pid()), work_area + 4096, inject::RemoteScratch::kSize, false);
    RETURN_IF_ERROR(Annotate(TakeTerminal(inj, sc, *p, procs, true), absl::StrCat("pid ", p->pid())));
  }
  return absl::OkStatus();
}

// Rebuilds one process (not a zombie) inside its task; leaves it stopped with its final
// registers set.
absl::Status BuildProcess(const image::ImageReader& img, const std::vector<const image::Process*>& procs,
                          const image::Process& proc, const Masters& masters, bool close_masters,
                          uint64_t work_area, const SharedAnonStaging& staging, int fill_threads,
                          lazy::LazyHandlers* lazy_handlers, IdMap& ids) {
  pid_t pid = ids.Host(proc.pid());
  inject::Injector inj(pid, work_area);
  inject::RemoteScratch scratch(pid, work_area + 4096, inject::RemoteScratch::kSize, /*owned=*/false);
  // A process sharing its parent's descriptor table finds it complete: the parent, built
  // before it, put every descriptor in place (the masters stay until the table's last
  // process is built, which may still map a deleted file through one).
  bool own_table = !proc.shares_files_with_parent();
  if (own_table) RETURN_IF_ERROR(CloseAllButMasters(inj, scratch, work_area + kStopLoopAt, masters));
  std::vector<Range> staged;
  for (const auto& [id, r] : staging) staged.push_back(r);
  RETURN_IF_ERROR(ReplaceAddressSpace(inj, proc, {work_area, work_area + kWorkAreaSize}, staged, OldVdso(img)));
  RETURN_IF_ERROR(PlaceSharedAnon(inj, proc, staging));
  CAIRN_LOG_DEBUG("event=restore_stage stage=address_space_replaced pid={}", pid);
  RETURN_IF_ERROR(
      MapAndFill(inj, scratch, work_area + kStopLoopAt, img, proc, fill_threads, masters.objects, lazy_handlers));
  CAIRN_LOG_DEBUG("event=restore_stage stage=memory_filled pid={}", pid);
  RETURN_IF_ERROR(RestoreProcessState(inj, scratch, work_area + kStopLoopAt, proc));
  if (own_table) {
    RETURN_IF_ERROR(InstallFds(inj, scratch, work_area + kStopLoopAt, procs, proc, masters));
    CAIRN_LOG_DEBUG("event=restore_stage stage=fds_installed pid={}", pid);
    RETURN_IF_ERROR(OpenInProcess(inj, scratch, procs, proc));
    RETURN_IF_ERROR(ListenSockets(inj, proc));
    RETURN_IF_ERROR(RestoreEpollInterest(inj, scratch, work_area + kStopLoopAt, proc));
    CAIRN_LOG_DEBUG("event=restore_stage stage=epoll_restored pid={}", pid);
  }
  if (close_masters) {
    RETURN_IF_ERROR(inj.Call("close_range (masters)", SYS_close_range, static_cast<uint64_t>(masters.base), ~0U, 0)
                        .status());
  }
  // POSIX locks belong to the descriptor table: taken once, by the process that owns it. An
  // flock is taken by the process /proc/locks named, also one sharing its parent's table.
  RETURN_IF_ERROR(RestoreProcessLocks(inj, scratch, procs, proc, /*posix=*/own_table));
  std::map<pid_t, inject::Injector> injectors;
  RETURN_IF_ERROR(CreateThreads(inj, scratch, proc, &injectors, &ids));
  // Seccomp filters (seccomp.h): installing one needs no_new_privs or CAP_SYS_ADMIN. A process
  // that ends with neither (a container's, whose runtime installed them before it dropped its
  // capabilities) takes them while it still has the restorer's, before its credentials: its
  // filters must then allow the calls that restore those.
  const bool filters_early = !CanInstallSeccomp(proc.creds());
  if (filters_early) RETURN_IF_ERROR(InstallSeccompFilters(inj, scratch, proc));
  image::Creds creds = proc.creds();
  if (img.meta().container().has_user_ns()) {
    ASSIGN_OR_RETURN(creds, CredsInside(proc.creds(), img.meta().container().user_ns()));
  }
  RETURN_IF_ERROR(RestoreThreadStates(injectors, scratch, work_area + kStopLoopAt, proc, creds));
  // After the credentials: the kernel records the setter's as the owner's, which decide whom
  // the owner may signal.
  if (own_table) RETURN_IF_ERROR(RestoreOwners(inj, scratch, proc));
  // The last injected call removes the work area itself: single-stepping stops at the
  // syscall's exit, before the (now unmapped) next instruction would run.
  // Otherwise last: nothing else injected has to pass them.
  if (!filters_early) RETURN_IF_ERROR(InstallSeccompFilters(inj, scratch, proc));
  RETURN_IF_ERROR(inj.Call("munmap work area", SYS_munmap, work_area, kWorkAreaSize).status());
  CAIRN_LOG_DEBUG("event=restore_stage stage=state_restored pid={}", pid);
  return SetFinalRegisters(proc, ids, img.meta().has_machine() ? &img.meta().machine() : nullptr);
}

// Whether the process group of `pid` is orphaned: none of its members has a parent in another
// group of the same session (POSIX; the kernel then drops job-control stop signals).
bool GroupOrphaned(pid_t pid) {
  auto self = proc::ReadStat(pid);
  if (!self.ok()) return false;
  DIR* d = ::opendir("/proc");
  if (d == nullptr) return false;
  bool orphaned = true;
  while (dirent* e = ::readdir(d)) {
    pid_t other = 0;
    if (!absl::SimpleAtoi(e->d_name, &other)) continue;
    auto st = proc::ReadStat(other);
    if (!st.ok() || st->pgrp != self->pgrp) continue;
    auto parent = proc::ReadStat(st->ppid);
    if (parent.ok() && parent->pgrp != self->pgrp && parent->session == self->session) {
      orphaned = false;
      break;
    }
  }
  ::closedir(d);
  return orphaned;
}

// Whether `p` is the last process (in build order) of the descriptor table it has, whether
// of its own or shared with its parent and other children (CLONE_FILES): it closes the
// masters in that table once every process holding it is built.
bool LastOfItsTable(const std::vector<const image::Process*>& procs, const image::Process* p) {
  std::map<pid_t, const image::Process*> by_pid;
  for (const image::Process* q : procs) by_pid[q->pid()] = q;
  auto owner = [&](const image::Process* q) {
    while (q->shares_files_with_parent() && by_pid.count(q->ppid())) q = by_pid[q->ppid()];
    return q;
  };
  const image::Process* mine = owner(p);
  auto at = std::find(procs.begin(), procs.end(), p);
  return std::none_of(at + 1, procs.end(), [&](const image::Process* q) { return !q->zombie() && owner(q) == mine; });
}

// Makes a zombie's task exit with its saved wait status; it then waits, unreaped, for
// its parent as before.
absl::Status ExitAsZombie(const image::Process& proc, uint64_t work_area, const IdMap& ids) {
  pid_t pid = ids.Host(proc.pid());
  int status = proc.exit_code();
  if (WIFSIGNALED(status)) {
    int sig = WTERMSIG(status);
    rlimit no_core{0, 0};
    ::prlimit(pid, RLIMIT_CORE, &no_core, nullptr);
    if (sig == SIGKILL) {
      // Not sent from inside: SIGKILL cannot be held back, so the task would die in the
      // injected call. The tracer collects its death; its parent then finds the zombie.
      if (::kill(pid, SIGKILL) != 0) return ErrnoStatus(absl::StrCat("kill zombie ", proc.pid()));
      for (;;) {
        ASSIGN_OR_RETURN(inject::StopInfo stop, inject::WaitStop(pid));
        if (stop.kind == inject::StopInfo::Kind::kKilled || stop.kind == inject::StopInfo::Kind::kExited) break;
      }
      return absl::OkStatus();
    }
    inject::Injector inj(pid, work_area);
    RETURN_IF_ERROR(inj.Call("tgkill", SYS_tgkill, proc.pid(), proc.pid(), sig).status());
    RETURN_IF_ERROR(inject::SetSigmask(pid, 0));
    // Handlers were cleared when the restorer was copied: the default action ends it.
    return inject::Detach(pid, 0);
  }
  ASSIGN_OR_RETURN(user_regs_struct regs, inject::GetRegs(pid));
  regs.rip = work_area;
  regs.rax = SYS_exit_group;
  regs.orig_rax = static_cast<uint64_t>(-1);
  regs.rdi = static_cast<uint64_t>(WEXITSTATUS(status));
  RETURN_IF_ERROR(inject::SetRegs(pid, regs));
  return inject::Detach(pid, 0);
}

// The restored container's root as its root task sees it, and its mount namespace (files.h
// ImageRoot).
absl::StatusOr<std::pair<UniqueFd, UniqueFd>> ContainerRoot(pid_t root_host) {
  std::string link = absl::StrCat("/proc/", root_host, "/root");
  UniqueFd at(::open(link.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!at.valid()) return ErrnoStatus("open " + link + ", the restored container's root");
  std::string ns = absl::StrCat("/proc/", root_host, "/ns/mnt");
  UniqueFd mounts(::open(ns.c_str(), O_RDONLY | O_CLOEXEC));
  if (!mounts.valid()) return ErrnoStatus("open " + ns + ", the restored container's mount namespace");
  return std::make_pair(std::move(at), std::move(mounts));
}

// Runs `work` where the container's descriptions are made: its sockets in its network
// namespace, its paths under its root — on a thread of ours that entered that namespace (a
// thread's own; the restorer keeps its own).
absl::Status InContainer(pid_t root_host, const std::function<absl::Status()>& work) {
  std::string net = absl::StrCat("/proc/", root_host, "/ns/net");
  UniqueFd net_fd(::open(net.c_str(), O_RDONLY | O_CLOEXEC));
  if (!net_fd.valid()) return ErrnoStatus("open " + net + ", the restored container's network namespace");
  ASSIGN_OR_RETURN(auto root_fd, ContainerRoot(root_host));
  absl::Status done;
  std::thread([&] {
    if (::setns(net_fd.get(), CLONE_NEWNET) != 0) {
      done = ErrnoStatus("enter the restored container's network namespace (setns " + net + ")");
      return;
    }
    ImageRoot thread_root(std::move(root_fd.first), std::move(root_fd.second));
    done = work();
  }).join();
  return done;
}

}  // namespace

absl::StatusOr<RestoreResult> Restore(const RestoreOptions& opts) {
  const std::string where = opts.page_server.empty() ? opts.dir : "page server " + opts.page_server;
  ASSIGN_OR_RETURN(std::unique_ptr<image::ImageReader> img,
                   lazy::OpenImage({opts.dir, opts.page_server, opts.token_file}, /*who=*/0));
  std::vector<const image::Process*> procs = {&img->meta().process()};
  for (const image::Process& p : img->meta().descendants()) procs.push_back(&p);
  // The seals: checked before anything is created from the image; pages.img goes on being
  // checked while the processes are built, and nothing runs before it passed.
  std::vector<std::unique_ptr<image::SealCheck>> seals;
  if (opts.seal_key != nullptr && opts.page_server.empty()) {
    for (const image::ImageReader* l = img.get(); l != nullptr; l = l->parent()) {
      auto c = image::SealCheck::Start(l->dir(), *opts.seal_key);
      if (!c.ok()) return Annotate(c.status(), absl::StrCat("restore from ", where, " refused (nothing was restored)"));
      seals.push_back(std::move(*c));
    }
  }
  if (img->meta().pages_only()) {
    return absl::FailedPreconditionError(absl::StrCat(
        where, " is a pre-dump: it holds only memory, as the parent of a checkpoint built on it; restore that one"));
  }
  RETURN_IF_ERROR(CheckTreeOrder(procs, where));
  // Processes whose device state is in their host memory go back to the GPU driver before they
  // run (devices.h): without one, nothing is started.
  std::unique_ptr<gpu::CudaCheckpointApi> gpu_api;
  {
    std::vector<int> cuda;
    for (const image::Process* p : procs) {
      if (p->cuda_checkpointed() && !p->zombie()) cuda.push_back(p->pid());
    }
    if (!cuda.empty()) {
      ASSIGN_OR_RETURN(gpu_api, DriverForRestore(cuda, where));
    } else if (!opts.gpu_map.empty() && !opts.gpu_map_lenient) {
      return absl::InvalidArgumentError(absl::StrCat("--gpu-map: the checkpoint at ", where,
                                                     " holds no process with device state"));
    }
  }
  std::map<int, std::vector<gpu::GpuPair>> gpu_remap;
  if (gpu_api) {
    ASSIGN_OR_RETURN(gpu_remap, PlanGpuRemap(procs, opts.gpu_map, opts.gpu_map_lenient, where));
  }
  if (opts.only_as.has_value()) {
    RETURN_IF_ERROR(CheckOwner(procs, *opts.only_as, where));
    // Its maps would be written by root: a user's checkpoint could map any of the host's ids.
    if (img->meta().container().has_user_ns()) {
      return absl::PermissionDeniedError(absl::StrFormat(
          "restore from %s refused (nothing was restored): it is of a container in a user namespace of its own, "
          "which only root restores (its id maps could name any of the host's ids)",
          where));
    }
  }
  if (procs[0]->zombie()) return absl::DataLossError(where + ": the root process is a zombie (corrupt image)");
  const image::Checkpoint& meta = img->meta();
  // This machine's CPU, XSAVE state and kernel can run the processes (machine/machine.h).
  RETURN_IF_ERROR(machine::CheckFits(meta, procs, where));
  if (!meta.own_pid_ns()) RETURN_IF_ERROR(CheckIdsFree(procs));  // a fresh namespace has every id free
  auto t0 = Clock::now();  // restore time excludes waiting for a dumped zombie to be reaped
  // The dump's network lock (on this host, if it was taken here) holds the connections' packets
  // until this restore's own lock does, and goes with it at the end: claimed meanwhile, so that
  // `cairn check --fix` leaves it (net/claim.h).
  net::LockClaim dump_lock_claim;
  if (!meta.network_lock().empty()) {
    ASSIGN_OR_RETURN(dump_lock_claim, net::LockClaim::Take(meta.network_lock()));
  }

  // The masters, one per description, at the restorer's lowest free numbers (proc/fd_limit.h).
  {
    int highest = 0;
    uint64_t descriptions = 0, pipes = 0;
    std::vector<const image::Process*> holders = procs;
    if (meta.has_in_flight()) holders.push_back(&meta.in_flight());
    for (const image::Process* p : holders) {
      for (const image::Fd& fd : p->fds()) {
        highest = std::max(highest, fd.fd());
        if (fd.is_dup()) continue;
        ++descriptions;
        pipes += fd.kind() == image::Fd::PIPE ? 1 : 0;
      }
    }
    RETURN_IF_ERROR(proc::RaiseDescriptorLimit(proc::DescriptorsToRestore(highest, descriptions, pipes),
                                               absl::StrCat("restore from ", where, " (nothing was restored)")));
    // The restorer holds every master at once, and a copy of each live connection after: its
    // own table grown once now, not a doubling at a time (proc/fd_limit.h).
    absl::Status room = proc::ReserveOwnDescriptors(descriptions + pipes, "the restore's masters");
    if (!room.ok()) CAIRN_LOG_WARN("event=descriptor_room_not_reserved error=\"{}\"", room.ToString());
  }
  CAIRN_LOG_DEBUG("event=restore_stage stage=image_opened");
  // Live TCP connections: their packets are held here too until they exist again, so that
  // a peer's packet that reaches this host first (its address moved here) is dropped and sent
  // again, not answered with a reset. Lifted on every path out (tcp.h).
  // A container's are in its network namespace: taken there once its root exists.
  std::optional<RestoreLock> tcp_lock;
  auto lock_network = [&](pid_t netns_of) -> absl::Status {
    ASSIGN_OR_RETURN(std::optional<RestoreLock> taken, RestoreLock::Take(meta, procs, netns_of));
    if (!taken) return absl::OkStatus();
    tcp_lock.emplace(std::move(*taken));
    CAIRN_LOG_DEBUG("event=restore_stage stage=network_locked");
    return absl::OkStatus();
  };
  if (!meta.has_container()) RETURN_IF_ERROR(lock_network(0));
  // A container's paths mean what they meant inside it: its masters are opened once its root
  // task has made its mounts, under its root (files.h ImageRoot).
  absl::StatusOr<Masters> masters = absl::UnknownError("not opened");
  auto open_masters = [&]() -> absl::Status {
    masters = OpenMasters(*img, procs, meta.has_in_flight() ? &meta.in_flight() : nullptr, opts.inherited);
    CAIRN_LOG_DEBUG("event=restore_stage stage=masters_opened");
    return Annotate(masters.status(), absl::StrCat("restore from ", where, " failed (nothing was left running)"));
  };
  if (!meta.has_container()) RETURN_IF_ERROR(open_masters());

  // A work area free in every saved layout and in our own.
  ASSIGN_OR_RETURN(std::vector<proc::MapEntry> own, proc::ReadMaps(::getpid()));
  std::vector<Range> avoid;
  for (const auto& m : own) avoid.push_back({m.start, m.end});
  for (const image::Process* p : procs) {
    for (const image::Vma& v : p->vmas()) avoid.push_back({v.start(), v.end()});
  }
  ASSIGN_OR_RETURN(uint64_t work_area, FindFreeRange(*procs[0], avoid, kWorkAreaSize));
  avoid.push_back({work_area, work_area + kWorkAreaSize});
  ASSIGN_OR_RETURN(SharedAnonStaging staging, PlanSharedAnon(procs, avoid));
  CAIRN_LOG_DEBUG("event=restore_stage stage=planned");

  pid_t root = procs[0]->pid();
  clone_args args{};
  args.flags = CLONE_CLEAR_SIGHAND;
  // (A container in a PID namespace that was another's is made in the one handed over.)
  if (meta.own_pid_ns() && meta.container().external_pid().empty()) args.flags |= CLONE_NEWPID;
  if (meta.own_mount_ns()) args.flags |= CLONE_NEWNS;
  if (meta.own_ipc_ns()) args.flags |= CLONE_NEWIPC;
  std::optional<ContainerPlan> container;
  UniqueFd container_report, container_report_w;  // the task writes in the table it shares with us
  if (meta.has_container()) {
    ContainerSetup setup = opts.container;
    if (auto net = opts.inherited.find(meta.container().external_net());
        setup.net_ns_fd < 0 && !meta.container().external_net().empty() && net != opts.inherited.end()) {
      setup.net_ns_fd = net->second;
    }
    if (auto pid = opts.inherited.find(meta.container().external_pid());
        setup.pid_ns_fd < 0 && !meta.container().external_pid().empty() && pid != opts.inherited.end()) {
      setup.pid_ns_fd = pid->second;
    }
    absl::StatusOr<ContainerPlan> plan = ContainerPlan::Make(meta.container(), setup);
    if (!plan.ok()) return Annotate(plan.status(), absl::StrCat("restore from ", where, " refused (nothing was restored)"));
    container.emplace(std::move(*plan));
    // Its masters are opened once its mounts are made (under its root), after it exists: it
    // shares the restorer's descriptor table until then, and takes a copy of its own after.
    args.flags |= container->CloneFlags() | CLONE_FILES;
    int ends[2];
    if (::pipe2(ends, O_CLOEXEC | O_NONBLOCK) != 0) return ErrnoStatus("pipe2 for the container's set-up");
    container_report = UniqueFd(ends[0]);
    container_report_w = UniqueFd(ends[1]);
    g_container_plan = &*container;
    g_container_report = ends[1];
  }
  // Only the clone below reads them: cleared on every way out.
  struct ClearPlan {
    ~ClearPlan() {
      g_container_plan = nullptr;
      g_container_report = -1;
    }
  } clear_plan;
  args.exit_signal = SIGCHLD;
  args.set_tid = reinterpret_cast<uint64_t>(&root);
  args.set_tid_size = 1;
  long rc;
  ASSIGN_OR_RETURN(std::string boot, BootId());
  // A time namespace for a job's own, and for processes that used the machine's clocks when
  // they come back on another boot (time_ns.h); on the same boot, the machine's clocks.
  const bool new_clocks = meta.has_time_ns() && !(meta.time_ns().machine_clocks() && meta.time_ns().boot_id() == boot);
  const int net_first = container ? container->NetNsBeforeClone() : -1;
  const int pid_first = container ? container->PidNsBeforeClone() : -1;
  if (new_clocks || net_first >= 0 || pid_first >= 0) {
    std::string offsets = new_clocks ? TimeNamespaceOffsets(meta.time_ns(), boot) : "";
    rc = CloneThroughHelper(args, new_clocks ? &offsets : nullptr, net_first, pid_first, work_area);
    // In a PID namespace that was another's, the killed original waits as a zombie until that
    // namespace's init reaps it (a pod's pause process does at once; a shell only between two
    // of its commands): up to 10 s for it, as CheckIdsFree gives a parent in ours.
    for (int i = 0; i < 200 && rc < 0 && errno == EEXIST && pid_first >= 0; ++i) {
      if (i == 0) CAIRN_LOG_INFO("event=waiting_for_pid pid={} reason=\"in use in the PID namespace handed over\"", root);
      ::usleep(50000);
      rc = CloneThroughHelper(args, new_clocks ? &offsets : nullptr, net_first, pid_first, work_area);
    }
  } else {
    rc = ::syscall(SYS_clone3, &args, sizeof args);
    if (rc == 0) ChildMain(work_area);
  }
  if (rc < 0) {
    if (errno == EEXIST) {
      return absl::AlreadyExistsError(absl::StrCat(
          "pid ", root, " is in use", pid_first >= 0 ? " in the PID namespace handed over (for 10 s: not the original's "
                                                       "zombie, or that namespace's init does not reap it)" : "",
          ": it must be free to restore the checkpoint"));
    }
    if (errno == EPERM) {
      return absl::PermissionDeniedError(absl::StrCat(
          "cannot create a process with pid ", root, ": restore needs root (CAP_CHECKPOINT_RESTORE or CAP_SYS_ADMIN)"));
    }
    return ErrnoStatus(absl::StrCat("clone3 with pid ", root));
  }
  IdMap ids;
  pid_t root_host = static_cast<pid_t>(rc);
  ids.Set(root, root_host);
  Tasks tasks;
  tasks.Add(root_host);
  // A container's new user namespace gets its maps before the task goes on to make its world.
  if (container) {
    absl::Status mapped = container->MapIds(root_host);
    if (!mapped.ok()) {
      return Annotate(mapped, absl::StrCat("restore from ", where, " failed (nothing was left running)"));
    }
  }
  ASSIGN_OR_RETURN(inject::StopInfo stop, inject::WaitStop(root_host));
  container_report_w.Reset();  // it wrote, or never will
  if (stop.kind != inject::StopInfo::Kind::kSignalStop || stop.signal != SIGSTOP) {
    int failed[2] = {-1, 0};
    if (container && ::read(container_report.get(), failed, sizeof failed) == sizeof failed) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "restore from %s failed (nothing was left running): the container's root process could not %s: %s", where,
          container->Describe(failed[0]), std::strerror(failed[1])));
    }
    return absl::InternalError(absl::StrCat("new task ", root, " did not start as expected (state ",
                                            static_cast<int>(stop.kind), ", code ", stop.signal, ")"));
  }
  if (::ptrace(PTRACE_SETOPTIONS, root_host, nullptr,
               reinterpret_cast<void*>(PTRACE_O_TRACECLONE | PTRACE_O_TRACEFORK | PTRACE_O_EXITKILL)) != 0) {
    return ErrnoStatus(absl::StrCat("ptrace(SETOPTIONS) pid ", root_host));
  }
  RETURN_IF_ERROR(inject::SetSigmask(root_host, ~0ULL));
  const std::string& cgroup = opts.cgroup.empty() ? meta.cgroup() : opts.cgroup;
  if (!cgroup.empty()) RETURN_IF_ERROR(job::JoinCgroup(cgroup, root_host));
  if (meta.own_ipc_ns()) RETURN_IF_ERROR(CreateSysvIpc(root_host, *img, meta.ipc()));

  CAIRN_LOG_DEBUG("event=restore_stage stage=root_created");
  // A restorer its runtime placed in the container's cgroups (runc does) fills memory at that
  // cgroup's CPU share, next to none on a busy machine (proc/cpu_share_boost.h): raised until
  // the processes are let go, when the cgroup holds nothing but the restorer and its root task.
  std::optional<proc::CpuShareBoost> boost;
  boost.emplace(std::vector<pid_t>{::getpid(), root_host});
  // A container's root stands in its namespaces with its mounts made: its runtime may set them
  // up further (its hooks), and the image's paths are opened under its root from here on.
  std::optional<ImageRoot> image_root;
  if (container) {
    ASSIGN_OR_RETURN(auto at, ContainerRoot(root_host));
    image_root.emplace(std::move(at.first), std::move(at.second));
  }
  if (container) {
    RETURN_IF_ERROR(lock_network(root_host));
    RETURN_IF_ERROR(container->HandOverTerminals());
  }
  if (opts.notify) RETURN_IF_ERROR(opts.notify("setup-namespaces", root_host));
  if (container) {
    RETURN_IF_ERROR(InContainer(root_host, open_masters));
    // The masters are in the table it shares with the restorer: a copy of its own from here.
    inject::Injector inj(root_host, work_area);
    RETURN_IF_ERROR(inj.Call("unshare(CLONE_FILES) in the container's root", SYS_unshare, CLONE_FILES).status());
  }
  int threads = opts.fill_threads > 0 ? opts.fill_threads
                                      : std::min(8, 2 * static_cast<int>(std::thread::hardware_concurrency()));
  absl::Status built =
      BuildSkeleton(*img, procs, work_area, staging, meta.own_mount_ns() && !container,
                    meta.own_pid_ns() && meta.container().external_pid().empty(), threads,
                    tasks, ids);
  CAIRN_LOG_DEBUG("event=restore_stage stage=skeleton_built");
  // Every task created (in its cgroup, held under ptrace with PTRACE_O_EXITKILL), no memory in yet.
  FaultPoint("restore-building");
  masters->owned.clear();  // every task holds its own copies now
  lazy::LazyHandlers lazy_handlers;  // restore --lazy
  lazy_handlers.page_server = opts.page_server;
  lazy_handlers.token_file = opts.token_file;
  // A job's init holds the fuses of its lazily restored processes, and is restored whole itself
  // (lazy/fuse.h: a fuse cannot take an init down).
  if (meta.own_pid_ns() && lazy::HoldsFuses(procs[0]->comm())) lazy_handlers.fuse_holder = root_host;
  for (const image::Process* p : procs) {
    if (!built.ok()) break;
    if (p->zombie()) continue;
    uint64_t saved = 0;
    for (const image::Vma& v : p->vmas()) {
      for (const image::PageBlock& b : v.blocks()) saved += b.length();
    }
    bool lazy = opts.lazy && saved >= opts.lazy_min_bytes && !(lazy_handlers.fuse_holder != 0 && p == procs[0]);
    built = Annotate(BuildProcess(*img, procs, *p, *masters, LastOfItsTable(procs, p), work_area, staging, threads, lazy ? &lazy_handlers : nullptr, ids),
                     absl::StrCat("pid ", p->pid()));
  }
  if (built.ok()) built = ApplySeals(*masters);
  if (built.ok()) built = lazy_handlers.WaitReady();
  if (built.ok() && meta.own_ipc_ns()) built = RemoveDestroyedSegments(root_host, meta.ipc());
  // Last, after every other injection (each one's trap resets it): a SIGTRAP handler or
  // SIG_IGN, set at syscall stops (inject/sigtrap.h).
  for (const image::Process* p : procs) {
    if (!built.ok()) break;
    if (p->zombie()) continue;
    for (const image::SigAction& a : p->sigactions()) {
      if (a.signo() != SIGTRAP) continue;
      pid_t host = ids.Host(p->pid());
      absl::StatusOr<uint64_t> insn = inject::VdsoSyscallInsn(host);
      built = insn.ok() ? inject::SetSigtrapAction(host, *insn, {a.handler(), a.flags(), a.restorer(), a.mask()})
                        : insn.status();
      built = Annotate(built, absl::StrCat("pid ", p->pid(), ": set its SIGTRAP action"));
    }
  }
  // Live TCP connections leave repair mode before they are verified (repair mode shows
  // options of its own) and before any process runs.
  if (built.ok()) built = FinishConnections(masters->tcp, masters->listeners);
  if (!masters->tcp.empty()) CAIRN_LOG_DEBUG("event=restore_stage stage=connections_finished");
  double verify_seconds = 0;
  if (built.ok() && opts.verify) built = PlantDifferenceForTest(root_host);  // a test hook: only verified
  if (built.ok() && opts.verify) {
    auto v0 = Clock::now();
    VerifyShared shared;
    if (meta.has_in_flight()) shared.in_flight = &meta.in_flight();
    shared.made_scratch = masters->made_scratch;
    shared.vdso_proxied = machine::NeedsVdsoProxy(meta);
    for (const image::Process* p : procs) {
      if (!built.ok()) break;
      bool session_restored = std::any_of(procs.begin(), procs.end(), [&](auto* o) { return o->pid() == p->sid(); });
      if (!p->zombie()) built = VerifyRestored(*p, procs, ids, session_restored, &shared);
    }
    verify_seconds = std::chrono::duration<double>(Clock::now() - v0).count();
  }
  for (auto& s : seals) {
    absl::Status sealed = s->Wait();
    if (built.ok()) built = sealed;
  }
  // The GPU processes' device state back, by the driver's thread in each; their own threads
  // stay held, as every other process's.
  std::set<pid_t> running_already;
  if (built.ok() && gpu_api) {
    std::vector<DeviceProcess> cuda;
    for (const image::Process* p : procs) {
      if (!p->cuda_checkpointed() || p->zombie()) continue;
      DeviceProcess d{ids.Host(p->pid()), p->pid(), {}, {}};
      if (auto it = gpu_remap.find(p->pid()); it != gpu_remap.end()) d.remap = it->second;
      for (const image::Thread& t : p->threads()) d.tids.push_back(ids.Host(t.tid()));
      cuda.push_back(std::move(d));
    }
    absl::StatusOr<std::set<pid_t>> let_go = RestoreDevices(*gpu_api, cuda);
    if (let_go.ok()) {
      running_already = std::move(*let_go);
    } else {
      built = let_go.status();
    }
  }
  // Every process is built and none runs: the caller learns the root's pid (a runtime records
  // its container's init).
  if (built.ok() && opts.notify) built = opts.notify("post-restore", root_host);
  if (!built.ok()) {
    AbortConnections(masters->tcp);  // closed with the processes, they send nothing
    std::string lock;
    if (!meta.network_lock().empty()) {
      lock = absl::StrCat("; the network lock ", meta.network_lock(),
                          " still holds its TCP connections' packets, so that their peers wait for a second restore "
                          "(`cairn check --fix` removes it)");
    }
    return Annotate(built, absl::StrCat("restore from ", where, " failed (nothing was left running", lock, ")"));
  }
  // A process that was stopped (SIGSTOP, SIGTSTP...) stops again with the same signal: sent
  // while every thread is still held, it is taken before any of them runs an instruction.
  // Its action was the default and it was not blocked when it stopped the process, and
  // neither can have changed while the process was stopped.
  for (const image::Process* p : procs) {
    if (p->zombie() || !p->stopped()) continue;
    int sig = p->stop_signal() != 0 ? p->stop_signal() : SIGSTOP;
    // The kernel drops SIGTSTP, SIGTTIN and SIGTTOU sent to a process of an orphaned group
    // (as one restored alone, away from its shell, is): SIGSTOP then, so that it is stopped.
    if (sig != SIGSTOP && GroupOrphaned(ids.Host(p->pid()))) {
      CAIRN_LOG_WARN("event=stop_signal_replaced pid={} signal={} reason=\"its process group is orphaned here: the "
                     "kernel would drop the signal; stopped with SIGSTOP\"",
                     p->pid(), sig);
      sig = SIGSTOP;
    }
    if (::kill(ids.Host(p->pid()), sig) != 0) {
      return ErrnoStatus(absl::StrCat("stop pid ", p->pid(), " again with signal ", sig, " as it was"));
    }
  }
  // The connections exist again: their packets may flow (the dump's lock is on this host, or
  // on another, where there is none to remove here).
  // Both locks (this restore's, unless it is held for the caller, and the dump's) are opened
  // now in one nft run and deleted once the processes run, in another: the delete is the slow
  // part (net/netlock.h).
  std::string network_hold;
  net::LockClaim network_claim;
  std::vector<std::string> locks;
  if (tcp_lock && opts.hold_network) {
    network_claim = tcp_lock->claim();
    network_hold = tcp_lock->Hold();
  } else if (tcp_lock) {
    tcp_lock->Release();
    locks.push_back(tcp_lock->table());
  }
  if (!meta.network_lock().empty()) locks.push_back(meta.network_lock());
  // A container's locks are in its network namespace: the dump's too when it is the same one
  // (the runtime's, handed over); in a new one there is none of the dump's to remove.
  const pid_t locks_netns_of = container ? root_host : 0;
  if (absl::Status opened = net::OpenNetworkLocks(locks, locks_netns_of); !opened.ok()) {
    CAIRN_LOG_WARN("event=network_unlock_failed error=\"{}\"", opened.ToString());
  }
  boost.reset();  // the processes run at the share their runtime gave them
  // Let every process go at once, then turn zombies back into zombies.
  for (const image::Process* p : procs) {
    if (p->zombie()) continue;
    for (const image::Thread& t : p->threads()) {
      if (running_already.count(ids.Host(t.tid())) == 0) RETURN_IF_ERROR(inject::Detach(ids.Host(t.tid()), 0));
    }
  }
  tasks.Release();
  lazy_handlers.Release();  // the processes run: their page handlers may prefetch
  CAIRN_LOG_DEBUG("event=restore_stage stage=running");
  if (absl::Status removed = net::RemoveNetworkLocks(locks, locks_netns_of); !removed.ok()) {
    CAIRN_LOG_WARN("event=network_unlock_failed error=\"{}\"", removed.ToString());
  } else if (tcp_lock) {
    tcp_lock->Removed();
  }
  if (lazy::PageClient* client = lazy::ClientOf(*img)) {
    // The page server serves on until each handler has every page; a lost message only keeps it up.
    if (absl::Status d = client->Done(lazy_handlers.started); !d.ok()) {
      CAIRN_LOG_WARN("event=page_server_not_told why=\"{}\"", std::string(d.message()));
    }
  }
  for (const image::Process* p : procs) {
    if (p->zombie()) RETURN_IF_ERROR(Annotate(ExitAsZombie(*p, work_area, ids), absl::StrCat("zombie ", p->pid())));
  }
  RestoreResult result;
  result.pid = root_host;
  result.job_name = meta.job_name();
  result.processes = static_cast<int>(procs.size());
  for (const image::Process* p : procs) {
    for (const image::Vma& v : p->vmas()) result.bytes += image::PieceBytes(image::ResolveArea(*img, *p, v));
  }
  result.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  result.verify_seconds = verify_seconds;
  result.network_hold = network_hold;
  result.network_claim = network_claim;
  result.dump_network_lock = meta.network_lock();
  CAIRN_LOG_INFO("event=restore pid={} processes={} dir={} bytes={} seconds={:.3f}", root, result.processes, where,
                 result.bytes, result.seconds);
  return result;
}

}  // namespace cairn::restore
