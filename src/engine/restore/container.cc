#include "engine/restore/container.h"

#include <fcntl.h>
#include <net/if.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/file_util.h"
#include "common/status.h"
#include "engine/proc/id_map.h"
#include "engine/proc/mountinfo.h"
#include "engine/proc/pty.h"

namespace cairn::restore {
namespace {

constexpr unsigned kMaxTerminalIndex = proc::kMaxContainerTerminal;

constexpr uint64_t kResolveNoMagiclinks = 0x02;
constexpr uint64_t kResolveInRoot = 0x10;

struct OpenHow {
  uint64_t flags, mode, resolve;
};

// "/proc/self/fd/N" into `buf` (at least 32 bytes), without allocating.
const char* FdPath(int fd, char* buf) {
  const char prefix[] = "/proc/self/fd/";
  std::memcpy(buf, prefix, sizeof prefix - 1);
  char digits[12];
  int n = 0;
  unsigned v = static_cast<unsigned>(fd);
  do {
    digits[n++] = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v != 0);
  char* p = buf + sizeof prefix - 1;
  while (n > 0) *p++ = digits[--n];
  *p = '\0';
  return buf;
}

// `path` resolved inside the root open at `root` (its symlinks and ".." cannot leave it).
int OpenInRoot(int root, const char* path, uint64_t flags) {
  OpenHow how{flags | O_CLOEXEC, 0, kResolveInRoot | kResolveNoMagiclinks};
  return static_cast<int>(::syscall(SYS_openat2, root, path, &how, sizeof how));
}

// A relative path of plain components: no "..", ".", or empty ones.
bool PlainRelative(const std::string& path) {
  if (path.empty() || path[0] == '/') return false;
  for (absl::string_view part : absl::StrSplit(path, '/')) {
    if (part.empty() || part == "." || part == "..") return false;
  }
  return true;
}

// The host's mount point of the cgroup v1 hierarchy with `controllers`, and the restorer's own
// cgroup path in it.
absl::StatusOr<std::pair<std::string, std::string>> HostCgroup(const std::string& controllers) {
  ASSIGN_OR_RETURN(std::vector<proc::MountEntry> mine, proc::ReadMountTable(::getpid()));
  std::set<std::string> want;
  for (absl::string_view c : absl::StrSplit(controllers, ',', absl::SkipEmpty())) want.emplace(c);
  std::string point;
  for (const proc::MountEntry& m : mine) {
    if (m.fstype != "cgroup" || m.fs_root != "/") continue;
    std::set<std::string> have;
    for (absl::string_view o : absl::StrSplit(m.super_options, ',', absl::SkipEmpty())) {
      if (o != "rw" && o != "ro") have.emplace(o);
    }
    if (have == want) {
      point = m.point;
      break;
    }
  }
  if (point.empty()) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "this machine has no cgroup v1 hierarchy of %s mounted, which the container had mounted", controllers));
  }
  ASSIGN_OR_RETURN(std::string text, ReadFile("/proc/self/cgroup"));
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    std::vector<absl::string_view> f = absl::StrSplit(line, absl::MaxSplits(':', 2));
    if (f.size() == 3 && f[1] == controllers) return std::make_pair(point, std::string(f[2]));
  }
  return std::make_pair(point, std::string("/"));
}

std::vector<proc::IdRange> Ranges(const google::protobuf::RepeatedPtrField<image::IdRange>& in) {
  std::vector<proc::IdRange> out;
  for (const image::IdRange& r : in) out.push_back({r.inside(), r.outside(), r.count()});
  return out;
}

// A file system's mount options with their owners ("uid=", "gid=": the host's ids, as
// mountinfo shows them) named as inside the user namespace that mounts it again.
absl::StatusOr<std::string> OptionsInside(const std::string& options, const std::vector<proc::IdRange>& uids,
                                          const std::vector<proc::IdRange>& gids, const std::string& point) {
  std::vector<std::string> out;
  for (absl::string_view o : absl::StrSplit(options, ',', absl::SkipEmpty())) {
    bool uid = absl::StartsWith(o, "uid="), gid = absl::StartsWith(o, "gid=");
    if (!uid && !gid) {
      out.emplace_back(o);
      continue;
    }
    uint32_t host = 0;
    if (!absl::SimpleAtoi(o.substr(4), &host)) {
      return absl::DataLossError(absl::StrFormat("mount %s: option '%s' (corrupt image)", point, o));
    }
    std::optional<uint32_t> inside = proc::InsideId(uid ? uids : gids, host);
    if (!inside) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "mount %s: its owner %s is not in the container's user namespace's maps (corrupt image?)", point, o));
    }
    out.push_back(absl::StrCat(uid ? "uid=" : "gid=", *inside));
  }
  return absl::StrJoin(out, ",");
}

}  // namespace

absl::StatusOr<image::Creds> CredsInside(const image::Creds& creds, const image::UserNamespace& ns) {
  std::vector<proc::IdRange> uids = Ranges(ns.uid_map()), gids = Ranges(ns.gid_map());
  image::Creds out = creds;
  auto map = [](const std::vector<proc::IdRange>& m, uint32_t host, const char* what) -> absl::StatusOr<uint32_t> {
    std::optional<uint32_t> inside = proc::InsideId(m, host);
    if (!inside) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "the process's %s %u is not in its container's user namespace's maps (corrupt image?)", what, host));
    }
    return *inside;
  };
  for (int i = 0; i < out.uids_size(); ++i) {
    ASSIGN_OR_RETURN(uint32_t v, map(uids, out.uids(i), "uid"));
    out.set_uids(i, v);
  }
  for (int i = 0; i < out.gids_size(); ++i) {
    ASSIGN_OR_RETURN(uint32_t v, map(gids, out.gids(i), "gid"));
    out.set_gids(i, v);
  }
  for (int i = 0; i < out.groups_size(); ++i) {
    ASSIGN_OR_RETURN(uint32_t v, map(gids, out.groups(i), "supplementary group"));
    out.set_groups(i, v);
  }
  return out;
}

const char* ContainerPlan::Keep(std::string s) {
  strings_.push_back(std::move(s));
  return strings_.back().c_str();
}

absl::StatusOr<ContainerPlan> ContainerPlan::Make(const image::Container& c, const ContainerSetup& setup) {
  ContainerPlan plan;
  if (c.mounts_size() == 0 || c.mounts(0).kind() != image::Mount::ROOT) {
    return absl::DataLossError("the container's mount table does not start with its root (corrupt image)");
  }
  if (setup.root.empty()) {
    return absl::InvalidArgumentError(
        "this checkpoint is of a container: restore it over its root file system (cairn restore --root DIR; a "
        "runtime gives it in its request)");
  }
  struct stat st {};
  if (::stat(setup.root.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return absl::NotFoundError(absl::StrFormat("the container's root file system %s is not a directory here",
                                               setup.root));
  }
  plan.clone_flags_ = CLONE_NEWNS;
  if (c.external_pid().empty()) {
    plan.clone_flags_ |= CLONE_NEWPID;
  } else if (setup.pid_ns_fd < 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "the container's PID namespace was another's (key %s): hand one over at restore (criu-compat: inherit_fd "
        "%s)",
        c.external_pid(), c.external_pid()));
  } else if (c.has_user_ns()) {
    // Its processes would choose their ids in a namespace whose owner their user namespace is
    // not: the kernel refuses it (set_tid needs CAP_CHECKPOINT_RESTORE over the namespace).
    return absl::UnimplementedError(
        "the container has a user namespace of its own and a PID namespace that was another's: cairn does not "
        "restore the two together");
  } else {
    plan.pid_before_clone_ = setup.pid_ns_fd;
  }
  if (c.own_uts_ns()) plan.clone_flags_ |= CLONE_NEWUTS;
  // Rooted at the restorer's cgroups, where the runtime placed it: the container's (the dump
  // checked the container stood at its namespace's root).
  if (c.own_cgroup_ns()) plan.clone_flags_ |= CLONE_NEWCGROUP;
  auto add = [&plan](Step s) { plan.steps_.push_back(s); };

  // Its user namespace: made by the same clone, owning every other new one; the task waits
  // for its maps, then becomes the namespace's root (its lowest mapped ids: 0 for a runtime's
  // container) before anything it makes takes its owner.
  std::vector<proc::IdRange> uids, gids;
  const bool userns = c.has_user_ns();
  auto lowest = [](const std::vector<proc::IdRange>& m) {
    uint32_t low = m[0].inside;
    for (const proc::IdRange& r : m) low = std::min(low, r.inside);
    return low;
  };
  if (userns) {
    uids = Ranges(c.user_ns().uid_map());
    gids = Ranges(c.user_ns().gid_map());
    if (uids.empty() || gids.empty()) {
      return absl::DataLossError("the container's user namespace has no id maps (corrupt image)");
    }
    plan.user_ns_ = c.user_ns();
    plan.clone_flags_ |= CLONE_NEWUSER;
    int gate[2];
    if (::pipe2(gate, O_CLOEXEC) != 0) return ErrnoStatus("pipe2 for the container's user namespace");
    plan.gate_read_ = UniqueFd(gate[0]);
    plan.gate_write_ = UniqueFd(gate[1]);
    add({.op = Op::kAwaitMaps, .fd = plan.gate_read_.get()});
  }
  add({.op = Op::kPrivate});
  if (c.own_net_ns()) {
    if (!c.external_net().empty()) {
      if (setup.net_ns_fd < 0) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "the container's network namespace was its runtime's (key %s): hand one over at restore (criu-compat: "
            "inherit_fd %s)",
            c.external_net(), c.external_net()));
      }
      if (userns) {
        plan.net_before_clone_ = setup.net_ns_fd;
      } else {
        add({.op = Op::kSetns, .a = plan.Keep(c.external_net()), .fd = setup.net_ns_fd});
      }
    } else {
      plan.clone_flags_ |= CLONE_NEWNET;
      add({.op = Op::kLoopbackUp});
    }
  }
  if (c.own_uts_ns()) {
    add({.op = Op::kHostname, .a = plan.Keep(c.hostname())});
    add({.op = Op::kDomainname, .a = plan.Keep(c.domainname())});
  }
  add({.op = Op::kOpenRoot, .a = plan.Keep(setup.root)});
  // Host paths are opened here, before the task becomes the root of its user namespace: until
  // then its ids are the host root's, whose owner bits pass directories the host's root owns
  // (a runtime's 0700 state directory holding the root it restores into); it has no
  // capabilities over the host's files, so a directory another user owns and closes still stops it.
  const size_t host_opens_at = plan.steps_.size();
  int slots = 0;

  std::map<uint32_t, const image::Mount*> by_id;
  for (const image::Mount& m : c.mounts()) {
    if (m.kind() == image::Mount::ROOT) {
      by_id[m.id()] = &m;
      continue;
    }
    if (m.point().empty() || m.point()[0] != '/') {
      return absl::DataLossError(absl::StrFormat("mount point '%s' is not absolute (corrupt image)", m.point()));
    }
    const char* point = plan.Keep(m.point());
    const uint64_t per_mount = m.flags() & (MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC | MS_NOATIME |
                                            MS_NODIRATIME | MS_RELATIME | MS_STRICTATIME);
    switch (m.kind()) {
      case image::Mount::FILESYSTEM: {
        static const std::set<std::string> kKnown = {"proc", "sysfs", "tmpfs", "devpts", "mqueue"};
        if (!kKnown.count(m.fstype())) {
          return absl::DataLossError(absl::StrFormat("mount %s: file system %s (corrupt image)", m.point(), m.fstype()));
        }
        bool filled = m.entries_size() > 0;
        unsigned long first = per_mount & ~static_cast<uint64_t>(MS_RDONLY);
        if (!filled && (m.fs_read_only() || (per_mount & MS_RDONLY))) first |= MS_RDONLY;
        std::string options = m.options();
        if (userns) {
          ASSIGN_OR_RETURN(options, OptionsInside(options, uids, gids, m.point()));
        }
        add({.op = Op::kMount, .a = plan.Keep(m.source()), .b = point, .fstype = plan.Keep(m.fstype()),
             .data = plan.Keep(options), .flags = first});
        for (const image::PtyState& pty : m.terminals()) {
          std::string slave = absl::StrCat(m.point(), "/", pty.index());
          if (m.fstype() != "devpts" || pty.index() >= kMaxTerminalIndex) {
            return absl::DataLossError(absl::StrFormat("terminal %s (corrupt image)", slave));
          }
          if (!setup.take_terminal) {
            return absl::FailedPreconditionError(absl::StrFormat(
                "the container's terminal %s had its master outside the container (its runtime's console): restore "
                "it through its runtime, which takes the new master (criu-compat: orphan_pts_master; runc restore "
                "--console-socket)",
                slave));
          }
          UniqueFd placeholder(::open("/dev/null", O_RDONLY | O_CLOEXEC));
          if (!placeholder.valid()) return ErrnoStatus("open /dev/null (a place for the master of " + slave + ")");
          add({.op = Op::kTerminal, .b = plan.Keep(absl::StrCat(m.point(), "/ptmx")), .c = plan.Keep(slave),
               .mode = pty.index(), .fd = placeholder.get()});
          plan.terminals_.push_back({pty, slave, std::move(placeholder), UniqueFd()});
        }
        if (!filled) break;
        std::set<std::string> dirs, files;
        std::vector<Step> times;  // set last, children before their directories
        for (const image::TreeEntry& e : m.entries()) {
          if (!PlainRelative(e.path())) {
            return absl::DataLossError(absl::StrFormat("file '%s' of the tmpfs at %s (corrupt image)", e.path(),
                                                       m.point()));
          }
          std::string parent = e.path().find('/') == std::string::npos ? "" : e.path().substr(0, e.path().rfind('/'));
          if (!parent.empty() && !dirs.count(parent)) {
            return absl::DataLossError(absl::StrFormat("file %s of the tmpfs at %s comes before its directory "
                                                       "(corrupt image)", e.path(), m.point()));
          }
          Step s{.op = Op::kMkdir, .b = point, .c = plan.Keep(e.path()), .mode = e.mode()};
          if (e.mtime_ns() != 0) {
            times.push_back({.op = Op::kTimes, .b = point, .c = s.c, .atime_ns = e.atime_ns(), .mtime_ns = e.mtime_ns()});
          }
          if (!e.link_to().empty()) {
            if (!files.count(e.link_to())) {
              return absl::DataLossError(absl::StrFormat("file %s of the tmpfs at %s names %s, not a file saved before "
                                                         "it (corrupt image)",
                                                         e.path(), m.point(), e.link_to()));
            }
            add({.op = Op::kLink, .a = plan.Keep(e.link_to()), .b = point, .c = s.c});
            continue;
          }
          if (S_ISDIR(e.mode())) {
            s.op = Op::kMkdir;
            dirs.insert(e.path());
          } else if (S_ISLNK(e.mode())) {
            s.op = Op::kSymlink;
            s.a = plan.Keep(e.target());
          } else if (S_ISREG(e.mode())) {
            files.insert(e.path());
            s.op = Op::kWrite;
            s.data = plan.Keep(e.content());
            s.len = e.content().size();
          } else if (S_ISCHR(e.mode()) || S_ISBLK(e.mode()) || S_ISFIFO(e.mode())) {
            s.op = Op::kMknod;
            s.rdev = e.rdev();
          } else {
            return absl::DataLossError(absl::StrFormat("file %s of the tmpfs at %s has mode %o (corrupt image)",
                                                       e.path(), m.point(), e.mode()));
          }
          add(s);
          uint32_t uid = e.uid(), gid = e.gid();
          if (userns) {
            std::optional<uint32_t> u = proc::InsideId(uids, uid), g = proc::InsideId(gids, gid);
            if (!u || !g) {
              return absl::FailedPreconditionError(absl::StrFormat(
                  "file %s of the tmpfs at %s is owned by %u:%u, ids the container's user namespace does not map "
                  "(corrupt image?)",
                  e.path(), m.point(), uid, gid));
            }
            uid = *u;
            gid = *g;
          }
          add({.op = Op::kOwn, .b = point, .c = s.c, .mode = e.mode(), .uid = uid, .gid = gid});
        }
        for (auto it = times.rbegin(); it != times.rend(); ++it) add(*it);
        if (m.fs_read_only()) {
          add({.op = Op::kRemount, .b = point, .data = plan.Keep(options), .flags = MS_RDONLY | per_mount});
        }
        if (per_mount & MS_RDONLY) add({.op = Op::kRemount, .b = point, .flags = MS_BIND | per_mount});
        break;
      }
      case image::Mount::BIND: {
        auto of = by_id.find(m.bind_of());
        if (of == by_id.end()) {
          return absl::DataLossError(absl::StrFormat("mount %s binds mount %d, which comes later or not at all "
                                                     "(corrupt image)", m.point(), m.bind_of()));
        }
        const image::Mount& src = *of->second;
        if (!absl::StartsWith(m.fs_root(), src.fs_root())) {
          return absl::DataLossError(absl::StrFormat("mount %s shows %s, not within mount %s (corrupt image)",
                                                     m.point(), m.fs_root(), src.point()));
        }
        std::string rel = src.fs_root() == "/" ? m.fs_root() : m.fs_root().substr(src.fs_root().size());
        std::string from = src.point() == "/" ? rel : src.point() + rel;
        if (src.kind() == image::Mount::ROOT) from = rel.empty() ? "/" : rel;
        add({.op = Op::kBind, .a = plan.Keep(from.empty() ? "/" : from), .b = point, .a_in_root = true});
        if (per_mount != 0) add({.op = Op::kRemount, .b = point, .flags = MS_BIND | per_mount});
        break;
      }
      case image::Mount::EXTERNAL: {
        auto host = setup.external_mounts.find(m.external());
        if (host == setup.external_mounts.end()) {
          return absl::InvalidArgumentError(absl::StrFormat(
              "the container's mount at %s was external (key %s): name its host path at restore (cairn restore "
              "--external-mount %s=PATH; criu-compat: ext_mnt)",
              m.point(), m.external(), m.external()));
        }
        add({.op = Op::kBind, .a = plan.Keep(host->second), .b = point, .flags = MS_REC, .slot = slots++});
        if (per_mount != 0) add({.op = Op::kRemount, .b = point, .flags = MS_BIND | per_mount});
        break;
      }
      case image::Mount::CGROUP: {
        if (c.own_cgroup_ns()) {
          // Mounted afresh inside its cgroup namespace, as its runtime did: it shows the
          // namespace's root, the container's cgroup.
          add({.op = Op::kMount, .a = plan.Keep(m.source()), .b = point, .fstype = plan.Keep("cgroup"),
               .data = plan.Keep(m.controllers())});
          if (per_mount != 0) add({.op = Op::kRemount, .b = point, .flags = MS_BIND | per_mount});
          break;
        }
        absl::StatusOr<std::pair<std::string, std::string>> cgroup = HostCgroup(m.controllers());
        if (!cgroup.ok()) return cgroup.status();
        const auto& [point_here, own_here] = *cgroup;
        std::string from = point_here + (m.own_cgroup() && own_here != "/" ? own_here : "");
        add({.op = Op::kBind, .a = plan.Keep(from), .b = point, .slot = slots++});
        if (per_mount != 0) add({.op = Op::kRemount, .b = point, .flags = MS_BIND | per_mount});
        break;
      }
      default:
        return absl::DataLossError(absl::StrFormat("mount %s of unknown kind %d (corrupt image)", m.point(),
                                                   static_cast<int>(m.kind())));
    }
    by_id[m.id()] = &m;
  }
  if (slots > kMaxHostSources) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "the container binds %d host paths; cairn restores at most %d", slots, kMaxHostSources));
  }
  std::vector<Step> opens;
  for (const Step& s : plan.steps_) {
    if (s.op == Op::kBind && s.slot >= 0) opens.push_back({.op = Op::kOpenHost, .a = s.a, .slot = s.slot});
  }
  if (userns) {
    opens.push_back({.op = Op::kBecomeRoot, .flags = c.user_ns().setgroups_denied() ? 0UL : 1UL,
                     .uid = lowest(uids), .gid = lowest(gids)});
  }
  plan.steps_.insert(plan.steps_.begin() + static_cast<std::ptrdiff_t>(host_opens_at), opens.begin(), opens.end());
  plan.take_terminal_ = setup.take_terminal;
  add({.op = Op::kPivot});
  const image::Mount& root = c.mounts(0);
  if (root.flags() & MS_RDONLY) add({.op = Op::kRemount, .b = plan.Keep("/"), .flags = MS_BIND | root.flags()});
  return plan;
}

int ContainerPlan::Run(int* err) const {
  int host[kMaxHostSources];  // kOpenHost's
  int opened = 0;
  int root = -1;
  int at = -1;         // the mount a tmpfs's files go into
  const char* at_point = nullptr;
  char a_buf[32], b_buf[32];
  for (size_t i = 0; i < steps_.size(); ++i) {
    const Step& s = steps_[i];
    int rc = 0;
    int tmp_a = -1, tmp_b = -1;
    switch (s.op) {
      case Op::kAwaitMaps: {
        char go = 0;
        ssize_t n;
        do {
          n = ::read(s.fd, &go, 1);
        } while (n < 0 && errno == EINTR);
        rc = n == 1 ? 0 : -1;
        if (n == 0) errno = EPIPE;  // the restorer gave up
        break;
      }
      case Op::kOpenHost:
        host[s.slot] = ::open(s.a, O_PATH | O_CLOEXEC);
        rc = host[s.slot] < 0 ? -1 : 0;
        if (rc == 0) opened = s.slot + 1;
        break;
      case Op::kBecomeRoot: {
        // Raw calls: the libc wrappers would signal the restorer's other threads, copied here as memory only.
        rc = 0;
        if (s.flags != 0) rc = static_cast<int>(::syscall(SYS_setgroups, 0, nullptr));
        if (rc == 0) rc = static_cast<int>(::syscall(SYS_setresgid, s.gid, s.gid, s.gid));
        if (rc == 0) rc = static_cast<int>(::syscall(SYS_setresuid, s.uid, s.uid, s.uid));
        break;
      }
      case Op::kPrivate:
        rc = ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr);
        break;
      case Op::kSetns:
        rc = ::setns(s.fd, CLONE_NEWNET);
        break;
      case Op::kLoopbackUp: {
        int sk = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        ifreq ifr{};
        std::memcpy(ifr.ifr_name, "lo", 3);
        rc = sk < 0 ? -1 : ::ioctl(sk, SIOCGIFFLAGS, &ifr);
        if (rc == 0) {
          ifr.ifr_flags = static_cast<short>(ifr.ifr_flags | IFF_UP);
          rc = ::ioctl(sk, SIOCSIFFLAGS, &ifr);
        }
        if (sk >= 0) ::close(sk);
        break;
      }
      case Op::kHostname:
        rc = ::sethostname(s.a, std::strlen(s.a));
        break;
      case Op::kDomainname:
        rc = ::setdomainname(s.a, std::strlen(s.a));
        break;
      case Op::kOpenRoot: {
        // A copy of the root's mount attached over it; its descriptor reaches that copy (a path
        // through /proc/self/fd would reach the directory under it).
        int dir = ::open(s.a, O_PATH | O_DIRECTORY | O_CLOEXEC);
        root = dir < 0 ? -1
                       : static_cast<int>(::syscall(SYS_open_tree, dir, "",
                                                    OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_EMPTY_PATH));
        rc = root < 0 ? -1
                      : static_cast<int>(::syscall(SYS_move_mount, root, "", dir, "",
                                                   MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH));
        int e = errno;
        if (dir >= 0) ::close(dir);
        errno = e;
        break;
      }
      case Op::kMount:
        tmp_b = OpenInRoot(root, s.b, O_PATH);
        rc = tmp_b < 0 ? -1 : ::mount(s.a, FdPath(tmp_b, b_buf), s.fstype, s.flags, s.data);
        break;
      case Op::kBind: {
        if (s.a_in_root) tmp_a = OpenInRoot(root, s.a, O_PATH);
        int from = s.a_in_root ? tmp_a : host[s.slot];
        tmp_b = OpenInRoot(root, s.b, O_PATH);
        rc = from < 0 || tmp_b < 0 ? -1
                                   : ::mount(FdPath(from, a_buf), FdPath(tmp_b, b_buf), nullptr, MS_BIND | s.flags,
                                             nullptr);
        break;
      }
      case Op::kRemount:
        tmp_b = OpenInRoot(root, s.b, O_PATH);
        rc = tmp_b < 0 ? -1 : ::mount(nullptr, FdPath(tmp_b, b_buf), nullptr, MS_REMOUNT | s.flags, s.data);
        break;
      case Op::kMkdir:
      case Op::kMknod:
      case Op::kSymlink:
      case Op::kWrite:
      case Op::kOwn:
      case Op::kLink:
      case Op::kTimes:
        if (at_point != s.b) {
          if (at >= 0) ::close(at);
          at = OpenInRoot(root, s.b, O_PATH | O_DIRECTORY);
          at_point = s.b;
          if (at < 0) {
            rc = -1;
            break;
          }
        }
        if (s.op == Op::kMkdir) {
          rc = ::mkdirat(at, s.c, 0700);
        } else if (s.op == Op::kMknod) {
          rc = ::mknodat(at, s.c, s.mode, s.rdev);
        } else if (s.op == Op::kSymlink) {
          rc = ::symlinkat(s.a, at, s.c);
        } else if (s.op == Op::kWrite) {
          int f = ::openat(at, s.c, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
          rc = f < 0 ? -1 : 0;
          for (size_t done = 0; rc == 0 && done < s.len;) {
            ssize_t n = ::write(f, s.data + done, s.len - done);
            if (n <= 0) rc = -1;
            done += n > 0 ? static_cast<size_t>(n) : 0;
          }
          if (f >= 0) ::close(f);
        } else if (s.op == Op::kLink) {
          rc = ::linkat(at, s.a, at, s.c, 0);
        } else if (s.op == Op::kTimes) {
          timespec ts[2] = {{static_cast<time_t>(s.atime_ns / 1000000000), static_cast<long>(s.atime_ns % 1000000000)},
                            {static_cast<time_t>(s.mtime_ns / 1000000000), static_cast<long>(s.mtime_ns % 1000000000)}};
          rc = ::utimensat(at, s.c, ts, AT_SYMLINK_NOFOLLOW);
        } else {
          rc = ::fchownat(at, s.c, s.uid, s.gid, AT_SYMLINK_NOFOLLOW);
          if (rc == 0 && !S_ISLNK(s.mode)) rc = ::fchmodat(at, s.c, s.mode & 07777, 0);
        }
        break;
      case Op::kTerminal: {
        // The kernel numbers a new terminal with the lowest free index: the ones below this
        // one's are held open until it comes, then let go.
        int below[kMaxTerminalIndex];
        int held = 0;
        rc = -1;
        errno = EBUSY;
        for (;;) {
          int m = OpenInRoot(root, s.b, O_RDWR | O_NOCTTY);
          unsigned index = 0;
          if (m < 0) break;
          if (::ioctl(m, TIOCGPTN, &index) != 0 || index > s.mode || held == kMaxTerminalIndex) {
            if (index > s.mode) errno = EBUSY;
            ::close(m);
            break;
          }
          if (index < s.mode) {
            below[held++] = m;
            continue;
          }
          int unlock = 0;
          rc = ::ioctl(m, TIOCSPTLCK, &unlock);
          if (rc == 0 && ::dup3(m, s.fd, O_CLOEXEC) < 0) rc = -1;
          int e = errno;
          ::close(m);
          errno = e;
          break;
        }
        int e = errno;
        for (int k = 0; k < held; ++k) ::close(below[k]);
        errno = e;
        break;
      }
      case Op::kPivot:
        rc = ::fchdir(root);
        if (rc == 0) rc = static_cast<int>(::syscall(SYS_pivot_root, ".", "."));
        if (rc == 0) rc = ::umount2(".", MNT_DETACH);
        if (rc == 0) rc = ::chdir("/");
        if (rc == 0) {
          ::close(root);
          root = ::open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
          rc = root < 0 ? -1 : 0;
        }
        break;
    }
    int e = errno;
    if (tmp_a >= 0) ::close(tmp_a);
    if (tmp_b >= 0) ::close(tmp_b);
    if (rc != 0) {
      *err = e;
      if (at >= 0) ::close(at);  // the table is the restorer's too
      if (root >= 0) ::close(root);
      for (int k = 0; k < opened; ++k) ::close(host[k]);
      return static_cast<int>(i);
    }
  }
  if (at >= 0) ::close(at);
  if (root >= 0) ::close(root);
  for (int k = 0; k < opened; ++k) ::close(host[k]);
  return -1;
}

absl::Status ContainerPlan::MapIds(pid_t task) {
  if (!user_ns_) return absl::OkStatus();
  auto write = [task](const char* file, const std::string& text) -> absl::Status {
    std::string path = absl::StrCat("/proc/", task, "/", file);
    UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
    if (!fd.valid()) return ErrnoStatus("open " + path);
    if (::write(fd.get(), text.data(), text.size()) != static_cast<ssize_t>(text.size())) {
      return ErrnoStatus(absl::StrFormat("write '%s' to %s (the container's user namespace)",
                                         absl::StripTrailingAsciiWhitespace(text), path));
    }
    return absl::OkStatus();
  };
  // "deny" only before gid_map is written; "allow" is the default.
  if (user_ns_->setgroups_denied()) RETURN_IF_ERROR(write("setgroups", "deny"));
  RETURN_IF_ERROR(write("uid_map", proc::FormatIdMap(Ranges(user_ns_->uid_map()))));
  RETURN_IF_ERROR(write("gid_map", proc::FormatIdMap(Ranges(user_ns_->gid_map()))));
  char go = 1;
  if (::write(gate_write_.get(), &go, 1) != 1) return ErrnoStatus("let the container's root task go on");
  gate_write_.Reset();
  return absl::OkStatus();
}

absl::Status ContainerPlan::HandOverTerminals() {
  for (Terminal& t : terminals_) {
    auto where = [&] { return absl::StrCat("the container's terminal ", t.slave); };
    unsigned index = 0;
    if (::ioctl(t.master.get(), TIOCGPTN, &index) != 0 || index != t.pty.index()) {
      return absl::InternalError(where() + ": its master is not in place after the container's set-up");
    }
    if (t.pty.termios().size() == sizeof(proc::Termios2)) {
      proc::Termios2 tio;
      std::memcpy(&tio, t.pty.termios().data(), sizeof tio);
      if (::ioctl(t.master.get(), proc::kTcsets2, &tio) != 0) return ErrnoStatus("ioctl(TCSETS2) on " + where());
    }
    if (t.pty.winsize().size() == sizeof(winsize)) {
      winsize ws;
      std::memcpy(&ws, t.pty.winsize().data(), sizeof ws);
      if (::ioctl(t.master.get(), TIOCSWINSZ, &ws) != 0) return ErrnoStatus("ioctl(TIOCSWINSZ) on " + where());
    }
    t.slave_held = UniqueFd(::ioctl(t.master.get(), TIOCGPTPEER, O_RDWR | O_NOCTTY | O_CLOEXEC));
    if (!t.slave_held.valid() || ::fchown(t.slave_held.get(), t.pty.slave_uid(), t.pty.slave_gid()) != 0 ||
        ::fchmod(t.slave_held.get(), t.pty.slave_mode()) != 0) {
      return ErrnoStatus("give " + where() + " its owner and mode back");
    }
    RETURN_IF_ERROR(Annotate(take_terminal_(t.master.get(), t.slave), "hand over the master of " + where()));
  }
  return absl::OkStatus();
}

std::string ContainerPlan::Describe(int index) const {
  if (index < 0 || static_cast<size_t>(index) >= steps_.size()) return "an unknown step";
  const Step& s = steps_[static_cast<size_t>(index)];
  switch (s.op) {
    case Op::kAwaitMaps:
      return "wait for the id maps of the container's new user namespace";
    case Op::kOpenHost:
      return absl::StrCat("open the host path ", s.a, " (to bind into the container)");
    case Op::kBecomeRoot:
      return absl::StrFormat("become uid %u, gid %u of the container's new user namespace", s.uid, s.gid);
    case Op::kPrivate:
      return "make the new mount namespace private";
    case Op::kSetns:
      return absl::StrCat("enter the network namespace handed over as ", s.a);
    case Op::kLoopbackUp:
      return "bring the loopback up in the container's new network namespace";
    case Op::kHostname:
      return absl::StrCat("set the host name ", s.a);
    case Op::kDomainname:
      return absl::StrCat("set the domain name ", s.a);
    case Op::kOpenRoot:
      return absl::StrCat("bind the root file system ", s.a, " onto itself");
    case Op::kMount:
      return absl::StrFormat("mount %s (%s, options '%s') at %s in the container", s.fstype, s.a, s.data, s.b);
    case Op::kBind:
      return absl::StrFormat("bind %s%s onto %s in the container (the mount point must exist in the root file system)",
                             s.a, s.a_in_root ? " (in the container)" : " (a host path)", s.b);
    case Op::kRemount:
      return absl::StrFormat("remount %s in the container with flags %#x", s.b, s.flags);
    case Op::kMkdir:
    case Op::kMknod:
    case Op::kSymlink:
    case Op::kWrite:
    case Op::kOwn:
      return absl::StrFormat("make %s/%s again (a file of the container's tmpfs)", s.b, s.c);
    case Op::kLink:
      return absl::StrFormat("link %s/%s to %s/%s again (two names of one file of the container's tmpfs)", s.b, s.c,
                             s.b, s.a);
    case Op::kTimes:
      return absl::StrFormat("give %s/%s its times back (a file of the container's tmpfs)", s.b, s.c);
    case Op::kPivot:
      return "pivot_root into the container's root";
    case Op::kTerminal:
      return absl::StrFormat("make the terminal %s again (through %s; the number must be free on a fresh devpts)", s.c,
                             s.b);
  }
  return "a step";
}

}  // namespace cairn::restore
