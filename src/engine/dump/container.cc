#include "engine/dump/container.h"

#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <set>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/ascii.h"
#include "common/file_util.h"
#include "common/log.h"
#include "common/status.h"
#include "common/unique_fd.h"
#include "engine/dump/namespaces.h"
#include "engine/proc/id_map.h"
#include "engine/proc/mountinfo.h"
#include "engine/proc/pty.h"
#include "engine/proc/setns.h"

namespace cairn::dump {
namespace {

// What a container's tmpfs mounts may hold in all: they are saved whole, in the checkpoint's
// metadata. A runtime's /dev holds a few device nodes and links.
constexpr uint64_t kTmpfsBytesLimit = 64ull << 20;

absl::StatusOr<bool> OwnNamespace(pid_t pid, const char* ns) {
  ASSIGN_OR_RETURN(std::string mine, NamespaceLink(::getpid(), ns));
  ASSIGN_OR_RETURN(std::string theirs, NamespaceLink(pid, ns));
  return mine != theirs;
}

const proc::MountEntry* RootMount(const std::vector<proc::MountEntry>& table) {
  // The last mount at "/" is the one on top, the root the processes see.
  const proc::MountEntry* root = nullptr;
  for (const auto& m : table) {
    if (m.point == "/") root = &m;
  }
  return root;
}

// Per-mount flags from mountinfo's "rw,nosuid,nodev,relatime".
uint64_t MountFlags(const std::string& options) {
  uint64_t flags = 0;
  for (absl::string_view o : absl::StrSplit(options, ',')) {
    if (o == "ro") flags |= MS_RDONLY;
    if (o == "nosuid") flags |= MS_NOSUID;
    if (o == "nodev") flags |= MS_NODEV;
    if (o == "noexec") flags |= MS_NOEXEC;
    if (o == "noatime") flags |= MS_NOATIME;
    if (o == "nodiratime") flags |= MS_NODIRATIME;
    if (o == "relatime") flags |= MS_RELATIME;
    if (o == "strictatime") flags |= MS_STRICTATIME;
  }
  // mountinfo names relatime and noatime; a mount with neither updates every access time.
  if (!(flags & (MS_NOATIME | MS_RELATIME))) flags |= MS_STRICTATIME;
  return flags;
}

// The file system's own options without "rw"/"ro", and whether it is read-only.
std::pair<std::string, bool> SuperOptions(const std::string& options) {
  std::vector<std::string> kept;
  bool ro = false;
  for (absl::string_view o : absl::StrSplit(options, ',', absl::SkipEmpty())) {
    if (o == "ro") ro = true;
    if (o == "ro" || o == "rw") continue;
    kept.emplace_back(o);
  }
  return {absl::StrJoin(kept, ","), ro};
}

// `path` is `under` or below it.
bool Within(const std::string& path, const std::string& under) {
  if (under == "/") return true;
  return path == under || absl::StartsWith(path, under + "/");
}

// The files of the tmpfs open at `dir` (device `dev`), below `rel`, parents first. Mount points
// of other file systems on it are kept as empty directories.
absl::Status WalkTmpfs(int dir, dev_t dev, const std::string& rel, const std::string& where, uint64_t* bytes,
                       image::Mount* out, std::map<ino_t, std::string>* first_names) {
  int d = ::openat(dir, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  DIR* listing = d < 0 ? nullptr : ::fdopendir(d);
  if (listing == nullptr) {
    if (d >= 0) ::close(d);
    return ErrnoStatus("list " + where + rel);
  }
  std::vector<std::string> names;
  while (dirent* e = ::readdir(listing)) {
    std::string n = e->d_name;
    if (n != "." && n != "..") names.push_back(n);
  }
  ::closedir(listing);
  std::sort(names.begin(), names.end());
  for (const std::string& n : names) {
    std::string path = rel.empty() ? n : rel + "/" + n;
    struct stat st {};
    if (::fstatat(dir, n.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) return ErrnoStatus("stat " + where + "/" + path);
    image::TreeEntry* t = out->add_entries();
    t->set_path(path);
    t->set_mode(st.st_mode);
    t->set_uid(st.st_uid);
    t->set_gid(st.st_gid);
    if (st.st_dev != dev) {
      // A mount point (a device node a runtime binds from the host, a masked path, another
      // file system): what stat shows is the mount's. Its mount says what is there; under it,
      // an empty file or directory of the directory's owner, as a runtime makes one to mount on.
      struct stat parent {};
      if (::fstat(dir, &parent) != 0) return ErrnoStatus("stat " + where + "/" + rel);
      t->set_mode(S_ISDIR(st.st_mode) ? S_IFDIR | 0755 : S_IFREG | 0644);
      t->set_uid(parent.st_uid);
      t->set_gid(parent.st_gid);
      continue;
    }
    t->set_mtime_ns(static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec);
    t->set_atime_ns(static_cast<int64_t>(st.st_atim.tv_sec) * 1000000000 + st.st_atim.tv_nsec);
    if (S_ISREG(st.st_mode) && st.st_nlink > 1) {
      auto [first, fresh] = first_names->emplace(st.st_ino, path);
      if (!fresh) {  // another name of a file saved already
        t->set_link_to(first->second);
        continue;
      }
    }
    if (S_ISDIR(st.st_mode)) {
      UniqueFd sub(::openat(dir, n.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      if (!sub.valid()) return ErrnoStatus("open " + where + "/" + path);
      RETURN_IF_ERROR(WalkTmpfs(sub.get(), dev, path, where, bytes, out, first_names));
    } else if (S_ISLNK(st.st_mode)) {
      char buf[4096];
      ssize_t len = ::readlinkat(dir, n.c_str(), buf, sizeof buf);
      if (len < 0) return ErrnoStatus("readlink " + where + "/" + path);
      t->set_target(std::string(buf, static_cast<size_t>(len)));
    } else if (S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode)) {
      t->set_rdev(st.st_rdev);
    } else if (S_ISREG(st.st_mode)) {
      *bytes += static_cast<uint64_t>(st.st_size);
      if (*bytes > kTmpfsBytesLimit) {
        return absl::ResourceExhaustedError(absl::StrFormat(
            "the container's tmpfs at %s holds more than %d MiB (at %s): cairn saves a container's own tmpfs files "
            "only up to that; keep large files on a volume (an external mount)",
            where, kTmpfsBytesLimit >> 20, path));
      }
      // (O_NOATIME: reading it for the checkpoint leaves its access time as the program left it.)
      UniqueFd f(::openat(dir, n.c_str(), O_RDONLY | O_NOFOLLOW | O_NOATIME | O_CLOEXEC));
      if (!f.valid()) return ErrnoStatus("open " + where + "/" + path);
      ASSIGN_OR_RETURN(std::string content, ReadFile(absl::StrCat("/proc/self/fd/", f.get())));
      t->set_content(std::move(content));
    } else if (S_ISSOCK(st.st_mode)) {
      // A bound unix socket's file: the socket's own restore binds it again (or it is stale).
      out->mutable_entries()->RemoveLast();
    }
    // A FIFO: made again by its mode.
  }
  return absl::OkStatus();
}

// The host and domain names `pid` sees: uname(2) on a thread that entered its UTS namespace
// (a namespace of a thread's own: the rest of this process keeps its own).
absl::StatusOr<utsname> NamesIn(pid_t pid) {
  std::string link = absl::StrCat("/proc/", pid, "/ns/uts");
  UniqueFd ns(::open(link.c_str(), O_RDONLY | O_CLOEXEC));
  if (!ns.valid()) return ErrnoStatus("open " + link);
  utsname names{};
  int err = 0;
  std::thread([&] {
    if (::setns(ns.get(), CLONE_NEWUTS) != 0 || ::uname(&names) != 0) err = errno;
  }).join();
  if (err != 0) return absl::ErrnoToStatus(err, "read the host name in the UTS namespace of pid " + std::to_string(pid));
  return names;
}

// The process's cgroup path under the v1 hierarchy with `controllers` ("cpu", "name=systemd").
std::string CgroupPath(pid_t pid, const std::string& controllers) {
  auto text = ReadFile(absl::StrCat("/proc/", pid, "/cgroup"));
  if (!text.ok()) return "";
  for (absl::string_view line : absl::StrSplit(*text, '\n', absl::SkipEmpty())) {
    std::vector<absl::string_view> f = absl::StrSplit(line, absl::MaxSplits(':', 2));
    if (f.size() == 3 && f[1] == controllers) return std::string(f[2]);
  }
  return "";
}


// The container's terminals on its devpts `m` whose masters are outside the checkpoint (a
// runtime's console: runc gives the container /dev/pts/0, and /dev/console bound from it, and
// sends the master to its console socket): each slave one of the processes has open, or has
// as its controlling terminal, with no master of the same index among the checkpoint's. Their
// settings are read through the slave; bytes typed and not read yet (in canonical mode, the
// lines completed: a line still being typed is not counted, and is lost) would be lost, so such
// a terminal is refused until its program reads them.
absl::Status RecordTerminals(pid_t root, const proc::MountEntry& m, const image::Checkpoint& ckpt, image::Mount* out) {
  auto is_pts = [](uint64_t rdev) { return major(rdev) >= 136 && major(rdev) <= 143; };
  auto index_of = [](uint64_t rdev) { return (major(rdev) - 136) * 256 + minor(rdev); };
  std::string dir = absl::StrCat("/proc/", root, "/root", m.point == "/" ? "" : m.point);
  std::set<unsigned> held, slaves;
  std::vector<const image::Process*> procs = {&ckpt.process()};
  for (const image::Process& p : ckpt.descendants()) procs.push_back(&p);
  for (const image::Process* p : procs) {
    for (const image::Fd& fd : p->fds()) {
      if (fd.kind() == image::Fd::PTY_MASTER) held.insert(fd.pty().index());
      if (fd.kind() == image::Fd::CHAR_DEVICE && is_pts(fd.rdev()) && fd.file().dev() == m.dev) {
        slaves.insert(index_of(fd.rdev()));
      }
    }
    if (p->ctty() != 0 && is_pts(p->ctty())) {
      struct stat st {};
      std::string node = absl::StrCat(dir, "/", index_of(p->ctty()));
      if (::stat(node.c_str(), &st) == 0 && st.st_dev == m.dev && st.st_rdev == p->ctty()) {
        slaves.insert(index_of(p->ctty()));
      }
    }
  }
  for (unsigned index : slaves) {
    if (held.count(index)) continue;
    std::string node = absl::StrCat(dir, "/", index);
    std::string where = absl::StrFormat("the container's terminal %s/%u", m.point, index);
    if (index >= proc::kMaxContainerTerminal) {
      return absl::UnimplementedError(absl::StrFormat(
          "%s has its master outside the container, and cairn makes such terminals again only below /dev/pts/%u",
          where, proc::kMaxContainerTerminal));
    }
    // Someone else holds it open (a process of the container): this open and close is no hang-up.
    UniqueFd slave(::open(node.c_str(), O_RDONLY | O_NOCTTY | O_NONBLOCK | O_CLOEXEC));
    if (!slave.valid()) return ErrnoStatus("open " + where + " (" + node + ")");
    struct stat st {};
    if (::fstat(slave.get(), &st) != 0) return ErrnoStatus("stat " + where);
    if (!S_ISCHR(st.st_mode) || st.st_dev != m.dev || !is_pts(st.st_rdev) || index_of(st.st_rdev) != index) {
      return absl::FailedPreconditionError(absl::StrFormat("%s (%s) is not that terminal any more", where, node));
    }
    image::PtyState* pty = out->add_terminals();
    pty->set_index(index);
    proc::Termios2 t{};
    if (::ioctl(slave.get(), proc::kTcgets2, &t) != 0) return ErrnoStatus("ioctl(TCGETS2) on " + where);
    pty->set_termios(std::string(reinterpret_cast<const char*>(&t), sizeof t));
    winsize ws{};
    if (::ioctl(slave.get(), TIOCGWINSZ, &ws) != 0) return ErrnoStatus("ioctl(TIOCGWINSZ) on " + where);
    pty->set_winsize(std::string(reinterpret_cast<const char*>(&ws), sizeof ws));
    pty->set_slave_uid(st.st_uid);
    pty->set_slave_gid(st.st_gid);
    pty->set_slave_mode(st.st_mode & 07777);
    int input = 0;
    if (::ioctl(slave.get(), FIONREAD, &input) != 0) return ErrnoStatus("ioctl(FIONREAD) on " + where);
    if (input != 0) {
      return absl::UnavailableError(absl::StrFormat(
          "%s has %d byte%s typed into it that its program has not read yet; they cannot be saved without taking "
          "them away — checkpoint it when the terminal is idle",
          where, input, input == 1 ? "" : "s"));
    }
  }
  return absl::OkStatus();
}

// A cgroup namespace of its own is made again by the restore's clone, rooted at the cgroups
// the restorer stands in then — the container's, where its runtime places it. So the
// container's view of its own cgroups (its /proc/PID/cgroup read from inside its cgroup
// namespace) must be the namespace's root in every hierarchy: it did not move after the
// namespace was made.
absl::Status CheckCgroupNamespaceRoot(pid_t root) {
  std::string path = absl::StrCat("/proc/", root, "/cgroup");
  std::string text;
  RETURN_IF_ERROR(proc::InNamespaceOf(root, CLONE_NEWCGROUP, "cgroup", [&]() -> absl::Status {
    ASSIGN_OR_RETURN(text, ReadFile(path));
    return absl::OkStatus();
  }));
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    std::vector<absl::string_view> f = absl::StrSplit(line, absl::MaxSplits(':', 2));
    if (f.size() == 3 && f[2] != "/") {
      return absl::UnimplementedError(absl::StrFormat(
          "the container's init is in cgroup %s of hierarchy '%s' below the root of its cgroup namespace (it moved "
          "after the namespace was made): cairn makes a cgroup namespace again rooted at the cgroups the restore "
          "is placed in, where the container would then stand at the root",
          f[2], f[1]));
    }
  }
  return absl::OkStatus();
}

// The maps of `root`'s user namespace, as this (its parent) namespace sees them.
absl::Status RecordUserNamespace(pid_t root, image::UserNamespace* out) {
  for (const char* which : {"uid_map", "gid_map"}) {
    std::string path = absl::StrCat("/proc/", root, "/", which);
    ASSIGN_OR_RETURN(std::string text, ReadFile(path));
    absl::StatusOr<std::vector<proc::IdRange>> map = proc::ParseIdMap(text);
    if (!map.ok()) return Annotate(map.status(), path);
    if (map->empty()) {
      return absl::FailedPreconditionError(absl::StrCat(
          path, " is empty: the container's user namespace has no ids yet (its runtime has not finished making it)"));
    }
    auto* ranges = std::string(which) == "uid_map" ? out->mutable_uid_map() : out->mutable_gid_map();
    for (const proc::IdRange& r : *map) {
      image::IdRange* e = ranges->Add();
      e->set_inside(r.inside);
      e->set_outside(r.outside);
      e->set_count(r.count);
    }
  }
  std::string path = absl::StrCat("/proc/", root, "/setgroups");
  ASSIGN_OR_RETURN(std::string setgroups, ReadFile(path));
  out->set_setgroups_denied(absl::StripAsciiWhitespace(setgroups) == "deny");
  return absl::OkStatus();
}

// Every id a process of the checkpoint holds (its credentials: the host's) is one the
// container's user namespace maps: the restore names them inside it. And the namespace lets its
// processes set their groups (setgroups "allow"): with "deny" the restore could not give them
// theirs.
absl::Status CheckIdsMapped(const image::Checkpoint& ckpt, const image::UserNamespace& ns) {
  if (ns.setgroups_denied()) {
    return absl::UnimplementedError(
        "the container's user namespace denies setgroups (as a rootless runtime's does): cairn could not give its "
        "processes their supplementary groups again; not supported yet");
  }
  std::vector<proc::IdRange> uids, gids;
  for (const image::IdRange& r : ns.uid_map()) uids.push_back({r.inside(), r.outside(), r.count()});
  for (const image::IdRange& r : ns.gid_map()) gids.push_back({r.inside(), r.outside(), r.count()});
  std::vector<const image::Process*> procs = {&ckpt.process()};
  for (const image::Process& p : ckpt.descendants()) procs.push_back(&p);
  for (const image::Process* p : procs) {
    if (p->zombie()) continue;
    const image::Creds& c = p->creds();
    auto refuse = [&](const char* what, uint32_t id) {
      return absl::UnimplementedError(absl::StrFormat(
          "pid %d (%s) of the container holds %s %u, which its user namespace does not map: the restore could not "
          "give it back inside the namespace",
          p->pid(), p->comm(), what, id));
    };
    for (uint32_t id : c.uids()) {
      if (!proc::InsideId(uids, id)) return refuse("uid", id);
    }
    for (uint32_t id : c.gids()) {
      if (!proc::InsideId(gids, id)) return refuse("gid", id);
    }
    for (uint32_t id : c.groups()) {
      if (!proc::InsideId(gids, id)) return refuse("the supplementary group", id);
    }
  }
  // The owners of its tmpfs files and mounts, given again from inside the namespace (a file system
  // the namespace mounted holds only ids it maps: this refuses what could not be restored, should
  // one come from elsewhere).
  for (const image::Mount& m : ckpt.container().mounts()) {
    for (const image::TreeEntry& e : m.entries()) {
      if (!proc::InsideId(uids, e.uid()) || !proc::InsideId(gids, e.gid())) {
        return absl::UnimplementedError(absl::StrFormat(
            "file %s of the container's tmpfs at %s is owned by %u:%u, ids its user namespace does not map: the "
            "restore could not give it that owner again (chown it to an id of the container)",
            e.path(), m.point(), e.uid(), e.gid()));
      }
    }
    for (absl::string_view o : absl::StrSplit(m.options(), ',', absl::SkipEmpty())) {
      uint32_t id = 0;
      bool uid = absl::StartsWith(o, "uid="), gid = absl::StartsWith(o, "gid=");
      if ((uid || gid) && absl::SimpleAtoi(o.substr(4), &id) && !proc::InsideId(uid ? uids : gids, id)) {
        return absl::UnimplementedError(absl::StrFormat(
            "the container's mount at %s is owned by %s, an id its user namespace does not map: it could not be "
            "mounted again from inside the namespace",
            m.point(), o));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::optional<ContainerMounts>> ReadContainerMounts(pid_t root) {
  ASSIGN_OR_RETURN(bool own_mnt, OwnNamespace(root, "mnt"));
  if (!own_mnt) return std::nullopt;
  ContainerMounts m;
  ASSIGN_OR_RETURN(m.theirs, proc::ReadMountTable(root));
  ASSIGN_OR_RETURN(m.host, proc::ReadMountTable(::getpid()));
  const proc::MountEntry* a = RootMount(m.theirs);
  const proc::MountEntry* b = RootMount(m.host);
  if (a == nullptr || b == nullptr) return absl::FailedPreconditionError(absl::StrCat("pid ", root, " sees no root mount"));
  if (a->dev == b->dev && a->fs_root == b->fs_root) return std::nullopt;
  return m;
}

absl::Status RecordContainer(pid_t root, const ContainerMounts& mounts, const ContainerOptions& opts,
                             image::Checkpoint* ckpt) {
  image::Container* c = ckpt->mutable_container();
  ASSIGN_OR_RETURN(bool own_cgroup, OwnNamespace(root, "cgroup"));
  c->set_own_cgroup_ns(own_cgroup);
  if (own_cgroup) RETURN_IF_ERROR(CheckCgroupNamespaceRoot(root));
  const std::vector<proc::MountEntry>& table = mounts.theirs;
  const proc::MountEntry* top = RootMount(table);
  if (top == nullptr) return absl::FailedPreconditionError(absl::StrCat("pid ", root, " sees no root mount"));
  // Only what is mounted on the container's root, at or above it in the tree of mounts.
  std::set<uint32_t> inside = {top->id};
  // The mounts recorded so far, and how.
  struct Recorded {
    const proc::MountEntry* entry;
    image::Mount::Kind kind;
  };
  std::map<uint32_t, Recorded> by_id;
  std::set<std::string> externals_used;
  // The host's own file systems: one of them shown whole in the container is a bind from the
  // host (`-v /dev/shm:/dev/shm`), not a file system the container made.
  std::set<dev_t> host_devs;
  for (const proc::MountEntry& h : mounts.host) host_devs.insert(h.dev);
  uint64_t tmpfs_bytes = 0;
  auto refuse = [&](const proc::MountEntry& m, absl::string_view why) {
    return absl::UnimplementedError(absl::StrFormat("the container's mount at %s (%s from %s, %s) %s", m.point,
                                                    m.fstype, m.source, m.fs_root, why));
  };
  for (const proc::MountEntry& m : table) {
    if (&m != top && !inside.count(m.parent_id)) continue;  // under the root's (pivoted-away) parents
    if (&m != top && m.point == "/") continue;
    inside.insert(m.id);
    image::Mount* out = c->add_mounts();
    out->set_id(m.id);
    out->set_parent_id(&m == top ? 0 : m.parent_id);
    out->set_point(m.point);
    out->set_fs_root(m.fs_root);
    out->set_fstype(m.fstype);
    out->set_source(m.source);
    out->set_flags(MountFlags(m.mount_options));
    auto [options, ro] = SuperOptions(m.super_options);
    out->set_options(options);
    out->set_fs_read_only(ro);
    if (&m == top) {
      out->set_kind(image::Mount::ROOT);
      by_id[m.id] = {&m, image::Mount::ROOT};
      continue;
    }
    // Part of a file system already in the table (a masked path: a bind of the container's own
    // /dev/null) is bound from there again, even where the runtime named it external: that is
    // what the container saw.
    const proc::MountEntry* same = nullptr;
    for (const auto& [id, earlier] : by_id) {
      // (A runtime binds the host's device nodes in one by one for a container in a user namespace,
      // as external mounts, and masks paths with its /dev/null: a bind of that.)
      bool own = earlier.kind == image::Mount::ROOT || earlier.kind == image::Mount::FILESYSTEM ||
                 earlier.kind == image::Mount::EXTERNAL;
      if (own && earlier.entry->dev == m.dev && Within(m.fs_root, earlier.entry->fs_root)) {
        same = earlier.entry;
        break;
      }
    }
    auto external = opts.external_mounts.find(m.point);
    if (m.fstype == "cgroup") {
      // Its own cgroup, wherever the runtime places it at restore (runtimes name these external).
      out->set_kind(image::Mount::CGROUP);
      out->set_controllers(options);
      std::string own = CgroupPath(root, options);
      if (m.fs_root != "/" && m.fs_root != own) {
        return refuse(m, absl::StrFormat("shows the cgroup %s, neither the container's own (%s) nor the hierarchy's "
                                         "root: cairn cannot mount it again",
                                         m.fs_root, own.empty() ? "none" : own));
      }
      out->set_own_cgroup(m.fs_root != "/" || own == "/");
      if (external != opts.external_mounts.end()) externals_used.insert(m.point);
    } else if (same != nullptr) {
      out->set_kind(image::Mount::BIND);
      out->set_bind_of(same->id);
      if (external != opts.external_mounts.end()) externals_used.insert(m.point);
    } else if (external != opts.external_mounts.end()) {
      out->set_kind(image::Mount::EXTERNAL);
      out->set_external(external->second);
      externals_used.insert(m.point);
    } else if (m.fstype == "proc" || m.fstype == "sysfs" || m.fstype == "tmpfs" || m.fstype == "devpts" ||
               m.fstype == "mqueue") {
      if (m.fs_root != "/") {
        return refuse(m, "shows part of a file system the container did not mount itself: name it external");
      }
      // sysfs shares the host's instance whenever the container shares its network namespace:
      // a fresh mount shows the same.
      if (m.fstype != "sysfs" && host_devs.count(m.dev)) {
        return refuse(m, "is the host's own file system, bound into the container: name it external (criu-compat: "
                         "ext_mnt) so that the restore binds it again");
      }
      out->set_kind(image::Mount::FILESYSTEM);
      if (m.fstype == "tmpfs") {
        std::string where = absl::StrCat("/proc/", root, "/root", m.point);
        UniqueFd dir(::open(where.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
        if (!dir.valid()) return ErrnoStatus("open " + where + " (the container's tmpfs at " + m.point + ")");
        std::map<ino_t, std::string> names;  // files with several names: the first saved
        RETURN_IF_ERROR(WalkTmpfs(dir.get(), m.dev, "", m.point, &tmpfs_bytes, out, &names));
      }
      if (m.fstype == "devpts") RETURN_IF_ERROR(RecordTerminals(root, m, *ckpt, out));
    } else if (m.dev == top->dev) {
      return refuse(m, "is a bind mount of a host path outside the container's root: name it external (criu-compat: "
                       "ext_mnt; the runtime maps it to a host path again at restore)");
    } else {
      return refuse(m, absl::StrFormat("is a %s file system cairn does not mount again: name it external (criu-compat: "
                                       "ext_mnt) so that the restore binds it from the host",
                                       m.fstype));
    }
    by_id[m.id] = {&m, out->kind()};
  }
  for (const auto& [point, key] : opts.external_mounts) {
    if (!externals_used.count(point)) {
      CAIRN_LOG_DEBUG("event=external_mount_unused point={} key={}", point, key);
    }
  }

  ASSIGN_OR_RETURN(bool own_user, proc::OwnUserNamespace(root));
  if (own_user) {
    RETURN_IF_ERROR(RecordUserNamespace(root, c->mutable_user_ns()));
    RETURN_IF_ERROR(CheckIdsMapped(*ckpt, c->user_ns()));
    // A sysfs is mounted by a namespace's owner: one the container made inside a network
    // namespace its runtime hands over (not its user namespace's) could not be made again.
    for (const image::Mount& m : c->mounts()) {
      if (!opts.external_net.empty() && m.kind() == image::Mount::FILESYSTEM && m.fstype() == "sysfs") {
        return absl::UnimplementedError(absl::StrFormat(
            "the container in a user namespace of its own has a sysfs at %s in a network namespace its runtime "
            "hands over: its new user namespace could not mount it again (bind the host's /sys instead)",
            m.point()));
      }
    }
  }
  ASSIGN_OR_RETURN(bool own_uts, OwnNamespace(root, "uts"));
  c->set_own_uts_ns(own_uts);
  if (own_uts) {
    ASSIGN_OR_RETURN(utsname names, NamesIn(root));
    c->set_hostname(names.nodename);
    c->set_domainname(names.domainname);
  }
  c->set_external_pid(opts.external_pid);
  ASSIGN_OR_RETURN(bool own_net, OwnNamespace(root, "net"));
  c->set_own_net_ns(own_net);
  if (own_net && !opts.external_net.empty()) {
    c->set_external_net(opts.external_net);
  } else if (own_net && !opts.empty_net) {
    // Made again empty but for its loopback: refuse one that holds more.
    std::string path = absl::StrCat("/proc/", root, "/net/dev");
    ASSIGN_OR_RETURN(std::string dev, ReadFile(path));
    std::vector<absl::string_view> lines = absl::StrSplit(dev, '\n', absl::SkipEmpty());
    for (size_t i = 2; i < lines.size(); ++i) {
      absl::string_view name = absl::StripAsciiWhitespace(lines[i].substr(0, lines[i].find(':')));
      if (name != "lo") {
        return absl::UnimplementedError(absl::StrFormat(
            "the container's network namespace has the interface %s: cairn makes a container's network namespace "
            "again only with its loopback; let the runtime hand the namespace over (criu-compat: external "
            "net[INODE]:KEY at dump, inherit_fd KEY at restore)",
            name));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace cairn::dump
