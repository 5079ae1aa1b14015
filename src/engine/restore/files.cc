#include "engine/restore/files.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/syscall.h>
#include <sys/timerfd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <optional>
#include <random>
#include <set>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "common/file_util.h"
#include "common/log.h"
#include "common/status.h"
#include "engine/inject/stop_loop.h"
#include "engine/proc/fds.h"
#include "engine/proc/mountinfo.h"
#include "engine/proc/pty.h"
#include "engine/restore/fd_moves.h"
#include "engine/restore/file_identity.h"
#include "engine/restore/sockets.h"

namespace cairn::restore {

namespace {
// ImageRoot's, for the length of one restore (on its thread).
thread_local int g_image_root = -1;
thread_local int g_image_mounts = -1;
thread_local bool g_in_image_mounts = false;  // InImageMounts's thread
thread_local int g_host_proc = -1;            // and the host's /proc there
thread_local ImageRoot* g_image_root_object = nullptr;
}  // namespace

ImageRoot::ImageRoot(UniqueFd root, UniqueFd mounts) : root_(std::move(root)), mounts_(std::move(mounts)) {
  g_image_root = root_.get();
  g_image_mounts = mounts_.get();
  g_image_root_object = this;
}
ImageRoot::~ImageRoot() {
  worker_.reset();  // (its thread ends before what it entered through is closed)
  g_image_root = -1;
  g_image_mounts = -1;
  g_image_root_object = nullptr;
}

bool ImageRootActive() { return g_image_root >= 0; }

bool InImageMountsNow() { return g_in_image_mounts; }

// Raw calls: setfsuid is per thread, and so it stays (the libc wrappers would not broadcast it,
// but are kept out as for the other id calls here). Back to 0 gives the thread its file
// capabilities again (capabilities(7): the fsuid from nonzero to 0).
CreateAs::CreateAs(uint32_t uid, uint32_t gid) {
  if (!g_in_image_mounts || (uid == 0 && gid == 0)) return;
  ::syscall(SYS_setfsgid, gid);
  ::syscall(SYS_setfsuid, uid);
  set_ = true;
}

CreateAs::~CreateAs() {
  if (!set_) return;
  ::syscall(SYS_setfsuid, 0);
  ::syscall(SYS_setfsgid, 0);
}

int ChmodThroughDescriptor(int fd, mode_t mode) {
  std::string link = absl::StrCat(g_host_proc >= 0 ? "" : "/proc/", "thread-self/fd/", fd);
  return ::fchmodat(g_host_proc >= 0 ? g_host_proc : AT_FDCWD, link.c_str(), mode, 0);
}

namespace {

// The calling thread's mount table, read through `host_proc` (a /proc that shows the thread).
absl::StatusOr<std::vector<proc::MountEntry>> ThreadMounts(int host_proc) {
  UniqueFd table(::openat(host_proc, "thread-self/mountinfo", O_RDONLY | O_CLOEXEC));
  if (!table.valid()) return ErrnoStatus("open the copy's mount table (/proc/thread-self/mountinfo)");
  std::string text;
  char buf[8192];
  for (ssize_t n; (n = ::read(table.get(), buf, sizeof buf)) != 0;) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoStatus("read the copy's mount table");
    text.append(buf, static_cast<size_t>(n));
  }
  return proc::ParseMountTable(text);
}

bool Under(const std::string& path, const std::string& dir) {
  return path == dir || dir == "/" || absl::StartsWith(path, dir + "/");
}

// In a thread with a file system context of its own, inside a mount namespace: makes it a
// private copy and covers every procfs in the copy with an empty read-only tmpfs, then checks
// that none is left uncovered. Magic links live only in procfs. Covered, not detached: a copy
// owned by another user namespace than the container's has its mounts locked (umount refused),
// and a cover cannot be lifted from inside the container anyway.
absl::Status HideProcMounts(int host_proc) {
  if (::unshare(CLONE_NEWNS) != 0) return ErrnoStatus("unshare(CLONE_NEWNS) (a copy of the container's mounts)");
  if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
    return ErrnoStatus("make the copy of the container's mounts private");
  }
  constexpr char kCover[] = "cairn-proc-hidden";
  ASSIGN_OR_RETURN(std::vector<proc::MountEntry> mounts, ThreadMounts(host_proc));
  std::vector<std::string> procs;
  for (const proc::MountEntry& m : mounts) {
    if (m.fstype == "proc") procs.push_back(m.point);
  }
  for (const std::string& point : procs) {
    bool outermost = std::none_of(procs.begin(), procs.end(), [&](const std::string& other) {
      return other != point && Under(point, other);
    });
    if (!outermost) continue;
    struct stat st {};
    if (::lstat(point.c_str(), &st) != 0) return ErrnoStatus("stat " + point + " (a procfs of the container)");
    if (!S_ISDIR(st.st_mode)) {
      return absl::UnimplementedError("the container has a procfs mounted on the file " + point +
                                      ": cairn cannot keep the restorer's path calls away from it");
    }
    if (::mount(kCover, point.c_str(), "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=4k,mode=0555") !=
        0) {
      return ErrnoStatus("cover " + point + " in the copy of the container's mounts");
    }
  }
  // Every procfs is under a cover now, or the restore stops here.
  ASSIGN_OR_RETURN(mounts, ThreadMounts(host_proc));
  for (const proc::MountEntry& m : mounts) {
    if (m.fstype != "proc") continue;
    bool covered = std::any_of(mounts.begin(), mounts.end(), [&](const proc::MountEntry& c) {
      return c.fstype == "tmpfs" && c.source == kCover && c.id > m.id && Under(m.point, c.point);
    });
    if (!covered) return absl::InternalError("a procfs of the container at " + m.point + " stayed reachable");
  }
  return absl::OkStatus();
}

}  // namespace

// InImageMounts's thread: it enters the container's mounts once (a private copy of them with
// their procfs covered, HideProcMounts), then runs each piece of work it is given, one at a time,
// until its ImageRoot goes.
class MountsWorker {
 public:
  explicit MountsWorker(int mounts) : thread_([this, mounts] { Body(mounts); }) {}
  ~MountsWorker() {
    {
      std::lock_guard<std::mutex> l(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

  absl::Status Run(const std::function<absl::Status()>& fn) {
    std::unique_lock<std::mutex> l(mu_);
    job_ = &fn;
    done_ = false;
    cv_.notify_all();
    cv_.wait(l, [this] { return done_; });
    job_ = nullptr;
    return result_;
  }

 private:
  // Enters the container's mounts as `mounts` names them; what it opens lives in *host_proc and *root.
  static absl::Status Enter(int mounts, UniqueFd* host_proc, UniqueFd* root) {
    *host_proc = UniqueFd(::open("/proc", O_PATH | O_DIRECTORY | O_CLOEXEC));
    if (!host_proc->valid()) {
      return ErrnoStatus("open /proc (kept for the thread that enters the restored container's mount namespace)");
    }
    g_host_proc = host_proc->get();
    if (::unshare(CLONE_FS) != 0) return ErrnoStatus("unshare(CLONE_FS) (to enter the restored container's mount namespace)");
    if (::setns(mounts, CLONE_NEWNS) != 0) return ErrnoStatus("enter the restored container's mount namespace (setns)");
    // A copy of it for this thread alone, without its /proc: the paths this thread follows are
    // the image's, and a symlink there could lead through a magic link of the container's
    // /proc (its pid 1 still shares our descriptor table) to anywhere on the host.
    RETURN_IF_ERROR(HideProcMounts(g_host_proc));
    *root = UniqueFd(::open("/", O_PATH | O_DIRECTORY | O_CLOEXEC));
    if (!root->valid()) return ErrnoStatus("open the restored container's root from inside its mount namespace");
    return absl::OkStatus();
  }

  void Body(int mounts) {
    UniqueFd host_proc, root;
    absl::Status entered = Enter(mounts, &host_proc, &root);
    std::optional<ImageRoot> here;
    if (entered.ok()) {
      g_in_image_mounts = true;
      here.emplace(std::move(root));
    }
    std::unique_lock<std::mutex> l(mu_);
    for (;;) {
      cv_.wait(l, [this] { return stop_ || (job_ != nullptr && !done_); });
      if (stop_) return;
      const std::function<absl::Status()>* job = job_;
      l.unlock();
      absl::Status result = entered.ok() ? (*job)() : entered;
      l.lock();
      result_ = result;
      done_ = true;
      cv_.notify_all();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  const std::function<absl::Status()>* job_ = nullptr;
  absl::Status result_;
  bool done_ = false;
  bool stop_ = false;
  std::thread thread_;  // last: it starts once the rest is made
};

MountsWorker& ImageRoot::Worker() {
  if (!worker_) worker_ = std::make_unique<MountsWorker>(mounts_.get());
  return *worker_;
}

absl::Status InImageMounts(const std::function<absl::Status()>& fn) {
  if (g_image_root < 0 || g_in_image_mounts) return fn();
  if (g_image_mounts < 0 || g_image_root_object == nullptr) {
    return absl::InternalError("the container's mount namespace is not at hand on this thread of the restore");
  }
  return g_image_root_object->Worker().Run(fn);
}

int OpenImagePath(const std::string& path, int flags, mode_t mode) {
  if (g_image_root < 0) return ::open(path.c_str(), flags, mode);
  struct {
    uint64_t flags, mode, resolve;
  } how{static_cast<uint64_t>(static_cast<uint32_t>(flags)), (flags & (O_CREAT | O_TMPFILE)) ? mode : 0u,
        0x10 | 0x02 /* RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS */};
  return static_cast<int>(::syscall(SYS_openat2, g_image_root, path.c_str(), &how, sizeof how));
}

absl::StatusOr<UniqueFd> RecreateDeleted(const std::string& path, uint32_t mode) {
  std::string dir = std::filesystem::path(path).parent_path().string();
  std::error_code ec;
  if (dir.empty() || !std::filesystem::is_directory(dir, ec)) dir = "/tmp";
  std::string base = std::filesystem::path(path).filename().string();
  std::random_device rd;
  for (int attempt = 0; attempt < 100; ++attempt) {
    std::string name = attempt == 0 && dir + "/" + base == path ? path
                                                                  : absl::StrFormat("%s/.%s.cairn-%08x", dir, base, rd());
    // The file is used through this descriptor only, and its name removed at once: a name
    // is never opened again (someone who can write the directory could have swapped it).
    UniqueFd fd(::open(name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode & 07777));
    if (!fd.valid()) {
      if (errno == EEXIST) continue;
      return ErrnoStatus("create " + name + " (to hold the content of deleted file " + path + ")");
    }
    if (::unlink(name.c_str()) != 0) return ErrnoStatus("unlink " + name + " (made for deleted file " + path + ")");
    return fd;
  }
  return absl::AlreadyExistsError("cannot find a free name to recreate deleted file " + path);
}

static timespec NsToTimespec(int64_t ns) {
  return {static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
}

absl::Status FillSavedFile(int f, const std::string& content, const image::SavedFile& layout, const std::string& what) {
  if (!layout.sparse()) return WriteAll(f, content, what);
  if (::ftruncate(f, static_cast<off_t>(layout.size())) != 0) {
    return ErrnoStatus(absl::StrCat("ftruncate to ", layout.size(), " bytes (", what, ")"));
  }
  uint64_t from = 0;
  for (const image::Extent& e : layout.extents()) {
    if (e.length() > content.size() - from || e.offset() + e.length() > layout.size()) {
      return absl::DataLossError(absl::StrCat("the saved extents of ", what, " do not match its content (corrupt image)"));
    }
    for (uint64_t done = 0; done < e.length();) {
      ssize_t n = ::pwrite(f, content.data() + from + done, e.length() - done, static_cast<off_t>(e.offset() + done));
      if (n <= 0) return ErrnoStatus(absl::StrCat("write ", what, " at ", e.offset() + done));
      done += static_cast<uint64_t>(n);
    }
    from += e.length();
  }
  // Owner first: chown clears the set-user-ID and set-group-ID bits.
  if (::fchown(f, layout.uid(), layout.gid()) != 0) {
    return ErrnoStatus(absl::StrFormat("chown %s to %u:%u as it was", what, layout.uid(), layout.gid()));
  }
  if (::fchmod(f, layout.mode() & 07777) != 0) {
    return ErrnoStatus(absl::StrFormat("chmod %s to %#o as it was", what, layout.mode() & 07777));
  }
  // Last: writing the content set them to now. (The change time cannot be set.)
  timespec times[2] = {NsToTimespec(layout.atime_ns()), NsToTimespec(layout.mtime_ns())};
  if (::futimens(f, times) != 0) return ErrnoStatus("set the access and modification times of " + what);
  return absl::OkStatus();
}

namespace {

// The record of the description `fd` is or shares, in whichever process of `procs` holds it;
// null when the image holds none (corrupt).
const image::Fd* OriginOf(const std::vector<const image::Process*>& procs, const image::Process& proc,
                          const image::Fd& fd) {
  if (!fd.is_dup()) return &fd;
  pid_t of = fd.dup_of_pid() != 0 ? fd.dup_of_pid() : proc.pid();
  for (const image::Process* p : procs) {
    if (p->pid() != of) continue;
    for (const image::Fd& o : p->fds()) {
      if (o.fd() == fd.dup_of() && !o.is_dup()) return &o;
    }
  }
  return nullptr;
}

// Descriptions the process opens itself (OpenInProcess), not masters of the restorer: what
// they name depends on who opens them (a pidfd's id, a /proc path, /proc/self/ns).
bool OpenedInProcess(const image::Fd& origin) {
  return (origin.kind() == image::Fd::PIDFD && origin.pidfd_pid() != 0) || origin.kind() == image::Fd::PROC_FILE ||
         origin.kind() == image::Fd::NAMESPACE;
}

// A file whose name was removed while another link kept it, by its file handle through a
// mount of its file system (checked to be the same file by the caller).
absl::StatusOr<UniqueFd> OpenByHandle(const image::Fd& fd, int flags, pid_t pid) {
  std::string what = absl::StrFormat("the file of fd %d of pid %d (opened as %s, a name since removed; another link "
                                     "kept it, which must still exist on the same file system to restore it)",
                                     fd.fd(), pid, fd.path());
  return proc::OpenFileHandle(fd.handle_mount(), fd.handle_type(), fd.handle(), flags, what);
}

// Opens one saved description (not a pipe) in the restorer. A deleted file's description
// is a new one of the file made again (`objects`), with the saved flags and offset.
absl::StatusOr<UniqueFd> OpenDescription(const image::Fd& fd, pid_t pid, const Masters& m, std::set<int>* claimed) {
  std::string open_path = fd.path();
  int flags = (fd.flags() & ~(O_CREAT | O_EXCL | O_TRUNC)) | O_NOCTTY | O_CLOEXEC;
  // A file made with O_TMPFILE: the flag (which includes O_DIRECTORY) says how it was created,
  // not how to open it; it is made again as one (MakeFileObject).
  if ((fd.flags() & O_TMPFILE) == O_TMPFILE) flags &= ~O_TMPFILE;
  // A scratch file made again here (OpenScratchFiles) is opened like a deleted file's master.
  const bool made = fd.scratch() && m.objects.count({fd.file().dev(), fd.file().ino()}) != 0;
  if (fd.deleted() || made) {
    auto obj = m.objects.find({fd.file().dev(), fd.file().ino()});
    if (obj == m.objects.end()) {
      return absl::DataLossError(absl::StrFormat("fd %d of pid %d: the deleted file %s is not in the checkpoint "
                                                 "(corrupt image)", fd.fd(), pid, fd.path()));
    }
    // memfd_create's own description does not count as a writer of the file, so the
    // memfd can be executed (execveat, fexecve) while it is open; a description opened
    // again read-write through /proc does count, and exec then fails ETXTBSY. The first
    // read-write description of a memfd is therefore the one memfd_create made again.
    if (fd.memfd() && (fd.flags() & O_ACCMODE) == O_RDWR && claimed->insert(obj->second).second) {
      UniqueFd f(::fcntl(obj->second, F_DUPFD_CLOEXEC, 0));
      if (!f.valid()) return ErrnoStatus(absl::StrFormat("dup the memfd %s (fd %d of pid %d)", fd.path(), fd.fd(), pid));
      if (::fcntl(f.get(), F_SETFL, fd.flags()) != 0) {
        return ErrnoStatus(absl::StrFormat("fcntl(F_SETFL, %#o) on the memfd %s (fd %d of pid %d)", fd.flags(),
                                           fd.path(), fd.fd(), pid));
      }
      if (::lseek(f.get(), fd.pos(), SEEK_SET) != fd.pos()) {
        return ErrnoStatus(absl::StrFormat("lseek %s to %d", fd.path(), fd.pos()));
      }
      return f;
    }
    open_path = absl::StrCat("/proc/self/fd/", obj->second);
  }
  if (fd.kind() == image::Fd::DIRECTORY) flags |= O_DIRECTORY;
  // /proc/self/fd/N is a link to follow (shm_open, for one, opens with O_NOFOLLOW).
  if (fd.deleted() || made) flags &= ~O_NOFOLLOW;
  UniqueFd f;
  if (!fd.handle().empty()) {
    ASSIGN_OR_RETURN(f, OpenByHandle(fd, flags, pid));
  } else {
    // A file made again is reached through the restorer's own descriptor (/proc/self/fd/N).
    const bool own_path = fd.deleted() || made;
    f = UniqueFd(own_path || fd.outside_container() ? ::open(open_path.c_str(), flags) : OpenImagePath(open_path, flags));
  }
  if (!f.valid()) return ErrnoStatus(absl::StrFormat("open %s (fd %d of pid %d)", fd.path(), fd.fd(), pid));
  if (!fd.deleted() && !made) {
    struct stat st {};
    if (::fstat(f.get(), &st) != 0) return ErrnoStatus("stat " + open_path);
    std::string what = absl::StrFormat("%s (fd %d of pid %d)", fd.path(), fd.fd(), pid);
    if (fd.kind() == image::Fd::CHAR_DEVICE) {
      if (!S_ISCHR(st.st_mode) || st.st_rdev != fd.rdev()) {
        return absl::FailedPreconditionError(absl::StrFormat(
            "%s is not the device the process had open at checkpoint time (device %u:%u here, %u:%u then)", what,
            major(st.st_rdev), minor(st.st_rdev), major(fd.rdev()), minor(fd.rdev())));
      }
    } else {
      // A file the kernel generates (/proc/sys/..., /proc/meminfo, /sys/...) is found by its name
      // alone; never one of a process's /proc entry (a PROC_FILE, which its process opens).
      if (proc::ProcessEntryPath(fd.path()) || !KernelGeneratedFile(f.get())) {
        RETURN_IF_ERROR(CheckSameFile(st, fd.file(), what));
      }
    }
  }
  if (fd.kind() == image::Fd::REGULAR && fd.pos() != 0 && ::lseek(f.get(), fd.pos(), SEEK_SET) != fd.pos()) {
    return ErrnoStatus(absl::StrFormat("lseek %s to %d", open_path, fd.pos()));
  }
  return f;
}

// A deleted file or memfd as the checkpoint describes it: where its content is, and how
// to make it again.
struct FileObject {
  std::string path;
  bool memfd = false;
  uint32_t seals = 0;
  uint32_t mode = 0;  // from a descriptor's record; areas do not keep it
  bool tmpfile = false;  // made with O_TMPFILE
  bool scratch = false;  // a scratch file whose name is gone: made again under it (ScratchFile)
  const image::Fd* fd_content = nullptr;
  const image::Vma* vma_content = nullptr;
};

// Creates the scratch file `path` (under /tmp, /var/tmp or /dev/shm, no ".." in it) empty and
// exclusively, with the directories missing on the way (0700, the file's owner's); no symlink
// is followed. Its content, owner and mode come after (FillSavedFile).
// The directory of the scratch path `path` (made as MakeScratchFile says), and the name in it.
absl::StatusOr<std::pair<UniqueFd, std::string>> ScratchDir(const std::string& path, const image::SavedFile& owner) {
  std::string root;
  for (const char* dir : {"/tmp", "/var/tmp", "/dev/shm"}) {
    if (absl::StartsWith(path, absl::StrCat(dir, "/"))) root = dir;
  }
  std::vector<std::string> parts = absl::StrSplit(path.substr(root.size()), '/', absl::SkipEmpty());
  if (root.empty() || parts.empty() || std::find(parts.begin(), parts.end(), "..") != parts.end() ||
      std::find(parts.begin(), parts.end(), ".") != parts.end()) {
    return absl::DataLossError(absl::StrCat("scratch file ", path, " is not under /tmp, /var/tmp or /dev/shm (corrupt image)"));
  }
  UniqueFd at(::open(root.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!at.valid()) return ErrnoStatus("open " + root + " (to make " + path + " again)");
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    if (::mkdirat(at.get(), parts[i].c_str(), 0700) == 0) {
      if (::fchownat(at.get(), parts[i].c_str(), owner.uid(), owner.gid(), AT_SYMLINK_NOFOLLOW) != 0) {
        return ErrnoStatus("chown the directory " + parts[i] + " made for " + path);
      }
    } else if (errno != EEXIST) {
      return ErrnoStatus(absl::StrCat("make the directory ", parts[i], " (for ", path, ")"));
    }
    UniqueFd next(::openat(at.get(), parts[i].c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!next.valid()) return ErrnoStatus(absl::StrCat("open the directory ", parts[i], " (for ", path, "; no symlink)"));
    at = std::move(next);
  }
  return std::pair<UniqueFd, std::string>(std::move(at), parts.back());
}

absl::StatusOr<UniqueFd> MakeScratchFile(const std::string& path, const image::SavedFile& owner) {
  ASSIGN_OR_RETURN(auto dir, ScratchDir(path, owner));
  UniqueFd f(::openat(dir.first.get(), dir.second.c_str(), O_CREAT | O_EXCL | O_RDWR | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (!f.valid()) return ErrnoStatus("make the scratch file " + path + " again");
  return f;
}

// Makes one deleted file or memfd again, with its content, as a descriptor of the restorer.
absl::StatusOr<UniqueFd> MakeFileObject(const image::ImageReader& img, const FileObject& o) {
  if (ImageRootActive() && !o.memfd && !InImageMountsNow()) {
    // Made again next to its old name, which is the container's.
    absl::StatusOr<UniqueFd> made = absl::UnknownError("not made");
    RETURN_IF_ERROR(InImageMounts([&] {
      made = MakeFileObject(img, o);
      return made.status();
    }));
    return made;
  }
  std::string content;
  const image::SavedFile* layout = nullptr;
  if (o.fd_content != nullptr) {
    ASSIGN_OR_RETURN(content, img.FileContent(*o.fd_content));
    layout = &o.fd_content->saved_file();
  } else if (o.vma_content != nullptr) {
    ASSIGN_OR_RETURN(content, img.FileContent(*o.vma_content));
    layout = &o.vma_content->saved_file();
  } else {
    return absl::DataLossError(absl::StrCat(img.dir(), ": no saved content for deleted file ", o.path,
                                            " (corrupt image)"));
  }
  if (o.memfd) {
    std::string name = o.path.substr(std::string("/memfd:").size());
    UniqueFd f(::memfd_create(name.c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING));
    if (!f.valid()) return ErrnoStatus("memfd_create " + name);
    RETURN_IF_ERROR(FillSavedFile(f.get(), content, *layout, o.path));
    if (!layout->sparse() && o.mode != 0 && ::fchmod(f.get(), o.mode & 07777) != 0) return ErrnoStatus("fchmod " + o.path);
    return f;
  }
  if (o.tmpfile) {
    // O_TMPFILE: a nameless file in the same directory, which linkat(2) can give a name (an
    // unlinked file cannot have one again). One made with O_TMPFILE | O_EXCL could not be
    // linked; nothing shows that flag afterwards (the kernel drops O_EXCL from the open
    // flags), so it comes back linkable.
    std::string dir = std::filesystem::path(o.path).parent_path().string();
    UniqueFd f;
    {
      CreateAs owner(layout->uid(), layout->gid());
      f = UniqueFd(::open(dir.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, o.mode != 0 ? o.mode & 07777 : 0600));
    }
    if (!f.valid()) return ErrnoStatus("open(O_TMPFILE) in " + dir + " (for " + o.path + ")");
    RETURN_IF_ERROR(FillSavedFile(f.get(), content, *layout, o.path));
    return f;
  }
  if (o.scratch) {
    ASSIGN_OR_RETURN(UniqueFd f, MakeScratchFile(o.path, *layout));
    RETURN_IF_ERROR(FillSavedFile(f.get(), content, *layout, o.path));
    return f;
  }
  absl::StatusOr<UniqueFd> made = absl::UnknownError("not made");
  {
    CreateAs owner(layout->uid(), layout->gid());
    made = RecreateDeleted(o.path, o.mode != 0 ? o.mode : 0600);
  }
  ASSIGN_OR_RETURN(UniqueFd f, std::move(made));
  RETURN_IF_ERROR(FillSavedFile(f.get(), content, *layout, o.path));
  return f;
}

// The scratch files of the checkpoint (dump/scratch_files.h) whose name is gone here, made
// again with their content, once each, as masters: their descriptors and mapped areas use
// these (as a deleted file's do). One whose name exists is the one used, as any file's.
absl::Status OpenScratchFiles(const image::ImageReader& img, const std::vector<const image::Process*>& procs,
                              Masters* m) {
  std::map<std::pair<uint64_t, uint64_t>, FileObject> missing;
  auto consider = [&](const std::string& path, const image::FileId& id) -> FileObject* {
    std::pair<uint64_t, uint64_t> key{id.dev(), id.ino()};
    if (m->objects.count(key) != 0) return nullptr;
    auto it = missing.find(key);
    if (it != missing.end()) return &it->second;
    struct stat st {};
    if (::lstat(path.c_str(), &st) == 0 || errno != ENOENT) return nullptr;
    FileObject& o = missing[key];
    o.path = path;
    o.scratch = true;
    return &o;
  };
  for (const image::Process* p : procs) {
    for (const image::Vma& v : p->vmas()) {
      if (!v.scratch()) continue;
      FileObject* o = consider(v.path(), v.file());
      if (o != nullptr && o->vma_content == nullptr && v.content_xxh3() != 0) o->vma_content = &v;
    }
    for (const image::Fd& fd : p->fds()) {
      if (fd.is_dup() || !fd.scratch() || fd.kind() != image::Fd::REGULAR) continue;  // a FIFO: OpenFifo
      FileObject* o = consider(fd.path(), fd.file());
      if (o != nullptr && o->fd_content == nullptr && fd.content_xxh3() != 0) o->fd_content = &fd;
    }
  }
  for (const auto& [key, o] : missing) {
    ASSIGN_OR_RETURN(UniqueFd f, MakeFileObject(img, o));
    int n = ::fcntl(f.get(), F_DUPFD_CLOEXEC, m->base);
    if (n < 0) return ErrnoStatus(absl::StrFormat("fcntl(F_DUPFD) above %d for %s", m->base, o.path));
    m->owned.emplace_back(n);
    m->objects[key] = n;
    struct stat st {};
    if (::fstat(f.get(), &st) != 0) return ErrnoStatus("stat the scratch file made again at " + o.path);
    m->made_scratch[key] = {st.st_dev, st.st_ino};
    CAIRN_LOG_INFO("event=scratch_file_made path={} reason=\"the checkpoint's processes held it; its name was gone here\"",
                   o.path);
  }
  return absl::OkStatus();
}

// Makes every deleted file and memfd of the checkpoint again, once each, as masters.
absl::Status OpenFileObjects(const image::ImageReader& img, const std::vector<const image::Process*>& procs,
                             Masters* m) {
  std::map<std::pair<uint64_t, uint64_t>, FileObject> objects;
  for (const image::Process* p : procs) {
    for (const image::Vma& v : p->vmas()) {
      if (!v.file_deleted()) continue;
      FileObject& o = objects[{v.file().dev(), v.file().ino()}];
      o.path = v.path();
      o.memfd = v.memfd();
      o.seals = v.seals();
      if (o.vma_content == nullptr && v.content_xxh3() != 0) o.vma_content = &v;
    }
    for (const image::Fd& fd : p->fds()) {
      if (fd.is_dup() || !fd.deleted() || fd.kind() == image::Fd::FIFO) continue;  // a FIFO: OpenFifo
      FileObject& o = objects[{fd.file().dev(), fd.file().ino()}];
      o.path = fd.path();
      o.memfd = fd.memfd();
      o.seals = fd.seals();
      o.mode = fd.mode();
      if ((fd.flags() & O_TMPFILE) == O_TMPFILE) o.tmpfile = true;
      if (o.fd_content == nullptr && fd.content_xxh3() != 0) o.fd_content = &fd;
    }
  }
  for (const auto& [key, o] : objects) {
    ASSIGN_OR_RETURN(UniqueFd f, MakeFileObject(img, o));
    int n = ::fcntl(f.get(), F_DUPFD_CLOEXEC, m->base);
    if (n < 0) return ErrnoStatus(absl::StrFormat("fcntl(F_DUPFD) above %d for %s", m->base, o.path));
    m->owned.emplace_back(n);
    m->objects[key] = n;
    if (o.memfd && o.seals != 0) m->seals.emplace_back(std::move(f), o.seals);
  }
  return absl::OkStatus();
}

// Linux 3.17+ with CONFIG_CHECKPOINT_RESTORE. Defined in <linux/timerfd.h>, which cannot
// be included together with glibc's <sys/timerfd.h>.
#ifndef TFD_IOC_SET_TICKS
#define TFD_IOC_SET_TICKS _IOW('T', 0, uint64_t)
#endif

bool IsKernelObject(image::Fd::Kind kind) {
  return kind == image::Fd::EVENTFD || kind == image::Fd::TIMERFD || kind == image::Fd::SIGNALFD ||
         kind == image::Fd::EPOLL || kind == image::Fd::INOTIFY;
}

// Adds the saved watches to the new inotify instance `f`, each with the watch descriptor
// the process knows it by. The kernel hands out watch descriptors in increasing order, so
// the numbers before each saved one are used up by a watch on a scratch directory, added
// and removed again; the IN_IGNORED events that leaves are read off at the end.
absl::Status AddInotifyWatches(int f, const image::Fd& fd, pid_t pid) {
  std::vector<image::InotifyWatch> watches(fd.inotify().begin(), fd.inotify().end());
  std::sort(watches.begin(), watches.end(), [](const auto& a, const auto& b) { return a.wd() < b.wd(); });
  std::string scratch;
  auto cleanup = [&] {
    if (!scratch.empty()) ::rmdir(scratch.c_str());
  };
  if (ImageRootActive() && !watches.empty() && !InImageMountsNow()) {
    // The watched paths are the container's.
    return InImageMounts([&] { return AddInotifyWatches(f, fd, pid); });
  }
  int next = 1;
  for (const image::InotifyWatch& w : watches) {
    auto where = [&] { return absl::StrFormat("watch %d (%s) of the inotify at fd %d of pid %d", w.wd(), w.path(), fd.fd(), pid); };
    struct stat st {};
    // A container's root file system may be its runtime's fresh copy (another node): its files are
    // the same by their paths, not their inodes.
    bool same = ::stat(w.path().c_str(), &st) == 0 &&
                (ImageRootActive() || (st.st_ino == w.file().ino() && st.st_dev == w.file().dev()));
    if (!same) {
      cleanup();
      return absl::FailedPreconditionError(absl::StrFormat(
          "%s is not the file the process watched at checkpoint time (it is missing or was replaced); restore "
          "needs the same file",
          where()));
    }
    while (next < w.wd()) {
      if (scratch.empty()) {
        char tmpl[] = "/tmp/.cairn-inotify-XXXXXX";
        if (::mkdtemp(tmpl) == nullptr) return ErrnoStatus("mkdtemp (to number the watches of " + where() + ")");
        scratch = tmpl;
      }
      int wd = ::inotify_add_watch(f, scratch.c_str(), IN_ATTRIB);
      if (wd < 0 || ::inotify_rm_watch(f, wd) != 0) {
        int err = errno;
        cleanup();
        return ErrnoStatus("inotify_add_watch on a scratch directory (to number the watches of " + where() + ")", err);
      }
      next = wd + 1;
    }
    int wd = ::inotify_add_watch(f, w.path().c_str(), w.mask());
    if (wd != w.wd()) {
      int err = errno;
      cleanup();
      if (wd < 0) return ErrnoStatus(absl::StrFormat("inotify_add_watch(%s, %#x) for %s", w.path(), w.mask(), where()), err);
      return absl::InternalError(absl::StrFormat("%s came back as watch %d (two watches on one file?)", where(), wd));
    }
    next = wd + 1;
  }
  cleanup();
  // The scratch watches' IN_IGNORED events.
  char buf[4096];
  while (::read(f, buf, sizeof buf) > 0) {
  }
  return absl::OkStatus();
}

timespec ToTimespec(uint64_t ns) {
  return {static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
}

// Arms the new timerfd `f` as the saved one was, and gives it its unread expirations.
absl::Status SetTimerfd(int f, const image::Fd& fd, pid_t pid) {
  const image::TimerfdState& t = fd.timerfd();
  auto where = [&] { return absl::StrFormat("the timerfd at fd %d of pid %d", fd.fd(), pid); };
  itimerspec its{ToTimespec(t.interval_ns()), ToTimespec(t.value_ns())};
  int flags = 0;
  // A TFD_TIMER_ABSTIME timer on a wall clock keeps its wall-clock expiry across the
  // checkpoint (and may fire at once if that passed meanwhile). Other clocks do not
  // carry over between boots or machines: their timers resume with the time they had left.
  bool wall = t.clock() == CLOCK_REALTIME || t.clock() == CLOCK_REALTIME_ALARM;
  if (t.value_ns() != 0 && wall && (t.settime_flags() & TFD_TIMER_ABSTIME) != 0) {
    its.it_value = ToTimespec(static_cast<uint64_t>(t.clock_ns()) + t.value_ns());
    flags = t.settime_flags() & (TFD_TIMER_ABSTIME | TFD_TIMER_CANCEL_ON_SET);
  }
  if ((t.value_ns() != 0 || t.interval_ns() != 0) && ::timerfd_settime(f, flags, &its, nullptr) != 0) {
    return ErrnoStatus("timerfd_settime on " + where());
  }
  if (t.ticks() == 0) return absl::OkStatus();
  uint64_t ticks = t.ticks();
  if (::ioctl(f, TFD_IOC_SET_TICKS, &ticks) == 0) return absl::OkStatus();
  if (errno != ENOTTY) return ErrnoStatus(absl::StrCat("ioctl(TFD_IOC_SET_TICKS, ", ticks, ") on ", where()));
  // A kernel without CONFIG_CHECKPOINT_RESTORE cannot set the count. A one-shot timer has
  // at most one expiration to deliver: arming it to fire now gives exactly that. A
  // periodic one delivers a single expiration at once, and its next ones follow at its
  // period from now: the other ticks-1 unread expirations and its phase are lost.
  CAIRN_LOG_WARN("event=timerfd_ticks_approximated pid={} fd={} saved_ticks={} restored_ticks=1 "
                 "reason=\"the kernel has no TFD_IOC_SET_TICKS\"",
                 pid, fd.fd(), ticks);
  itimerspec now{ToTimespec(t.interval_ns()), {0, 1}};
  if (::timerfd_settime(f, 0, &now, nullptr) != 0) return ErrnoStatus("timerfd_settime (fire now) on " + where());
  return absl::OkStatus();
}

// Creates one saved kernel object (eventfd, timerfd, signalfd, empty epoll) in the restorer.
absl::StatusOr<UniqueFd> CreateKernelObject(const image::Fd& fd, pid_t pid) {
  std::string what;
  UniqueFd f;
  switch (fd.kind()) {
    case image::Fd::EVENTFD: {
      what = "eventfd";
      f = UniqueFd(::eventfd(0, EFD_CLOEXEC | (fd.eventfd().semaphore() ? EFD_SEMAPHORE : 0)));
      // eventfd(2) takes an unsigned int; the counter is 64-bit.
      uint64_t count = fd.eventfd().count();
      if (f.valid() && count != 0 && ::write(f.get(), &count, sizeof count) != sizeof count) {
        return ErrnoStatus(absl::StrFormat("write count %u to the eventfd for fd %d of pid %d", count, fd.fd(), pid));
      }
      break;
    }
    case image::Fd::TIMERFD:
      what = "timerfd_create";
      f = UniqueFd(::timerfd_create(fd.timerfd().clock(), TFD_CLOEXEC));
      if (f.valid()) RETURN_IF_ERROR(SetTimerfd(f.get(), fd, pid));
      break;
    case image::Fd::SIGNALFD: {
      what = "signalfd";
      uint64_t mask = fd.signalfd_mask();  // the kernel's sigset_t: 8 bytes on x86-64
      f = UniqueFd(static_cast<int>(::syscall(SYS_signalfd4, -1, &mask, sizeof mask, SFD_CLOEXEC)));
      break;
    }
    case image::Fd::EPOLL:
      what = "epoll_create1";
      f = UniqueFd(::epoll_create1(EPOLL_CLOEXEC));
      break;
    case image::Fd::INOTIFY:
      what = "inotify_init1";
      f = UniqueFd(::inotify_init1(IN_CLOEXEC | IN_NONBLOCK));
      if (f.valid()) RETURN_IF_ERROR(AddInotifyWatches(f.get(), fd, pid));
      break;
    default:
      return absl::InternalError(absl::StrFormat("fd %d of pid %d is not a kernel object", fd.fd(), pid));
  }
  if (!f.valid()) return ErrnoStatus(absl::StrFormat("%s (fd %d of pid %d)", what, fd.fd(), pid));
  // O_NONBLOCK (and any other status flag the process set with F_SETFL).
  if (::fcntl(f.get(), F_SETFL, fd.flags()) != 0) {
    return ErrnoStatus(absl::StrFormat("fcntl(F_SETFL, %#o) on the %s for fd %d of pid %d", fd.flags(), what,
                                       fd.fd(), pid));
  }
  return f;
}

// Opens one end of a named FIFO. The first time a FIFO is met, the restorer opens it for
// reading and writing (which never blocks), checks it is the same FIFO, and puts back the
// bytes that waited in it; with that hold, each saved end opens without blocking, and
// takes its saved status flags after. The holds are dropped once every end is open.
// A FIFO whose name was removed while it was open, made again: in a directory of our own (0700,
// root's: nothing can be swapped in there), opened for reading and writing (the restorer's hold),
// its name and the directory removed at once, then given the saved owner and mode.
absl::StatusOr<UniqueFd> MakeUnlinkedFifo(const image::Fd& fd, const std::string& what) {
  char tmpl[] = "/tmp/cairn-fifo-XXXXXX";
  if (::mkdtemp(tmpl) == nullptr) return ErrnoStatus("make a directory for " + what);
  std::string dir = tmpl;
  std::string path = dir + "/fifo";
  absl::Status st = absl::OkStatus();
  UniqueFd h;
  if (::mkfifo(path.c_str(), 0600) != 0) {
    st = ErrnoStatus("make " + what + " again (mkfifo " + path + ")");
  } else {
    h = UniqueFd(::open(path.c_str(), O_RDWR | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC));
    if (!h.valid()) st = ErrnoStatus("open " + what + " made again at " + path);
    ::unlink(path.c_str());
  }
  ::rmdir(dir.c_str());
  RETURN_IF_ERROR(st);
  if (::fchown(h.get(), fd.saved_file().uid(), fd.saved_file().gid()) != 0 || ::fchmod(h.get(), fd.mode() & 07777) != 0) {
    return ErrnoStatus("give " + what + " its owner and mode back");
  }
  return h;
}

absl::StatusOr<UniqueFd> OpenFifo(const image::ImageReader& img, const image::Fd& fd, pid_t pid,
                                  std::map<uint64_t, UniqueFd>* holds) {
  auto where = [&] { return absl::StrFormat("the FIFO %s (fd %d of pid %d)", fd.path(), fd.fd(), pid); };
  auto hold = holds->find(fd.pipe_id());
  if (hold == holds->end() && fd.deleted()) {
    ASSIGN_OR_RETURN(UniqueFd h, MakeUnlinkedFifo(fd, where()));
    hold = holds->emplace(fd.pipe_id(), std::move(h)).first;
  }
  struct stat named {};
  if (hold == holds->end() && fd.scratch() && ::lstat(fd.path().c_str(), &named) != 0 && errno == ENOENT) {
    // In the scratch space, its name gone (dump/scratch_files.h): made again there.
    ASSIGN_OR_RETURN(auto dir, ScratchDir(fd.path(), fd.saved_file()));
    if (::mkfifoat(dir.first.get(), dir.second.c_str(), 0600) != 0) return ErrnoStatus("make " + where() + " again");
    UniqueFd h(::openat(dir.first.get(), dir.second.c_str(), O_RDWR | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC));
    if (!h.valid()) return ErrnoStatus("open " + where() + ", made again");
    if (::fchown(h.get(), fd.saved_file().uid(), fd.saved_file().gid()) != 0 || ::fchmod(h.get(), fd.mode() & 07777) != 0) {
      return ErrnoStatus("give " + where() + " its owner and mode back");
    }
    CAIRN_LOG_INFO("event=scratch_file_made path={} reason=\"a FIFO the checkpoint's processes held; its name was gone here\"",
                   fd.path());
    hold = holds->emplace(fd.pipe_id(), std::move(h)).first;
  }
  if (hold == holds->end()) {
    UniqueFd h(OpenImagePath(fd.path(), O_RDWR | O_NONBLOCK | O_CLOEXEC));
    if (!h.valid()) return ErrnoStatus("open " + where());
    struct stat st {};
    if (::fstat(h.get(), &st) != 0) return ErrnoStatus("stat " + where());
    if (!S_ISFIFO(st.st_mode)) {
      return absl::FailedPreconditionError(
          absl::StrFormat("%s is not a FIFO any more: it was replaced since; restore needs the same FIFO", where()));
    }
    RETURN_IF_ERROR(CheckSameFile(st, fd.file(), where()));
    hold = holds->emplace(fd.pipe_id(), std::move(h)).first;
  }
  if (fd.pipe_size() != 0 && ::fcntl(hold->second.get(), F_SETPIPE_SZ, fd.pipe_size()) < 0) {
    return ErrnoStatus(absl::StrFormat("F_SETPIPE_SZ %d on %s", fd.pipe_size(), where()));
  }
  ASSIGN_OR_RETURN(std::string content, img.FileContent(fd));
  if (!content.empty()) {
    RETURN_IF_ERROR(WriteAll(hold->second.get(), content, where()));
    // Writing into a FIFO makes it modified now; it was not, by the process.
    if (fd.file().mtime_ns() != 0) {
      timespec times[2] = {{0, UTIME_OMIT}, NsToTimespec(fd.file().mtime_ns())};
      if (::futimens(hold->second.get(), times) != 0) return ErrnoStatus("set the modification time of " + where());
    }
  }
  int flags = (fd.flags() & ~(O_CREAT | O_EXCL | O_TRUNC)) | O_NONBLOCK | O_CLOEXEC;
  // One whose name is gone is opened again through the hold.
  std::string path = fd.deleted() ? absl::StrCat("/proc/self/fd/", hold->second.get()) : fd.path();
  if (fd.deleted()) flags &= ~O_NOFOLLOW;
  UniqueFd f(fd.deleted() ? ::open(path.c_str(), flags) : OpenImagePath(path, flags));
  if (!f.valid()) return ErrnoStatus("open " + where());
  if (::fcntl(f.get(), F_SETFL, fd.flags()) != 0) return ErrnoStatus("fcntl(F_SETFL) on " + where());
  return f;
}

// A pidfd of a process that has exited and been reaped: one of a child of ours that exits at
// once, reaped after the pidfd is taken. Its flags (PIDFD_NONBLOCK) as saved.
absl::StatusOr<UniqueFd> DeadPidfd(const image::Fd& fd, pid_t pid) {
  pid_t child = ::fork();
  if (child < 0) return ErrnoStatus(absl::StrFormat("fork (for the pidfd at fd %d of pid %d)", fd.fd(), pid));
  if (child == 0) ::_exit(0);
  UniqueFd f(static_cast<int>(::syscall(SYS_pidfd_open, child, 0)));
  int open_errno = errno;
  int status;
  while (::waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  if (!f.valid()) return ErrnoStatus(absl::StrFormat("pidfd_open (for fd %d of pid %d)", fd.fd(), pid), open_errno);
  if (::fcntl(f.get(), F_SETFL, fd.flags() & O_NONBLOCK) != 0) {
    return ErrnoStatus(absl::StrFormat("fcntl(F_SETFL) on the pidfd for fd %d of pid %d", fd.fd(), pid));
  }
  return f;
}

struct flock LockRange(const image::FileLock& l) {
  struct flock fl{};
  fl.l_type = l.write() ? F_WRLCK : F_RDLCK;
  fl.l_whence = SEEK_SET;
  fl.l_start = l.start();
  fl.l_len = l.end() < 0 ? 0 : l.end() - l.start() + 1;
  return fl;
}

// The process of the checkpoint that takes flock or lease `l` of the description of
// `holder`'s `fd` again, and its descriptor number for that description: the process that
// took it (/proc/locks names it) when it holds the description. A lease whose taker is not
// found is taken by the holder: taken in the restorer, it would name the restorer as its
// owner and send it the signal that the lease is being broken.
std::optional<std::pair<pid_t, int>> LockTaker(const std::vector<const image::Process*>& procs,
                                               pid_t holder, const image::Fd& fd, const image::FileLock& l) {
  if (l.kind() != image::FileLock::FLOCK && l.kind() != image::FileLock::LEASE) return std::nullopt;
  // (Descriptions only messages in flight hold have holder 0, no process: like a lock whose
  // taker is unknown, 0, theirs are taken in the restorer.)
  if (holder != 0 && l.pid() == holder) return std::make_pair(holder, fd.fd());
  for (const image::Process* p : procs) {
    if (l.pid() == 0 || p->pid() != l.pid()) continue;
    for (const image::Fd& f : p->fds()) {
      pid_t of = f.dup_of_pid() != 0 ? f.dup_of_pid() : p->pid();
      if (f.is_dup() && of == holder && f.dup_of() == fd.fd()) return std::make_pair(p->pid(), f.fd());
    }
  }
  if (l.kind() == image::FileLock::LEASE) return std::make_pair(holder, fd.fd());
  return std::nullopt;
}

absl::Status TakeDescriptionLocks(int master, const image::Fd& fd, pid_t pid,
                                  const std::vector<const image::Process*>& procs) {
  for (const image::FileLock& l : fd.locks()) {
    int rc = 0;
    if (LockTaker(procs, pid, fd, l)) continue;  // taken by its taker (RestoreProcessLocks)
    if (l.kind() == image::FileLock::FLOCK) {
      rc = ::flock(master, (l.write() ? LOCK_EX : LOCK_SH) | LOCK_NB);
    } else if (l.kind() == image::FileLock::OFD) {
      struct flock fl = LockRange(l);
      rc = ::fcntl(master, F_OFD_SETLK, &fl);
    } else {
      continue;  // POSIX locks are taken by the process itself (RestorePosixLocks)
    }
    if (rc != 0) {
      return ErrnoStatus(absl::StrFormat("take the %s lock of fd %d of pid %d on %s (another process may hold a "
                                         "conflicting lock now)",
                                         l.kind() == image::FileLock::FLOCK ? "flock" : "OFD", fd.fd(), pid, fd.path()));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status RestoreProcessLocks(inject::Injector& inj, inject::RemoteScratch& scratch,
                                 const std::vector<const image::Process*>& procs, const image::Process& proc,
                                 bool posix) {
  for (const image::Process* holder : procs) {
    for (const image::Fd& fd : holder->fds()) {
      for (const image::FileLock& l : fd.locks()) {
        auto taker = LockTaker(procs, holder->pid(), fd, l);
        if (!taker || taker->first != proc.pid()) continue;
        if (l.kind() == image::FileLock::LEASE) {
          RETURN_IF_ERROR(inj.Call(absl::StrFormat("fcntl(F_SETLEASE) on fd %d (%s): the file may be open elsewhere "
                                                   "now (a read lease needs no writer, a write lease no other opener)",
                                                   taker->second, fd.path()),
                                   SYS_fcntl, static_cast<uint64_t>(taker->second), F_SETLEASE,
                                   static_cast<uint64_t>(l.write() ? F_WRLCK : F_RDLCK))
                              .status());
          continue;
        }
        RETURN_IF_ERROR(inj.Call(absl::StrFormat("flock on fd %d (%s): another process may hold a conflicting lock "
                                                 "now", taker->second, fd.path()),
                                 SYS_flock, static_cast<uint64_t>(taker->second),
                                 static_cast<uint64_t>((l.write() ? LOCK_EX : LOCK_SH) | LOCK_NB))
                            .status());
      }
    }
  }
  if (!posix) return absl::OkStatus();
  for (const image::Fd& fd : proc.fds()) {
    for (const image::FileLock& l : fd.locks()) {
      if (l.kind() != image::FileLock::POSIX) continue;
      struct flock fl = LockRange(l);
      ASSIGN_OR_RETURN(uint64_t addr, scratch.Put(0, &fl, sizeof fl));
      RETURN_IF_ERROR(inj.Call(absl::StrFormat("fcntl(F_SETLK) on fd %d (%s): another process may hold a "
                                               "conflicting lock now", fd.fd(), fd.path()),
                               SYS_fcntl, static_cast<uint64_t>(fd.fd()), F_SETLK, addr)
                          .status());
    }
  }
  return absl::OkStatus();
}

// A new pseudo-terminal pair whose slave is /dev/pts/INDEX again: the kernel hands out the
// lowest free index, so masters are opened (and held) until that one comes, or a higher one
// shows it is taken. Then the slave's settings, size, owner and mode, packet mode and lock.
absl::StatusOr<UniqueFd> RecreatePty(const image::Fd& fd, pid_t pid) {
  const image::PtyState& pty = fd.pty();
  auto where = [&] { return absl::StrFormat("the pseudo-terminal /dev/pts/%u (fd %d of pid %d)", pty.index(), fd.fd(), pid); };
  std::vector<UniqueFd> placeholders;
  UniqueFd m;
  for (;;) {
    UniqueFd f(OpenImagePath("/dev/ptmx", O_RDWR | O_NOCTTY | O_CLOEXEC));
    if (!f.valid()) return ErrnoStatus("open /dev/ptmx for " + where());
    unsigned index = 0;
    if (::ioctl(f.get(), TIOCGPTN, &index) != 0) return ErrnoStatus("ioctl(TIOCGPTN) for " + where());
    if (index == pty.index()) {
      m = std::move(f);
      break;
    }
    if (index > pty.index() || placeholders.size() > 4096) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "%s: that pseudo-terminal is in use on this machine (by the original, if it was checkpointed with "
          "--leave-running?); restore needs the same /dev/pts number",
          where()));
    }
    placeholders.push_back(std::move(f));
  }
  placeholders.clear();
  int unlock = 0;
  if (::ioctl(m.get(), TIOCSPTLCK, &unlock) != 0) return ErrnoStatus("ioctl(TIOCSPTLCK, 0) on " + where());
  if (pty.termios().size() == sizeof(proc::Termios2)) {
    proc::Termios2 t;
    std::memcpy(&t, pty.termios().data(), sizeof t);
    if (::ioctl(m.get(), proc::kTcsets2, &t) != 0) return ErrnoStatus("ioctl(TCSETS2) on " + where());
  }
  if (pty.winsize().size() == sizeof(winsize)) {
    winsize ws;
    std::memcpy(&ws, pty.winsize().data(), sizeof ws);
    if (::ioctl(m.get(), TIOCSWINSZ, &ws) != 0) return ErrnoStatus("ioctl(TIOCSWINSZ) on " + where());
  }
  int packet = pty.packet() ? 1 : 0;
  if (packet && ::ioctl(m.get(), TIOCPKT, &packet) != 0) return ErrnoStatus("ioctl(TIOCPKT) on " + where());
  if (pty.slave_mode() != 0) {
    // The slave of this master (TIOCGPTPEER): in the container's devpts for a container's.
    UniqueFd slave_fd(::ioctl(m.get(), TIOCGPTPEER, O_RDWR | O_NOCTTY | O_CLOEXEC));
    std::string slave = absl::StrCat("/dev/pts/", pty.index());
    if (!slave_fd.valid() || ::fchown(slave_fd.get(), pty.slave_uid(), pty.slave_gid()) != 0 ||
        ::fchmod(slave_fd.get(), pty.slave_mode()) != 0) {
      return ErrnoStatus("give " + slave + " its owner and mode back");
    }
  }
  int lock = pty.locked() ? 1 : 0;
  if (lock && ::ioctl(m.get(), TIOCSPTLCK, &lock) != 0) return ErrnoStatus("ioctl(TIOCSPTLCK, 1) on " + where());
  if (::fcntl(m.get(), F_SETFL, fd.flags()) != 0) return ErrnoStatus("fcntl(F_SETFL) on " + where());
  return m;
}

absl::StatusOr<Masters> OpenMasters(const image::ImageReader& img, const std::vector<const image::Process*>& tree,
                                    const image::Process* in_flight, const std::map<std::string, int>& inherited) {
  // The descriptions only messages in flight hold are made like the processes' (their holder,
  // pid 0, is no process: nothing is installed from it).
  std::vector<const image::Process*> procs = tree;
  if (in_flight != nullptr && in_flight->fds_size() > 0) procs.push_back(in_flight);
  Masters m;
  for (const image::Process* p : procs) {
    for (const image::Fd& fd : p->fds()) m.base = std::max(m.base, fd.fd() + 1);
  }
  RETURN_IF_ERROR(OpenFileObjects(img, procs, &m));
  RETURN_IF_ERROR(OpenScratchFiles(img, procs, &m));
  // Pseudo-terminal masters first: their slaves are opened by name with everything else.
  std::map<std::pair<pid_t, int>, UniqueFd> ptys;
  for (const image::Process* p : procs) {
    for (const image::Fd& fd : p->fds()) {
      if (fd.is_dup() || fd.kind() != image::Fd::PTY_MASTER) continue;
      ASSIGN_OR_RETURN(UniqueFd f, RecreatePty(fd, p->pid()));
      ptys[{p->pid(), fd.fd()}] = std::move(f);
    }
  }
  auto park = [&](UniqueFd f, pid_t pid, int fd) -> absl::Status {
    int n = ::fcntl(f.get(), F_DUPFD_CLOEXEC, kMasterFloor);
    if (n < 0) return ErrnoStatus(absl::StrFormat("fcntl(F_DUPFD) for fd %d of pid %d", fd, pid));
    m.owned.emplace_back(n);
    m.fds[{pid, fd}] = n;
    return absl::OkStatus();
  };
  std::map<uint64_t, std::pair<int, int>> pipes;  // pipe_id -> restorer's (read, write) ends
  std::map<uint64_t, UniqueFd> fifos;              // pipe_id -> the restorer's hold on a FIFO while its ends open
  std::set<int> claimed_objects;                   // memfd masters already given to a description
  std::set<int> pipe_ends_used;                    // pipe ends already given to a description
  for (const image::Process* p : procs) {
    for (const image::Fd& fd : p->fds()) {
      if (fd.is_dup()) continue;
      if (!inherited.empty()) {
        std::string key = fd.kind() == image::Fd::PIPE ? absl::StrCat("pipe:[", fd.pipe_id(), "]") : fd.path();
        if (auto given = inherited.find(key); given != inherited.end()) {
          // The caller's description, as it is: its flags are the caller's to set.
          UniqueFd f(::fcntl(given->second, F_DUPFD_CLOEXEC, 0));
          if (!f.valid()) {
            return ErrnoStatus(absl::StrFormat("take the descriptor %d handed over for %s (fd %d of pid %d)",
                                               given->second, key, fd.fd(), p->pid()));
          }
          RETURN_IF_ERROR(park(std::move(f), p->pid(), fd.fd()));
          continue;
        }
      }
      if (fd.handed_over()) {
        return absl::FailedPreconditionError(absl::StrFormat(
            "fd %d of pid %d was %s, which its container runtime held the other end of: the runtime hands one over "
            "at restore (criu-compat: inherit_fd %s), and none was",
            fd.fd(), p->pid(), fd.path(), fd.path()));
      }
      if (IsSocket(fd)) continue;  // OpenSocketMasters
      if (fd.kind() == image::Fd::PTY_MASTER) {
        RETURN_IF_ERROR(park(std::move(ptys.at({p->pid(), fd.fd()})), p->pid(), fd.fd()));
        continue;
      }
      if (OpenedInProcess(fd)) continue;  // OpenInProcess
      if (fd.kind() == image::Fd::PIDFD) {
        ASSIGN_OR_RETURN(UniqueFd f, DeadPidfd(fd, p->pid()));
        RETURN_IF_ERROR(park(std::move(f), p->pid(), fd.fd()));
        continue;
      }
      if (IsKernelObject(fd.kind())) {
        ASSIGN_OR_RETURN(UniqueFd f, CreateKernelObject(fd, p->pid()));
        RETURN_IF_ERROR(park(std::move(f), p->pid(), fd.fd()));
        continue;
      }
      if (fd.kind() == image::Fd::FIFO) {
        ASSIGN_OR_RETURN(UniqueFd f, OpenFifo(img, fd, p->pid(), &fifos));
        RETURN_IF_ERROR(park(std::move(f), p->pid(), fd.fd()));
        continue;
      }
      if (fd.kind() != image::Fd::PIPE) {
        ASSIGN_OR_RETURN(UniqueFd f, OpenDescription(fd, p->pid(), m, &claimed_objects));
        // flock and OFD locks belong to the open file description: taken here on the
        // master, they are held by the process once it holds the description.
        RETURN_IF_ERROR(TakeDescriptionLocks(f.get(), fd, p->pid(), procs));
        RETURN_IF_ERROR(park(std::move(f), p->pid(), fd.fd()));
        continue;
      }
      auto it = pipes.find(fd.pipe_id());
      if (it == pipes.end()) {
        int ends[2];
        if (::pipe2(ends, O_CLOEXEC) != 0) return ErrnoStatus("pipe2");
        UniqueFd r(ends[0]), w(ends[1]);
        int rn = ::fcntl(r.get(), F_DUPFD_CLOEXEC, kMasterFloor);
        int wn = ::fcntl(w.get(), F_DUPFD_CLOEXEC, kMasterFloor);
        if (rn < 0 || wn < 0) return ErrnoStatus("fcntl(F_DUPFD) for a pipe");
        m.owned.emplace_back(rn);
        m.owned.emplace_back(wn);
        it = pipes.emplace(fd.pipe_id(), std::make_pair(rn, wn)).first;
      }
      int end = (fd.flags() & O_ACCMODE) == O_RDONLY ? it->second.first : it->second.second;
      if (fd.pipe_size() != 0 && ::fcntl(end, F_SETPIPE_SZ, fd.pipe_size()) < 0) {
        return ErrnoStatus(absl::StrFormat("F_SETPIPE_SZ %d on the pipe of fd %d of pid %d", fd.pipe_size(), fd.fd(),
                                           p->pid()));
      }
      if (fd.content_size() > 0) {
        ASSIGN_OR_RETURN(std::string content, img.FileContent(fd));
        RETURN_IF_ERROR(WriteAll(it->second.second, content, "the pipe of fd " + std::to_string(fd.fd())));
      }
      if (!pipe_ends_used.insert(end).second || (fd.flags() & O_ACCMODE) == O_RDWR) {
        // Another description of the same pipe (opened again through /proc/PID/fd, with
        // its own flags and access mode): one of its own, opened the same way.
        std::string again = absl::StrCat("/proc/self/fd/", end);
        UniqueFd f(::open(again.c_str(), (fd.flags() & O_ACCMODE) | O_NONBLOCK | O_CLOEXEC));
        if (!f.valid()) return ErrnoStatus(absl::StrFormat("open the pipe of fd %d of pid %d again", fd.fd(), p->pid()));
        if (::fcntl(f.get(), F_SETFL, fd.flags()) != 0) return ErrnoStatus("fcntl(F_SETFL) on a pipe");
        RETURN_IF_ERROR(park(std::move(f), p->pid(), fd.fd()));
        continue;
      }
      if (::fcntl(end, F_SETFL, fd.flags()) != 0) return ErrnoStatus("fcntl(F_SETFL) on a pipe");
      m.fds[{p->pid(), fd.fd()}] = end;
    }
  }
  RETURN_IF_ERROR(OpenSocketMasters(img, procs, &m));
  return m;
}

absl::Status ApplySeals(Masters& masters) {
  for (auto& [f, seals] : masters.seals) {
    if (::fcntl(f.get(), F_ADD_SEALS, seals) != 0) {
      return ErrnoStatus(absl::StrFormat("F_ADD_SEALS %#x on a memfd", seals));
    }
  }
  masters.seals.clear();
  return absl::OkStatus();
}

namespace {

// F_SETOWN_EX and F_SETSIG, from inside the process: ids are its own, and the owner's
// credentials the kernel records (to check it may signal) are the process's, as restored.
// O_ASYNC is set again through the process's own descriptor.
absl::Status SetOwner(inject::Injector& inj, inject::RemoteScratch& scratch, const image::Fd& fd) {
  const image::FileOwner& o = fd.owner();
  if (o.pid() != 0) {
    f_owner_ex owner{static_cast<__pid_type>(o.type()), o.pid()};
    ASSIGN_OR_RETURN(uint64_t addr, scratch.Put(0, &owner, sizeof owner));
    RETURN_IF_ERROR(inj.Call(absl::StrFormat("fcntl(F_SETOWN_EX, type %d pid %d) on fd %d", o.type(), o.pid(), fd.fd()),
                             SYS_fcntl, static_cast<uint64_t>(fd.fd()), F_SETOWN_EX, addr)
                        .status());
  }
  if (o.signal() != 0) {
    RETURN_IF_ERROR(inj.Call(absl::StrFormat("fcntl(F_SETSIG, %d) on fd %d", o.signal(), fd.fd()), SYS_fcntl,
                             static_cast<uint64_t>(fd.fd()), F_SETSIG, static_cast<uint64_t>(o.signal()))
                        .status());
  }
  if (fd.flags() & O_ASYNC) {
    // Off and on again: the signal's si_fd is the descriptor number O_ASYNC was set through,
    // and the restorer set it on its own copy.
    for (int flags : {fd.flags() & ~O_ASYNC, fd.flags()}) {
      RETURN_IF_ERROR(inj.Call(absl::StrFormat("fcntl(F_SETFL, %#o) on fd %d", flags, fd.fd()), SYS_fcntl,
                               static_cast<uint64_t>(fd.fd()), F_SETFL, static_cast<uint64_t>(flags))
                          .status());
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status RestoreOwners(inject::Injector& inj, inject::RemoteScratch& scratch, const image::Process& proc) {
  for (const image::Fd& fd : proc.fds()) {
    if (fd.has_owner() && !fd.is_dup()) RETURN_IF_ERROR(SetOwner(inj, scratch, fd));
  }
  return absl::OkStatus();
}

namespace {

// Moves the process's new descriptor `n` to the saved number of `fd`, with its close-on-exec.
absl::Status PlaceAt(inject::Injector& inj, long n, const image::Fd& fd) {
  if (n == fd.fd()) {
    return inj.Call("fcntl(F_SETFD)", SYS_fcntl, static_cast<uint64_t>(n), F_SETFD, fd.cloexec() ? FD_CLOEXEC : 0)
        .status();
  }
  RETURN_IF_ERROR(inj.Call(absl::StrCat("dup3 to fd ", fd.fd()), SYS_dup3, static_cast<uint64_t>(n),
                           static_cast<uint64_t>(fd.fd()), fd.cloexec() ? O_CLOEXEC : 0)
                      .status());
  return inj.Call("close", SYS_close, static_cast<uint64_t>(n)).status();
}

// Whether `path` is a file of the /proc entry of a process of the checkpoint, named plainly:
// "/proc/N/..." with N one of `procs`, and no "." or ".." component (an image's path is not
// trusted: it is opened as root).
bool PlainProcPath(const std::vector<const image::Process*>& procs, absl::string_view path) {
  std::vector<absl::string_view> parts = absl::StrSplit(path, '/');
  pid_t n = 0;
  if (parts.size() < 3 || !parts[0].empty() || parts[1] != "proc" || !absl::SimpleAtoi(parts[2], &n)) return false;
  for (size_t i = 3; i < parts.size(); ++i) {
    if (parts[i].empty() || parts[i] == "." || parts[i] == "..") return false;
  }
  return std::any_of(procs.begin(), procs.end(), [&](const image::Process* p) { return p->pid() == n; });
}

// Opens description `fd` inside the process; returns the new descriptor's number there.
absl::StatusOr<long> OpenOne(inject::Injector& inj, inject::RemoteScratch& scratch,
                             const std::vector<const image::Process*>& procs, const image::Fd& fd) {
  constexpr int kPidfdThread = O_EXCL;  // PIDFD_THREAD, Linux 6.9+
  if (fd.kind() == image::Fd::PIDFD) {
    return inj.Call(absl::StrFormat("pidfd_open(%d) for fd %d", fd.pidfd_pid(), fd.fd()), SYS_pidfd_open,
                    static_cast<uint64_t>(fd.pidfd_pid()), static_cast<uint64_t>(fd.flags() & (O_NONBLOCK | kPidfdThread)));
  }
  if (fd.kind() == image::Fd::NAMESPACE &&
      std::none_of(std::begin(proc::kOwnNamespaces), std::end(proc::kOwnNamespaces),
                   [&](const char* n) { return fd.ns_name() == n; })) {
    return absl::DataLossError(absl::StrFormat("fd %d: '%s' is not a namespace (corrupt image)", fd.fd(), fd.ns_name()));
  }
  if (fd.kind() == image::Fd::PROC_FILE && !PlainProcPath(procs, fd.path())) {
    return absl::DataLossError(absl::StrFormat(
        "fd %d: %s is not a file of the /proc entry of a process of the checkpoint (corrupt image)", fd.fd(), fd.path()));
  }
  std::string path = fd.kind() == image::Fd::NAMESPACE ? absl::StrCat("/proc/self/ns/", fd.ns_name()) : fd.path();
  int flags = (fd.flags() & ~(O_CREAT | O_EXCL | O_TRUNC)) | O_NOCTTY | O_CLOEXEC;
  ASSIGN_OR_RETURN(uint64_t addr, scratch.PutString(0, path));
  long n = 0;
  if (fd.kind() == image::Fd::PROC_FILE) {
    // Through no symlink and no magic link (/proc/N/root, /proc/N/cwd...): only the entry's own files.
    struct {
      uint64_t flags, mode, resolve;
    } how{static_cast<uint64_t>(static_cast<uint32_t>(flags)), 0, 0x02 | 0x04 /* RESOLVE_NO_MAGICLINKS, _NO_SYMLINKS */};
    ASSIGN_OR_RETURN(uint64_t how_addr, scratch.Put(4096, &how, sizeof how));
    ASSIGN_OR_RETURN(n, inj.Call(absl::StrFormat("open %s for fd %d", path, fd.fd()), SYS_openat2,
                                 static_cast<uint64_t>(AT_FDCWD), addr, how_addr, sizeof how));
  } else {
    ASSIGN_OR_RETURN(n, inj.Call(absl::StrFormat("open %s for fd %d", path, fd.fd()), SYS_openat,
                                 static_cast<uint64_t>(AT_FDCWD), addr, static_cast<uint64_t>(flags), 0));
  }
  if (fd.kind() == image::Fd::PROC_FILE && fd.pos() != 0) {
    ASSIGN_OR_RETURN(long at, inj.Call(absl::StrFormat("lseek %s to %d", path, fd.pos()), SYS_lseek,
                                       static_cast<uint64_t>(n), static_cast<uint64_t>(fd.pos()), SEEK_SET));
    if (at != fd.pos()) {
      return absl::DataLossError(absl::StrFormat("lseek %s (fd %d) to %d gave %d", path, fd.fd(), fd.pos(), at));
    }
  }
  return n;
}

}  // namespace

absl::Status OpenInProcess(inject::Injector& inj, inject::RemoteScratch& scratch,
                           const std::vector<const image::Process*>& procs, const image::Process& proc) {
  for (const image::Fd& fd : proc.fds()) {
    if (fd.is_dup() || !OpenedInProcess(fd)) continue;
    ASSIGN_OR_RETURN(long n, OpenOne(inj, scratch, procs, fd));
    RETURN_IF_ERROR(PlaceAt(inj, n, fd));
  }
  for (const image::Fd& fd : proc.fds()) {
    const image::Fd* origin = fd.is_dup() ? OriginOf(procs, proc, fd) : nullptr;
    if (origin == nullptr || !OpenedInProcess(*origin)) continue;
    pid_t of = fd.dup_of_pid() != 0 ? fd.dup_of_pid() : proc.pid();
    if (of == proc.pid()) {
      RETURN_IF_ERROR(inj.Call(absl::StrCat("dup3 to fd ", fd.fd()), SYS_dup3, static_cast<uint64_t>(fd.dup_of()),
                               static_cast<uint64_t>(fd.fd()), fd.cloexec() ? O_CLOEXEC : 0)
                          .status());
      continue;
    }
    // Shared with another process of the checkpoint (inherited over fork), built before this
    // one: taken from it, so that both hold one description again.
    ASSIGN_OR_RETURN(long pidfd, inj.Call(absl::StrFormat("pidfd_open(%d) to take its fd %d", of, fd.dup_of()),
                                          SYS_pidfd_open, static_cast<uint64_t>(of), 0));
    absl::StatusOr<long> n = inj.Call(absl::StrFormat("pidfd_getfd(fd %d of pid %d) for fd %d", fd.dup_of(), of, fd.fd()),
                                      SYS_pidfd_getfd, static_cast<uint64_t>(pidfd), static_cast<uint64_t>(fd.dup_of()), 0);
    RETURN_IF_ERROR(inj.Call("close", SYS_close, static_cast<uint64_t>(pidfd)).status());
    if (!n.ok()) return n.status();
    RETURN_IF_ERROR(PlaceAt(inj, *n, fd));
  }
  return absl::OkStatus();
}

absl::Status InstallFds(inject::Injector& inj, inject::RemoteScratch& scratch, uint64_t loop,
                        const std::vector<const image::Process*>& procs, const image::Process& proc,
                        const Masters& masters) {
  std::vector<FdTarget> targets;
  for (const image::Fd& fd : proc.fds()) {
    const image::Fd* origin = OriginOf(procs, proc, fd);
    if (origin != nullptr && OpenedInProcess(*origin)) continue;  // OpenInProcess
    std::pair<pid_t, int> key = {proc.pid(), fd.fd()};
    if (fd.is_dup()) key = {fd.dup_of_pid() != 0 ? fd.dup_of_pid() : proc.pid(), fd.dup_of()};
    auto it = masters.fds.find(key);
    if (it == masters.fds.end()) {
      return absl::DataLossError(absl::StrFormat("fd %d of pid %d refers to fd %d of pid %d, which the checkpoint "
                                                 "does not hold (corrupt image)",
                                                 fd.fd(), proc.pid(), key.second, key.first));
    }
    targets.push_back({fd.fd(), it->second, fd.cloexec()});
  }
  // The process holds every description's master (CloseAllButMasters) and the objects'.
  std::set<int> held, objects;
  for (const auto& [key, n] : masters.fds) held.insert(n);
  for (const auto& [key, n] : masters.objects) objects.insert(n);
  // A master moved aside must land below the process's own limit, which its saved one may
  // already be (RestoreProcessState).
  rlimit lim{};
  if (::prlimit(inj.tid(), RLIMIT_NOFILE, nullptr, &lim) != 0) {
    return ErrnoStatus(absl::StrFormat("prlimit(RLIMIT_NOFILE) of pid %d", inj.tid()));
  }
  int limit = lim.rlim_cur < (1u << 30) ? static_cast<int>(lim.rlim_cur) : 1 << 30;
  ASSIGN_OR_RETURN(std::vector<FdCall> plan, PlanFdCalls(held, targets, objects, limit));
  std::vector<inject::BatchedCall> calls;
  for (const FdCall& c : plan) {
    switch (c.kind) {
      case FdCall::kDup3:
        calls.push_back({SYS_dup3, {static_cast<uint64_t>(c.from), static_cast<uint64_t>(c.to),
                                    static_cast<uint64_t>(c.cloexec ? O_CLOEXEC : 0), 0, 0, 0}});
        break;
      case FdCall::kClearCloexec:
        calls.push_back({SYS_fcntl, {static_cast<uint64_t>(c.to), F_SETFD, 0, 0, 0, 0}});
        break;
      case FdCall::kClose:
        calls.push_back({SYS_close, {static_cast<uint64_t>(c.to), 0, 0, 0, 0, 0}});
        break;
    }
  }
  // All in one stop (inject/stop_loop.h). Not repeatable: a master closed or overwritten by the
  // calls already made would be copied again, wrong.
  return inject::RunCalls(
      inj, scratch, loop, calls,
      [&](size_t i) {
        const FdCall& c = plan[i];
        return c.kind == FdCall::kDup3 ? absl::StrFormat("dup3(%d, %d) putting descriptors in place", c.from, c.to)
               : c.kind == FdCall::kClose ? absl::StrFormat("close a master at fd %d", c.to)
                                          : absl::StrFormat("clear close-on-exec of fd %d", c.to);
      },
      /*repeatable=*/false);
}

absl::Status CloseAllButMasters(inject::Injector& inj, inject::RemoteScratch& scratch, uint64_t loop,
                                const Masters& masters) {
  std::vector<int> keep;
  for (const auto& [key, n] : masters.fds) keep.push_back(n);
  for (const auto& [key, n] : masters.objects) keep.push_back(n);
  std::vector<inject::BatchedCall> calls;
  for (const auto& [first, last] : RangesAround(std::move(keep), 0)) {
    calls.push_back({SYS_close_range, {first, last, 0, 0, 0, 0}});
  }
  return inject::RunCalls(
      inj, scratch, loop, calls, [&](size_t) { return std::string("close_range (restorer's descriptors)"); },
      /*repeatable=*/true);
}

namespace {

// Registers the file at descriptor `e.held_as()` in the epoll at `epfd` under the number it
// was registered by, `e.tfd()`, which the process no longer uses for it: a copy of the file
// is put at that number for the call (whatever the process holds there now is moved aside and
// back), then closed. The registration stays keyed by that number, as it was.
absl::Status AddUnderOldNumber(inject::Injector& inj, const image::Process& proc, const image::Fd& epfd,
                               const image::EpollEntry& e, uint64_t event_addr) {
  const image::Fd* occupant = nullptr;
  for (const image::Fd& f : proc.fds()) {
    if (f.fd() == e.tfd()) occupant = &f;
  }
  long aside = -1;
  if (occupant != nullptr) {
    ASSIGN_OR_RETURN(aside, inj.Call("move fd aside", SYS_fcntl, static_cast<uint64_t>(e.tfd()), F_DUPFD_CLOEXEC, 0));
  }
  std::string what = absl::StrFormat("epoll_ctl(EPOLL_CTL_ADD) of fd %d (held as fd %d) to the epoll at fd %d", e.tfd(),
                                     e.held_as(), epfd.fd());
  absl::Status added = inj.Call("dup3 for " + what, SYS_dup3, static_cast<uint64_t>(e.held_as()),
                                static_cast<uint64_t>(e.tfd()), O_CLOEXEC)
                           .status();
  if (added.ok()) {
    added = inj.Call(what, SYS_epoll_ctl, static_cast<uint64_t>(epfd.fd()), EPOLL_CTL_ADD,
                     static_cast<uint64_t>(e.tfd()), event_addr)
                .status();
  }
  if (occupant != nullptr) {
    RETURN_IF_ERROR(inj.Call("put fd back", SYS_dup3, static_cast<uint64_t>(aside), static_cast<uint64_t>(e.tfd()),
                             occupant->cloexec() ? O_CLOEXEC : 0)
                        .status());
    RETURN_IF_ERROR(inj.Call("close", SYS_close, static_cast<uint64_t>(aside)).status());
  } else {
    RETURN_IF_ERROR(inj.Call("close", SYS_close, static_cast<uint64_t>(e.tfd())).status());
  }
  return added;
}

}  // namespace

absl::Status RestoreEpollInterest(inject::Injector& inj, inject::RemoteScratch& scratch, uint64_t loop,
                                  const image::Process& proc) {
  // The registrations of one instance go in with one stop each run of the loop
  // (inject/stop_loop.h): their events side by side at the scratch's start, the table of calls
  // after them. One under a number the process no longer holds for it is made on its own, in
  // its place in the order.
  constexpr size_t kPerRun = 768;  // 768 events and rows fit the scratch
  std::vector<epoll_event> events;  // packed on x86-64, as the kernel reads it
  inject::NamedCalls calls;
  auto flush = [&]() -> absl::Status {
    if (events.empty()) return absl::OkStatus();
    ASSIGN_OR_RETURN(uint64_t addr, scratch.Put(0, events.data(), events.size() * sizeof(epoll_event)));
    for (size_t i = 0; i < calls.calls.size(); ++i) calls.calls[i].args[3] = addr + i * sizeof(epoll_event);
    size_t table_off = (events.size() * sizeof(epoll_event) + 63) / 64 * 64;
    absl::Status ran = calls.Run(inj, scratch, loop, /*repeatable=*/false, table_off);
    events.clear();
    calls = {};
    return ran;
  };
  for (const image::Fd& fd : proc.fds()) {
    if (fd.kind() != image::Fd::EPOLL || fd.is_dup()) continue;
    for (const image::EpollEntry& e : fd.epoll()) {
      epoll_event ev{};
      ev.events = e.events();
      ev.data.u64 = e.data();
      if (e.held_elsewhere()) {
        RETURN_IF_ERROR(flush());
        ASSIGN_OR_RETURN(uint64_t addr, scratch.Put(0, &ev, sizeof ev));
        RETURN_IF_ERROR(AddUnderOldNumber(inj, proc, fd, e, addr));
        continue;
      }
      events.push_back(ev);
      calls.Add(absl::StrFormat("epoll_ctl(EPOLL_CTL_ADD) of fd %d (events %#x) to the epoll at fd %d", e.tfd(),
                                e.events(), fd.fd()),
                SYS_epoll_ctl, {static_cast<uint64_t>(fd.fd()), EPOLL_CTL_ADD, static_cast<uint64_t>(e.tfd()), 0, 0, 0});
      if (events.size() == kPerRun) RETURN_IF_ERROR(flush());
    }
  }
  return flush();
}

}  // namespace cairn::restore
