#pragma once
// Rebuilding descriptors, for one process or a whole tree.
//
// The restorer opens every open file description of the checkpoint once, in itself (a
// "master" descriptor: a file opened with its flags at its offset, a pipe end holding
// its queued bytes...), at numbers above any descriptor number the checkpoint uses.
// Every restored task starts as a copy of the restorer (or of a restored parent that
// was one), so it inherits all masters; it then dup3s the ones it had into place and
// closes the rest. Descriptors that shared a description — within a process or between
// processes — come out sharing it again, offsets and flags included.
//
// Kernel objects: eventfds (counter, semaphore mode), timerfds (clock, time left,
// period, unread expirations) and signalfds (mask) are masters created by the restorer.
// An epoll instance is created empty as a master; its interest list is rebuilt inside
// the process by RestoreEpollInterest once its descriptors are in place, because the
// kernel keys each registration by the registering process's descriptor number.
//
// Sockets are masters too (sockets.h). flock and OFD locks are taken on the
// masters (they belong to the description); POSIX record locks are taken by the process
// itself (RestoreProcessLocks), and so are flocks whose taker is in the checkpoint.

#include <sys/types.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "common/unique_fd.h"
#include "engine/image/image.h"
#include "engine/restore/tcp.h"
#include "engine/inject/injector.h"

namespace cairn::restore {

// The masters of open file descriptions sit at the lowest free numbers from here, also numbers
// some descriptor must take: InstallFds plans around them (restore/fd_moves.h).
inline constexpr int kMasterFloor = 3;

struct Masters {
  int base = 3;  // every saved descriptor number is below it; the masters of files made again (objects) above
  std::map<std::pair<pid_t, int>, int> fds;  // (pid, fd) of a description's first holder -> master
  // Files deleted while open or mapped, and memfds, made again once each: (dev, inode) at
  // checkpoint time -> master. Their descriptors are new descriptions of these files, and
  // their mapped areas map them.
  std::map<std::pair<uint64_t, uint64_t>, int> objects;
  std::vector<UniqueFd> owned;
  // Memfds and the seals to add once every process has mapped them (ApplySeals).
  std::vector<std::pair<UniqueFd, uint32_t>> seals;
  // TCP connections rebuilt in repair mode, to finish once every process is (tcp.h).
  std::vector<RepairedConnection> tcp;
  std::vector<ListenerReuse> listeners;
  // Scratch files made again because their name was gone (dump/scratch_files.h): (dev, inode)
  // at checkpoint time -> the new file's, for --verify. Their masters are in `objects`.
  std::map<std::pair<uint64_t, uint64_t>, std::pair<uint64_t, uint64_t>> made_scratch;
};

// Opens the masters for every process of the checkpoint (`procs`). A file deleted while
// open or mapped is recreated from the image under a temporary name next to where it was,
// opened and unlinked at once; a memfd is created again with memfd_create.
// `in_flight`: the checkpoint's holder of descriptions only messages in flight hold
// (Checkpoint.in_flight), made too, to be sent with those messages (sockets.h).
// `inherited`: descriptions the caller hands over instead (a container runtime's stdio), by
// key: "pipe:[INODE]" for a pipe, the path for a file; each a descriptor of the restorer's.
absl::StatusOr<Masters> OpenMasters(const image::ImageReader& img, const std::vector<const image::Process*>& procs,
                                    const image::Process* in_flight = nullptr,
                                    const std::map<std::string, int>& inherited = {});

// The root the restorer opens the image's paths under (OpenImagePath): while one is alive, a
// container's, reached through its root task (/proc/PID/root) and resolved inside it, so that
// a path means what it meant to the container; otherwise the restorer's own.
// `mounts`: the container's mount namespace, for what only a path resolved there can do
// (InImageMounts).
class MountsWorker;
class ImageRoot {
 public:
  explicit ImageRoot(UniqueFd root, UniqueFd mounts = UniqueFd());
  ~ImageRoot();
  ImageRoot(const ImageRoot&) = delete;
  ImageRoot& operator=(const ImageRoot&) = delete;

  // InImageMounts's thread, made at its first use and kept while this lives.
  MountsWorker& Worker();

 private:
  UniqueFd root_, mounts_;
  std::unique_ptr<MountsWorker> worker_;
};

// Runs `fn` where the image's paths are the file system's own: with no ImageRoot alive, here;
// under a container's, on a thread of ours that joined the container's mount namespace
// (unshare(CLONE_FS), setns; made once per ImageRoot, and kept), with an ImageRoot of that root — for bind(2) of a unix socket's
// name, a removed file made again next to its name, inotify watches: calls that take a path and
// no root to resolve it under. The thread keeps this thread's other namespaces (its network).
absl::Status InImageMounts(const std::function<absl::Status()>& fn);

// Whether this thread runs inside InImageMounts under a container's ImageRoot.
bool InImageMountsNow();

// Inside InImageMounts, makes what this thread creates while it lives owned by uid:gid (the
// host's ids: the saved owner), as setfsuid/setfsgid on this thread: a file system a
// container's user namespace mounted takes only owners that namespace maps, and the restorer's
// own (the host's root) is not one. Elsewhere it does nothing. Not nested.
class CreateAs {
 public:
  CreateAs(uint32_t uid, uint32_t gid);
  ~CreateAs();
  CreateAs(const CreateAs&) = delete;
  CreateAs& operator=(const CreateAs&) = delete;

 private:
  bool set_ = false;
};

// chmod(2) of the file `fd` names (an O_PATH descriptor of a socket file, which fchmod refuses),
// through this thread's /proc entry — the host's /proc inside InImageMounts, where the
// container's does not show the restorer. Returns 0 or -1 with errno.
int ChmodThroughDescriptor(int fd, mode_t mode);

// open(2) of a path from the image, under the ImageRoot if one is alive on this thread
// (resolved inside it: no symlink, "..", or magic link leads out).
int OpenImagePath(const std::string& path, int flags, mode_t mode = 0);

// Whether an ImageRoot is alive on this thread: a container's restore, whose paths the
// restorer's own file system calls would take to the host.
bool ImageRootActive();

// Adds their seals to the memfds, once every area that maps them is in place (a seal
// may forbid mapping them writable).
absl::Status ApplySeals(Masters& masters);

// Creates an empty file at `path` if that name is free, else under a fresh name next to
// it (or in /tmp), and removes the name again: returns the file, open read-write.
absl::StatusOr<UniqueFd> RecreateDeleted(const std::string& path, uint32_t mode);

// Writes a deleted file's saved `content` into the new file `f` as `layout` describes it
// (its data extents, leaving the holes, and its size), then gives it its owner and mode.
// Older images (no layout): the content is the whole file.
absl::Status FillSavedFile(int f, const std::string& content, const image::SavedFile& layout, const std::string& what);

// In the task `inj` drives, first: closes every descriptor but the masters (those of the
// descriptions and of the files made again), which it inherited from the restorer with the
// restorer's own.
absl::Status CloseAllButMasters(inject::Injector& inj, inject::RemoteScratch& scratch, uint64_t loop,
                                const Masters& masters);

// In the task `inj` drives, which holds copies of all masters and nothing else: puts its saved
// descriptors in place, but for those OpenInProcess opens, and closes the descriptions' masters
// it does not keep (restore/fd_moves.h) — all in one run of the loop at `loop`
// (inject/stop_loop.h, its table in `scratch`), or one injected call each if it fails. The caller
// closes the objects' masters (close_range from Masters::base) once no process sharing the
// table needs them.
absl::Status InstallFds(inject::Injector& inj, inject::RemoteScratch& scratch, uint64_t loop,
                        const std::vector<const image::Process*>& procs, const image::Process& proc,
                        const Masters& masters);

// In the task `inj` drives, once every process of the tree exists and after InstallFds: the
// descriptions whose object depends on who opens them, opened from inside so that they name
// the restored processes — pidfds of live processes (pidfd_open with the process's own ids),
// files of /proc/PID entries (by the path the process saw), its own namespaces' files
// (/proc/self/ns) — and their dups; a dup held by a process built earlier is taken from it
// (pidfd_getfd), so that both share one description again. A pidfd of a reaped process is a
// master (OpenMasters).
absl::Status OpenInProcess(inject::Injector& inj, inject::RemoteScratch& scratch,
                           const std::vector<const image::Process*>& procs, const image::Process& proc);

// In the task `inj` drives, once its descriptors and threads are in place: the saved
// F_SETOWN_EX owners and F_SETSIG signals of its descriptions, set from inside.
absl::Status RestoreOwners(inject::Injector& inj, inject::RemoteScratch& scratch, const image::Process& proc);

// In the task `inj` drives, after InstallFds: registers every saved epoll entry of the
// process's epoll instances again (epoll_ctl EPOLL_CTL_ADD with the saved events and
// data), passing each epoll_event through `scratch`. Dups of an epoll instance add
// nothing: the registrations belong to the instance, restored once through its first
// holder. Readiness is recomputed by the kernel on registration, so an edge-triggered
// entry whose file is ready reports one edge again, and a one-shot entry that had fired
// comes back disarmed but, like any registration, still watching EPOLLERR and EPOLLHUP.
// Takes the process's POSIX record locks, as the process itself (they belong to it, not
// to a descriptor), and the flocks it took (which belong to a description, but which
// /proc/locks shows as taken by a process). Other flocks and OFD locks come with the
// descriptions (OpenMasters).
// `posix` false (a process sharing its parent's descriptor table, whose POSIX locks are the
// table's): flocks only.
absl::Status RestoreProcessLocks(inject::Injector& inj, inject::RemoteScratch& scratch,
                                 const std::vector<const image::Process*>& procs, const image::Process& proc,
                                 bool posix);

// Registers each epoll instance's interest list again, from inside the process (`loop`: the stop
// loop, inject/stop_loop.h).
absl::Status RestoreEpollInterest(inject::Injector& inj, inject::RemoteScratch& scratch, uint64_t loop,
                                  const image::Process& proc);

}  // namespace cairn::restore
