#include "engine/lazy/launch.h"

#include <fcntl.h>
#include <linux/close_range.h>
#include <linux/userfaultfd.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/file_util.h"
#include "common/log.h"
#include "common/status.h"
#include "common/unique_fd.h"
#include "engine/lazy/fuse.h"
#include "engine/lazy/handler.h"
#include "engine/proc/pidfd.h"

namespace cairn::lazy {
namespace {

constexpr size_t kScratchStructs = 1024;

// True when the calling process has one thread: then a forked child may go on running
// ordinary code (no lock can be held by a thread that does not exist in the child).
bool SingleThreaded() {
  std::error_code ec;
  int n = 0;
  for (auto it = std::filesystem::directory_iterator("/proc/self/task", ec); !ec && it != std::filesystem::end(it);
       it.increment(ec)) {
    ++n;
  }
  return !ec && n == 1;
}

constexpr uint64_t kFeatures =
    UFFD_FEATURE_EVENT_FORK | UFFD_FEATURE_EVENT_REMAP | UFFD_FEATURE_EVENT_REMOVE | UFFD_FEATURE_EVENT_UNMAP;

}  // namespace

absl::Status StartLazyHandler(inject::Injector& inj, inject::RemoteScratch& scratch, const std::vector<LazyArea>& areas,
                              const std::string& dir, pid_t host_pid, int image_pid, LazyHandlers* handlers) {
  if (areas.empty()) return absl::OkStatus();
  ASSIGN_OR_RETURN(long rfd, inj.Call("userfaultfd (lazy restore)", SYS_userfaultfd, O_CLOEXEC));
  auto close_remote = [&] { (void)inj.Call("close userfaultfd", SYS_close, static_cast<uint64_t>(rfd)); };
  auto fail = [&](absl::Status s) {
    close_remote();
    return s;
  };
  uffdio_api api{};
  api.api = UFFD_API;
  api.features = kFeatures;
  auto addr = scratch.Put(kScratchStructs, &api, sizeof api);
  if (!addr.ok()) return fail(addr.status());
  if (auto rc = inj.Call("ioctl(UFFDIO_API)", SYS_ioctl, static_cast<uint64_t>(rfd), UFFDIO_API, *addr); !rc.ok()) {
    return fail(absl::FailedPreconditionError(absl::StrCat(
        "restore --lazy needs userfaultfd with fork, remap, remove and unmap events, which this kernel refused (",
        rc.status().message(), "); restore without --lazy")));
  }
  for (const LazyArea& a : areas) {
    uffdio_register reg{};
    reg.range.start = a.vma->start();
    reg.range.len = a.vma->end() - a.vma->start();
    reg.mode = UFFDIO_REGISTER_MODE_MISSING;
    addr = scratch.Put(kScratchStructs, &reg, sizeof reg);
    if (!addr.ok()) return fail(addr.status());
    auto rc = inj.Call(absl::StrFormat("ioctl(UFFDIO_REGISTER %#x-%#x)", a.vma->start(), a.vma->end()), SYS_ioctl,
                       static_cast<uint64_t>(rfd), UFFDIO_REGISTER, *addr);
    if (!rc.ok()) return fail(rc.status());
  }
  auto local = proc::CopyFd(inj.tid(), static_cast<int>(rfd));
  if (!local.ok()) return fail(local.status());
  // From here on, the task's own descriptor is not needed: the handler's copy keeps the
  // registration alive.
  RETURN_IF_ERROR(inj.Call("close userfaultfd", SYS_close, static_cast<uint64_t>(rfd)).status());

  char exe[4096];
  ssize_t n = ::readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) return ErrnoStatus("readlink /proc/self/exe (to start the page handler)");
  exe[n] = '\0';
  std::string pid_s = std::to_string(host_pid), image_pid_s = std::to_string(image_pid);
  int verbosity = spdlog::get_level() <= spdlog::level::debug ? 2 : spdlog::get_level() <= spdlog::level::info ? 1 : 0;
  // The handler says it is ready (image opened, areas resolved) by writing one byte; if it
  // dies first, the restore fails before the process ever runs.
  int ready[2];
  if (::pipe2(ready, O_CLOEXEC) != 0) return ErrnoStatus("pipe (page handler)");
  UniqueFd ready_r(ready[0]), ready_w(ready[1]);
  int go[2];
  if (::pipe2(go, O_CLOEXEC) != 0) return ErrnoStatus("pipe (page handler)");
  UniqueFd go_r(go[0]), go_w(go[1]);
  UniqueFd ufd_keep(::fcntl(local->get(), F_DUPFD_CLOEXEC, 3));
  if (!ufd_keep.valid()) return ErrnoStatus("dup userfaultfd");
  Fuse fuse;
  if (handlers->fuse_holder > 0) {
    if (int at = NextFuseFd(handlers->fuse_holder, handlers->fuses); at >= 0) {
      ASSIGN_OR_RETURN(fuse, MakeFuseIn(handlers->fuse_holder, at, host_pid));
      ++handlers->fuses;
    } else {
      CAIRN_LOG_WARN("event=lazy_fuse_skipped pid={} reason=\"the job's init has no descriptor number free below its "
                     "limit and above {}: its page handler's watcher alone covers it\"",
                     host_pid, kFuseFloor);
    }
  }
  std::string ufd_s = std::to_string(ufd_keep.get()), ready_s = std::to_string(ready_w.get()),
              go_s = std::to_string(go_r.get()), fuse_r_s = std::to_string(fuse.read.get()),
              fuse_w_s = std::to_string(fuse.write.get());
  const char* v_flag = verbosity >= 2 ? "-vv" : verbosity == 1 ? "-v" : nullptr;
  std::vector<const char*> argv = {exe};
  if (v_flag) argv.push_back(v_flag);
  argv.push_back("lazy-pages");
  if (handlers->page_server.empty()) {
    argv.insert(argv.end(), {"--dir", dir.c_str()});
  } else {
    argv.insert(argv.end(), {"--page-server", handlers->page_server.c_str(), "--token-file", handlers->token_file.c_str()});
  }
  for (const char* a : {"--pid", pid_s.c_str(), "--image-pid",
                        image_pid_s.c_str(), "--uffd", ufd_s.c_str(), "--ready-fd", ready_s.c_str(), "--go-fd", go_s.c_str()}) {
    argv.push_back(a);
  }
  if (fuse.read.valid()) {
    argv.insert(argv.end(), {"--fuse-read-fd", fuse_r_s.c_str(), "--fuse-write-fd", fuse_w_s.c_str()});
  }
  argv.push_back(nullptr);
  // A single-threaded restorer forks the handler without exec: no second start of the cairn
  // binary (tens of ms of dynamic linking) before the handler is ready. Otherwise it execs.
  bool no_exec = SingleThreaded() && std::getenv("CAIRN_LAZY_EXEC") == nullptr;
  HandlerOptions hopts;
  hopts.dir = dir;
  hopts.page_server = handlers->page_server;
  hopts.token_file = handlers->token_file;
  hopts.pid = host_pid;
  hopts.image_pid = image_pid;
  hopts.uffd = ufd_keep.get();
  hopts.ready_fd = ready_w.get();
  hopts.go_fd = go_r.get();
  hopts.fuse_read = fuse.read.get();
  hopts.fuse_write = fuse.write.get();
  pid_t mid = ::fork();
  if (mid < 0) return ErrnoStatus("fork (page handler)");
  if (mid == 0) {
    ::setsid();
    pid_t handler = ::fork();
    if (handler != 0) ::_exit(handler < 0 ? 1 : 0);
    if (no_exec) {
      // Nothing of the restorer's may stay open here (a pipe end held by the handler would keep
      // a restored reader from ever seeing end of file), and nothing of it may run at exit.
      std::vector<int> keep = {ufd_keep.get(), ready_w.get(), go_r.get()};
      if (fuse.read.valid()) keep.insert(keep.end(), {fuse.read.get(), fuse.write.get()});
      CloseAllDescriptorsBut(keep);
      ::_exit(ServePages(hopts).ok() ? 0 : 1);
    }
    // Only async-signal-safe calls from here to exec.
    ::syscall(SYS_close_range, 3, ~0U, CLOSE_RANGE_CLOEXEC);
    ::fcntl(ufd_keep.get(), F_SETFD, 0);
    ::fcntl(ready_w.get(), F_SETFD, 0);
    ::fcntl(go_r.get(), F_SETFD, 0);
    if (fuse.read.valid()) {
      ::fcntl(fuse.read.get(), F_SETFD, 0);
      ::fcntl(fuse.write.get(), F_SETFD, 0);
    }
    ::execv(exe, const_cast<char* const*>(argv.data()));
    ::_exit(127);
  }
  int status = 0;
  while (::waitpid(mid, &status, 0) < 0 && errno == EINTR) {
  }
  ready_w.Reset();
  go_r.Reset();
  ufd_keep.Reset();
  fuse.write.Reset();  // only the handler and its watcher hold it
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return absl::InternalError("could not start the page handler for restore --lazy (fork failed)");
  }
  ++handlers->started;
  handlers->go.push_back(std::move(go_w));
  handlers->ready.push_back(std::move(ready_r));
  CAIRN_LOG_DEBUG("event=lazy_handler_started pid={} areas={} exec={}", host_pid, areas.size(), !no_exec);
  return absl::OkStatus();
}

absl::Status LazyHandlers::WaitReady() {
  for (UniqueFd& r : ready) {
    char byte = 0;
    ssize_t got;
    while ((got = ::read(r.get(), &byte, 1)) < 0 && errno == EINTR) {
    }
    if (got != 1) {
      return absl::InternalError(
          "the page handler for restore --lazy exited before it was ready (see its error above)");
    }
  }
  ready.clear();
  return absl::OkStatus();
}

}  // namespace cairn::lazy

