#include "engine/restore/sockets.h"

#include <fcntl.h>
#include <linux/filter.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <map>
#include <optional>
#include <filesystem>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "common/file_util.h"
#include "common/log.h"
#include "common/sockaddr.h"
#include "common/status.h"
#include "common/unique_fd.h"
#include "engine/net/orphans.h"
#include "engine/restore/files.h"

namespace cairn::restore {
namespace {

// Whether `addr` (struct sockaddr bytes) is a unix socket's name in the file system.
bool FileName(const std::string& addr) {
  sa_family_t family = 0;
  if (addr.size() >= sizeof family) std::memcpy(&family, addr.data(), sizeof family);
  return family == AF_UNIX && addr.size() > offsetof(sockaddr_un, sun_path) &&
         addr[offsetof(sockaddr_un, sun_path)] != '\0';
}

// connect(2) of `sock` to `addr`. A unix socket's name is the image's: a container's is resolved
// in its file system (InImageMounts). Returns connect's result, errno set.
int ConnectTo(int sock, const std::string& addr) {
  auto go = [&] {
    return ::connect(sock, reinterpret_cast<const sockaddr*>(addr.data()), static_cast<socklen_t>(addr.size()));
  };
  if (!FileName(addr) || !ImageRootActive() || InImageMountsNow()) return go();
  int rc = -1, err = 0;
  absl::Status entered = InImageMounts([&] {
    rc = go();
    err = errno;
    return absl::OkStatus();
  });
  if (!entered.ok()) {
    CAIRN_LOG_WARN("event=container_mounts_not_entered error=\"{}\"", entered.ToString());
    err = EPERM;
  }
  errno = err;
  return rc;
}

std::string Where(const image::Fd& fd, pid_t pid) { return absl::StrFormat("fd %d of pid %d", fd.fd(), pid); }

absl::Status Park(UniqueFd f, const image::Fd& fd, pid_t pid, Masters* m) {
  int n = ::fcntl(f.get(), F_DUPFD_CLOEXEC, kMasterFloor);
  if (n < 0) return ErrnoStatus(absl::StrFormat("fcntl(F_DUPFD) for %s", Where(fd, pid)));
  m->owned.emplace_back(n);
  m->fds[{pid, fd.fd()}] = n;
  return absl::OkStatus();
}

// A TCP connection whose peer has reset it: connected over loopback to a listener of our
// own, whose accepted end is closed with a zero linger (which sends RST). The socket
// keeps the error for the program's next call.
absl::StatusOr<UniqueFd> ResetConnection(int family, const image::Fd& fd, pid_t pid) {
  auto fail = [&](absl::string_view what) {
    return ErrnoStatus(absl::StrFormat("%s (making the reset connection for %s, was %s)", what, Where(fd, pid),
                                       fd.socket().reset_from()));
  };
  UniqueFd listener(::socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!listener.valid()) return fail("socket");
  sockaddr_storage a{};
  socklen_t len = 0;
  if (family == AF_INET6) {
    auto* s6 = reinterpret_cast<sockaddr_in6*>(&a);
    s6->sin6_family = AF_INET6;
    s6->sin6_addr = in6addr_loopback;
    len = sizeof *s6;
  } else {
    auto* s4 = reinterpret_cast<sockaddr_in*>(&a);
    s4->sin_family = AF_INET;
    s4->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    len = sizeof *s4;
  }
  if (::bind(listener.get(), reinterpret_cast<sockaddr*>(&a), len) != 0) return fail("bind to loopback");
  if (::listen(listener.get(), 1) != 0) return fail("listen");
  if (::getsockname(listener.get(), reinterpret_cast<sockaddr*>(&a), &len) != 0) return fail("getsockname");
  UniqueFd conn(::socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!conn.valid()) return fail("socket");
  if (::connect(conn.get(), reinterpret_cast<sockaddr*>(&a), len) != 0) return fail("connect over loopback");
  UniqueFd accepted(::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
  if (!accepted.valid()) return fail("accept");
  linger lg{1, 0};
  if (::setsockopt(accepted.get(), SOL_SOCKET, SO_LINGER, &lg, sizeof lg) != 0) return fail("SO_LINGER");
  accepted.Reset();
  pollfd p{conn.get(), POLLIN, 0};
  if (::poll(&p, 1, 2000) != 1 || (p.revents & (POLLERR | POLLHUP)) == 0) {
    return absl::InternalError(absl::StrFormat("the reset connection for %s did not see its reset", Where(fd, pid)));
  }
  return conn;
}

// Frees a unix socket name in the file system that a stale socket file still holds: a
// socket file nobody listens on (connect is refused). Anything else at that path is left
// alone and the restore fails.
absl::Status FreeUnixName(const std::string& path, int type, const image::Fd& fd, pid_t pid) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return absl::OkStatus();
    return ErrnoStatus("lstat " + path);
  }
  if (!S_ISSOCK(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s, the name of the unix socket at %s, is taken by a file that is not a socket; move it away and restore "
        "again",
        path, Where(fd, pid)));
  }
  UniqueFd probe(::socket(AF_UNIX, type | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!probe.valid()) return ErrnoStatus("socket (to probe " + path + ")");
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::strncpy(a.sun_path, path.c_str(), sizeof a.sun_path - 1);
  if (::connect(probe.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 || errno != ECONNREFUSED) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s, the name of the unix socket at %s, is in use by a running process (the original, if it was "
        "checkpointed with --leave-running?); stop it, or restore where that name is free",
        path, Where(fd, pid)));
  }
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) return ErrnoStatus("unlink the stale socket file " + path);
  return absl::OkStatus();
}

// The socket file's owner and mode, set through an O_PATH|O_NOFOLLOW descriptor of what is at
// `path` now, once it is seen to be a socket: a symlink put there meanwhile is not followed.
absl::Status GiveSocketFileBack(const std::string& path, const image::SocketState& s, const image::Fd& fd, pid_t pid) {
  UniqueFd f(::open(path.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC));
  struct stat st {};
  if (!f.valid() || ::fstat(f.get(), &st) != 0) return ErrnoStatus("open the socket file " + path);
  if (!S_ISSOCK(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s, just bound for %s, is no longer a socket (replaced meanwhile); restore stopped", path, Where(fd, pid)));
  }
  if (::fchownat(f.get(), "", s.bound_uid(), s.bound_gid(), AT_EMPTY_PATH) != 0 ||
      ChmodThroughDescriptor(f.get(), s.bound_mode()) != 0) {
    return ErrnoStatus("give the socket file " + path + " its owner and permissions back");
  }
  return absl::OkStatus();
}

// A name whose socket file had been removed: the directories missing above it are made
// (relative to the deepest one that exists, reached without following any symlink), and,
// once the socket is bound, the file and those directories are removed again.
struct RemovedName {
  UniqueFd dir;                 // the socket file's directory
  std::string leaf;             // the socket file's name in it
  std::vector<std::pair<UniqueFd, std::string>> made;  // (parent, name) of each directory made, outermost first

  RemovedName() = default;
  RemovedName(RemovedName&&) = default;
  RemovedName& operator=(RemovedName&&) = default;

  // Also on the way out of a failed bind: the socket file is then not there.
  absl::Status Undo() {
    absl::Status st;
    if (dir.valid() && ::unlinkat(dir.get(), leaf.c_str(), 0) != 0 && errno != ENOENT) {
      st = ErrnoStatus("remove the socket file " + leaf + " again");
    }
    dir.Reset();
    for (auto it = made.rbegin(); it != made.rend(); ++it) {
      if (::unlinkat(it->first.get(), it->second.c_str(), AT_REMOVEDIR) != 0 && st.ok()) {
        st = ErrnoStatus("remove the directory " + it->second + " made for a socket's name");
      }
    }
    made.clear();
    return st;
  }
  ~RemovedName() { (void)Undo(); }
};

absl::StatusOr<RemovedName> PrepareRemovedName(const std::string& path, const image::Fd& fd, pid_t pid) {
  std::filesystem::path p(path);
  RemovedName r;
  r.leaf = p.filename().string();
  std::vector<std::string> missing;
  std::filesystem::path existing = p.parent_path();
  struct stat st {};
  while (!existing.empty() && existing != existing.root_path() && ::lstat(existing.c_str(), &st) != 0) {
    missing.push_back(existing.filename().string());
    existing = existing.parent_path();
  }
  struct {
    uint64_t flags, mode, resolve;
  } how{O_PATH | O_DIRECTORY | O_CLOEXEC, 0, 0x04 /* RESOLVE_NO_SYMLINKS */};
  UniqueFd at(static_cast<int>(::syscall(SYS_openat2, AT_FDCWD, existing.c_str(), &how, sizeof how)));
  if (!at.valid()) {
    return ErrnoStatus(absl::StrFormat("open %s (to bind %s for %s again; no symlink may lead there)", existing.string(),
                                       path, Where(fd, pid)));
  }
  for (auto it = missing.rbegin(); it != missing.rend(); ++it) {
    if (::mkdirat(at.get(), it->c_str(), 0700) != 0) {
      return ErrnoStatus(absl::StrFormat("make the directory %s again (to bind %s for %s)", *it, path, Where(fd, pid)));
    }
    UniqueFd next(::openat(at.get(), it->c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    UniqueFd parent = std::move(at);
    r.made.emplace_back(std::move(parent), *it);
    if (!next.valid()) return ErrnoStatus("open the directory " + *it + " just made");
    at = std::move(next);
  }
  r.dir = std::move(at);
  return r;
}

// A socket rebuilt on its own: options, then bind. listen and connect come later.
// `reuse`: a listener whose port live TCP connections of the checkpoint share (tcp.h): it binds
// and listens with SO_REUSEADDR, and its own value is recorded in *reuse to be given back.
absl::StatusOr<UniqueFd> CreateSocket(const image::Fd& fd, pid_t pid, ListenerReuse* reuse) {
  const image::SocketState& s = fd.socket();
  if (s.reset()) return ResetConnection(s.family(), fd, pid);
  UniqueFd sock(::socket(s.family(), s.type() | SOCK_CLOEXEC, s.protocol()));
  if (!sock.valid()) {
    return ErrnoStatus(absl::StrFormat("socket(%d, %d, %d) for %s", s.family(), s.type(), s.protocol(), Where(fd, pid)));
  }
  for (const image::SocketOption& o : s.options()) {
    if (::setsockopt(sock.get(), o.level(), o.name(), o.value().data(), static_cast<socklen_t>(o.value().size())) !=
        0) {
      return ErrnoStatus(absl::StrFormat("setsockopt(level %d, option %d) on %s", o.level(), o.name(), Where(fd, pid)));
    }
  }
  if (reuse != nullptr) {
    socklen_t len = sizeof reuse->reuseaddr;
    int on = 1;
    if (::getsockopt(sock.get(), SOL_SOCKET, SO_REUSEADDR, &reuse->reuseaddr, &len) != 0 ||
        ::setsockopt(sock.get(), SOL_SOCKET, SO_REUSEADDR, &on, sizeof on) != 0) {
      return ErrnoStatus("SO_REUSEADDR (for the restore) on " + Where(fd, pid));
    }
    reuse->where = Where(fd, pid);
  }
  const std::string& b = s.bound();
  const bool file_name = FileName(b);
  // Bound to a name, where the name is (a container's: its file system, InImageMounts).
  auto bind_named = [&]() -> absl::Status {
    std::string path = file_name ? FormatSockaddr(b) : "";
    std::optional<RemovedName> removed;
    if (file_name && s.bound_file_removed()) {
      ASSIGN_OR_RETURN(removed, PrepareRemovedName(path, fd, pid));
    } else if (file_name) {
      RETURN_IF_ERROR(FreeUnixName(path, s.type(), fd, pid));
    }
    auto bind_it = [&] {
      return ::bind(sock.get(), reinterpret_cast<const sockaddr*>(b.data()), static_cast<socklen_t>(b.size()));
    };
    int bound;
    {
      CreateAs owner(s.bound_uid(), s.bound_gid());  // its socket file, on the container's file system
      bound = bind_it();
    }
    if (bound != 0 && errno == EADDRINUSE && s.type() == SOCK_STREAM &&
        (s.family() == AF_INET || s.family() == AF_INET6)) {
      // The program's own closed connections may linger on its port (net/orphans.h).
      absl::StatusOr<int> cleared = net::DestroyOrphansOnPort(b);
      if (cleared.ok() && *cleared > 0) {
        CAIRN_LOG_INFO("event=orphans_cleared address={} sockets={} for=\"{}\"", FormatSockaddr(b), *cleared,
                       Where(fd, pid));
        bound = bind_it();
      } else {
        if (!cleared.ok()) {
          CAIRN_LOG_WARN("event=orphans_not_cleared address={} error=\"{}\"", FormatSockaddr(b),
                         cleared.status().ToString());
        }
        errno = EADDRINUSE;
      }
    }
    if (bound != 0) {
      if (errno == EADDRINUSE) {
        return absl::FailedPreconditionError(absl::StrFormat(
            "bind %s for %s: the address is in use on this machine (by the original process, if it was "
            "checkpointed with --leave-running?); free it, or restore on another machine",
            FormatSockaddr(b), Where(fd, pid)));
      }
      if (errno == EADDRNOTAVAIL) {
        return absl::FailedPreconditionError(absl::StrFormat(
            "bind %s for %s: the address is not on this host; add it here (a cairnd job's --address moves "
            "with it), or restore on the host that has it",
            FormatSockaddr(b), Where(fd, pid)));
      }
      return ErrnoStatus(absl::StrFormat("bind %s for %s", FormatSockaddr(b), Where(fd, pid)));
    }
    if (removed) {
      RETURN_IF_ERROR(removed->Undo());
    } else if (file_name) {
      RETURN_IF_ERROR(GiveSocketFileBack(path, s, fd, pid));
    }
    return absl::OkStatus();
  };
  if (!b.empty()) RETURN_IF_ERROR(file_name ? InImageMounts(bind_named) : bind_named());
  if (::fcntl(sock.get(), F_SETFL, fd.flags()) != 0) return ErrnoStatus("fcntl(F_SETFL) on " + Where(fd, pid));
  return sock;
}

// Both ends of a unix socket pair, parked as masters for the sockets `fd` and its peer.
absl::Status CreatePair(const image::Fd& fd, pid_t pid, Masters* m, std::map<uint64_t, int>* pairs) {
  int sv[2];
  if (::socketpair(AF_UNIX, fd.sock_type() | SOCK_CLOEXEC, 0, sv) != 0) {
    return ErrnoStatus("socketpair for " + Where(fd, pid));
  }
  UniqueFd a(sv[0]), b(sv[1]);
  int an = ::fcntl(a.get(), F_DUPFD_CLOEXEC, kMasterFloor);
  int bn = ::fcntl(b.get(), F_DUPFD_CLOEXEC, kMasterFloor);
  if (an < 0 || bn < 0) return ErrnoStatus("fcntl(F_DUPFD) for a socket pair");
  m->owned.emplace_back(an);
  m->owned.emplace_back(bn);
  (*pairs)[fd.sock_ino()] = an;
  (*pairs)[fd.peer_ino()] = bn;
  return absl::OkStatus();
}

// The masters of the descriptors in flight the image names (Fd.in_flight): `procs` are the
// checkpoint's processes and its holder of descriptions only messages hold (pid 0).
class Rights {
 public:
  Rights(const std::vector<const image::Process*>& procs, const Masters& m) : procs_(procs), m_(m) {}

  absl::StatusOr<std::vector<int>> Of(const image::InFlight& f, const image::Fd& fd, pid_t pid) const {
    std::vector<int> out;
    for (const image::FdRef& ref : f.files()) {
      pid_t at = ref.pid();
      int n = ref.fd();
      for (int hop = 0; hop < 2; ++hop) {  // a dup's origin
        const image::Fd* g = Find(at, n);
        if (g == nullptr || !g->is_dup()) break;
        at = g->dup_of_pid() != 0 ? g->dup_of_pid() : at;
        n = g->dup_of();
      }
      auto it = m_.fds.find({at, n});
      if (it == m_.fds.end()) {
        return absl::DataLossError(absl::StrFormat(
            "%s: a descriptor in flight in its queue names fd %d of pid %d, which was not made (corrupt image)",
            Where(fd, pid), ref.fd(), ref.pid()));
      }
      out.push_back(it->second);
    }
    return out;
  }

 private:
  const image::Fd* Find(pid_t pid, int n) const {
    for (const image::Process* p : procs_) {
      if (p->pid() != pid) continue;
      for (const image::Fd& g : p->fds()) {
        if (g.fd() == n) return &g;
      }
    }
    return nullptr;
  }

  const std::vector<const image::Process*>& procs_;
  const Masters& m_;
};

// One send of `len` bytes of `data` through `sender`, with `rights` (SCM_RIGHTS) if any;
// returns how much was sent.
absl::StatusOr<size_t> SendOnce(int sender, const char* data, size_t len, const std::vector<int>& rights,
                                const std::string& what) {
  iovec iov{const_cast<char*>(data), len};
  msghdr mh{};
  mh.msg_iov = &iov;
  mh.msg_iovlen = 1;
  std::vector<char> control;
  if (!rights.empty()) {
    control.resize(CMSG_SPACE(rights.size() * sizeof(int)));
    mh.msg_control = control.data();
    mh.msg_controllen = control.size();
    cmsghdr* c = CMSG_FIRSTHDR(&mh);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(rights.size() * sizeof(int));
    std::memcpy(CMSG_DATA(c), rights.data(), rights.size() * sizeof(int));
  }
  for (;;) {
    ssize_t n = ::sendmsg(sender, &mh, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n >= 0) return static_cast<size_t>(n);
    if (errno != EINTR) return ErrnoStatus(what);
  }
}

// What waited in `fd`'s queue (`content`), sent again through `sender`: each message of a
// datagram or seqpacket socket (sizes in `fd`) on its own, in order; a stream's bytes. The
// descriptors in flight go with the message or the bytes they came with.
absl::Status SendQueue(int sender, const std::string& content, const image::Fd& fd, pid_t pid, const Rights& rights) {
  std::string what = absl::StrFormat("queue what waited in the socket of %s again", Where(fd, pid));
  if (fd.message_sizes_size() > 0) {
    std::map<uint32_t, const image::InFlight*> with;
    for (const image::InFlight& f : fd.in_flight()) {
      if (f.message() >= static_cast<uint32_t>(fd.message_sizes_size()) || !with.emplace(f.message(), &f).second) {
        return absl::DataLossError(absl::StrFormat(
            "%s: descriptors in flight with message %u of its %d queued messages (corrupt image)", Where(fd, pid),
            f.message(), fd.message_sizes_size()));
      }
    }
    size_t at = 0;
    for (int i = 0; i < fd.message_sizes_size(); ++i) {
      uint32_t len = fd.message_sizes(i);
      if (at + len > content.size()) {
        return absl::DataLossError(absl::StrFormat("%s: its queued messages overrun their content (corrupt image)",
                                                   Where(fd, pid)));
      }
      std::vector<int> sent_with;
      if (auto it = with.find(static_cast<uint32_t>(i)); it != with.end()) {
        ASSIGN_OR_RETURN(sent_with, rights.Of(*it->second, fd, pid));
      }
      ASSIGN_OR_RETURN(size_t n, SendOnce(sender, content.data() + at, len, sent_with,
                                          absl::StrFormat("%s (a %u-byte message)", what, len)));
      if (n != len) return absl::InternalError(absl::StrFormat("%s: sent %d of a %u-byte message", what, n, len));
      at += len;
    }
    return absl::OkStatus();
  }
  // A stream: the bytes up to each group of descriptors, then the bytes sent with it.
  size_t at = 0;
  auto plain = [&](size_t to) -> absl::Status {
    while (at < to) {
      ASSIGN_OR_RETURN(size_t n, SendOnce(sender, content.data() + at, to - at, {}, what));
      at += n;
    }
    return absl::OkStatus();
  };
  for (const image::InFlight& f : fd.in_flight()) {
    if (f.offset() < at || f.length() == 0 || f.offset() + f.length() > content.size()) {
      return absl::DataLossError(absl::StrFormat(
          "%s: descriptors in flight at bytes %d-%d of its %d queued bytes (corrupt image)", Where(fd, pid), f.offset(),
          f.offset() + f.length(), content.size()));
    }
    RETURN_IF_ERROR(plain(f.offset()));
    ASSIGN_OR_RETURN(std::vector<int> sent_with, rights.Of(f, fd, pid));
    ASSIGN_OR_RETURN(size_t n, SendOnce(sender, content.data() + at, f.length(), sent_with, what));
    if (n == 0) return absl::InternalError(what + ": the descriptors in flight were not taken");
    at += n;
  }
  return plain(content.size());
}

// The messages other, unnamed sockets had sent socket `fd` (bound; messages_from_unnamed), sent
// again in order from an unbound socket of ours to its name: the receiver finds each as it was,
// from no name.
absl::Status SendFromUnnamed(const image::ImageReader& img, const image::Fd& fd, pid_t pid, const Rights& rights) {
  UniqueFd sender(::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!sender.valid()) return ErrnoStatus("socket(AF_UNIX, SOCK_DGRAM) to send the messages of " + Where(fd, pid));
  const std::string& to = fd.socket().bound();
  if (ConnectTo(sender.get(), to) != 0) {
    return ErrnoStatus(absl::StrFormat("connect to %s to send the messages of %s", FormatSockaddr(to), Where(fd, pid)));
  }
  ASSIGN_OR_RETURN(std::string content, img.FileContent(fd));
  // Every message stays charged to the sender's buffer until it is read: room for all of them
  // (they came from several senders, each with a buffer of its own).
  int room = static_cast<int>(std::min<size_t>(content.size() * 2 + fd.message_sizes_size() * 2048 + 65536, 1 << 30));
  (void)::setsockopt(sender.get(), SOL_SOCKET, SO_SNDBUFFORCE, &room, sizeof room);
  return SendQueue(sender.get(), content, fd, pid, rights);
}

// A stream or seqpacket end whose peer had been closed: one end of a new pair (`mine`), whose
// other end (`other`) is given the bytes (or messages) that waited in it (FillOrphan) and is
// then closed; the kernel then shuts the survivor down both ways, as it was.
struct Orphan {
  const image::Fd* fd;
  pid_t pid;
  UniqueFd other;
};

absl::StatusOr<UniqueFd> CreateOrphan(const image::Fd& fd, pid_t pid, std::vector<Orphan>* orphans) {
  int sv[2];
  if (::socketpair(AF_UNIX, fd.sock_type() | SOCK_CLOEXEC, 0, sv) != 0) {
    return ErrnoStatus("socketpair for " + Where(fd, pid));
  }
  UniqueFd mine(sv[0]);
  orphans->push_back({&fd, pid, UniqueFd(sv[1])});
  if (::fcntl(mine.get(), F_SETFL, fd.flags()) != 0) return ErrnoStatus("fcntl(F_SETFL) on " + Where(fd, pid));
  return mine;
}

absl::Status FillOrphan(const image::ImageReader& img, Orphan& o, const Rights& rights) {
  if (o.fd->content_size() > 0 || o.fd->message_sizes_size() > 0) {
    ASSIGN_OR_RETURN(std::string content, img.FileContent(*o.fd));
    RETURN_IF_ERROR(SendQueue(o.other.get(), content, *o.fd, o.pid, rights));
  }
  o.other.Reset();
  return absl::OkStatus();
}

// SO_ATTACH_FILTER with the saved classic BPF program, then SO_LOCK_FILTER if it was locked.
absl::Status AttachFilter(int sock, const image::Fd& fd, pid_t pid) {
  const std::string& raw = fd.socket_filter();
  if (raw.size() % sizeof(sock_filter) != 0 || raw.size() / sizeof(sock_filter) > BPF_MAXINSNS) {
    return absl::DataLossError(absl::StrFormat("%s: its socket filter is %d bytes, not a program (corrupt image)",
                                               Where(fd, pid), raw.size()));
  }
  std::vector<sock_filter> program(raw.size() / sizeof(sock_filter));
  std::memcpy(program.data(), raw.data(), raw.size());
  sock_fprog prog{static_cast<unsigned short>(program.size()), program.data()};
  if (::setsockopt(sock, SOL_SOCKET, SO_ATTACH_FILTER, &prog, sizeof prog) != 0) {
    return ErrnoStatus(absl::StrFormat("setsockopt(SO_ATTACH_FILTER, %d instructions) on %s", program.size(),
                                       Where(fd, pid)));
  }
  int one = 1;
  if (fd.filter_locked() && ::setsockopt(sock, SOL_SOCKET, SO_LOCK_FILTER, &one, sizeof one) != 0) {
    return ErrnoStatus("setsockopt(SO_LOCK_FILTER) on " + Where(fd, pid));
  }
  return absl::OkStatus();
}

absl::Status RefillQueues(const image::ImageReader& img, const std::vector<std::pair<const image::Fd*, pid_t>>& queues,
                          const std::map<uint64_t, int>& pairs, const Rights& rights);

// Connections the listeners had not accepted yet: each listener listens (here, before its
// process does it again with the same backlog) and its clients connect again, in the order
// its queue had them. Their shutdowns follow with every unix socket's.
absl::Status ConnectPending(const std::vector<const image::Process*>& procs,
                            std::vector<std::pair<const image::Fd*, pid_t>> pending, const Masters& m) {
  std::sort(pending.begin(), pending.end(), [](const auto& a, const auto& b) {
    return std::make_pair(a.first->pending_on(), a.first->pending_position()) <
           std::make_pair(b.first->pending_on(), b.first->pending_position());
  });
  uint64_t listening = 0;
  for (const auto& [fd, pid] : pending) {
    if (fd->pending_on() != listening) {
      const image::Fd* listener = nullptr;
      pid_t holder = 0;
      for (const image::Process* p : procs) {
        for (const image::Fd& g : p->fds()) {
          if (IsSocket(g) && g.sock_ino() == fd->pending_on() && g.has_socket() && g.socket().listening()) {
            listener = &g;
            holder = p->pid();
          }
        }
      }
      if (listener == nullptr) {
        return absl::DataLossError(absl::StrFormat(
            "%s: the listening socket its connection waits on is not in the checkpoint (corrupt image)", Where(*fd, pid)));
      }
      if (::listen(m.fds.at({holder, listener->fd()}), listener->socket().backlog()) != 0) {
        return ErrnoStatus(absl::StrFormat("listen(backlog %d) on %s, for the connections it had not accepted",
                                           listener->socket().backlog(), Where(*listener, holder)));
      }
      listening = fd->pending_on();
    }
    const std::string& peer = fd->socket().peer();
    // Without blocking: a listener whose backlog this machine caps lower (net.core.somaxconn)
    // refuses the connections past it, which would otherwise wait forever.
    int client = m.fds.at({pid, fd->fd()});
    if (::fcntl(client, F_SETFL, fd->flags() | O_NONBLOCK) != 0) return ErrnoStatus("fcntl(F_SETFL) on " + Where(*fd, pid));
    if (ConnectTo(client, peer) != 0) {
      if (errno == EAGAIN) {
        return absl::FailedPreconditionError(absl::StrFormat(
            "connect %s to %s again (a connection not accepted yet, number %u in its queue): the listener's queue is "
            "full here; raise net.core.somaxconn to at least %u",
            Where(*fd, pid), FormatSockaddr(peer), fd->pending_position(), fd->pending_position()));
      }
      return ErrnoStatus(absl::StrFormat("connect %s to %s again (a connection not accepted yet, number %u in its "
                                         "queue)",
                                         Where(*fd, pid), FormatSockaddr(peer), fd->pending_position()));
    }
    if (::fcntl(client, F_SETFL, fd->flags()) != 0) return ErrnoStatus("fcntl(F_SETFL) on " + Where(*fd, pid));
  }
  return absl::OkStatus();
}

}  // namespace

bool IsSocket(const image::Fd& fd) {
  return !fd.is_dup() && (fd.kind() == image::Fd::UNIX_SOCKET || fd.kind() == image::Fd::INET_SOCKET);
}

absl::Status OpenSocketMasters(const image::ImageReader& img, const std::vector<const image::Process*>& procs,
                               Masters* m) {
  std::map<uint64_t, int> pairs;  // socket inode -> master of the recreated pair end
  std::vector<std::pair<const image::Fd*, pid_t>> queues, connects, pending;
  std::vector<Orphan> orphans;
  Rights rights(procs, *m);
  bool live_tcp = false;  // listeners then bind and listen beside live connections (tcp.h)
  for (const image::Process* p : procs) {
    for (const image::Fd& fd : p->fds()) live_tcp = live_tcp || (fd.has_socket() && fd.socket().has_tcp());
  }
  for (const image::Process* p : procs) {
    for (const image::Fd& fd : p->fds()) {
      if (!IsSocket(fd)) continue;
      if (fd.has_socket() && fd.socket().has_tcp()) {
        RepairedConnection conn;
        ASSIGN_OR_RETURN(UniqueFd sock, RebuildConnection(img, fd, p->pid(), &conn));
        RETURN_IF_ERROR(Park(std::move(sock), fd, p->pid(), m));
        conn.sock = UniqueFd(::fcntl(m->fds.at({p->pid(), fd.fd()}), F_DUPFD_CLOEXEC, m->base));
        if (!conn.sock.valid()) return ErrnoStatus("fcntl(F_DUPFD) for " + conn.where);
        m->tcp.push_back(std::move(conn));
        continue;
      }
      if (fd.has_socket()) {
        bool listener = live_tcp && fd.kind() == image::Fd::INET_SOCKET && fd.socket().listening();
        ListenerReuse reuse;
        ASSIGN_OR_RETURN(UniqueFd sock, CreateSocket(fd, p->pid(), listener ? &reuse : nullptr));
        if (listener) {
          reuse.sock = UniqueFd(::fcntl(sock.get(), F_DUPFD_CLOEXEC, m->base));
          if (!reuse.sock.valid()) return ErrnoStatus("fcntl(F_DUPFD) for " + reuse.where);
          m->listeners.push_back(std::move(reuse));
        }
        RETURN_IF_ERROR(Park(std::move(sock), fd, p->pid(), m));
        if (fd.pending_position() != 0) {
          pending.emplace_back(&fd, p->pid());
        } else if (!fd.socket().peer().empty() && !fd.socket().reset()) {
          connects.emplace_back(&fd, p->pid());
        }
        continue;
      }
      if (fd.orphaned()) {
        ASSIGN_OR_RETURN(UniqueFd sock, CreateOrphan(fd, p->pid(), &orphans));
        RETURN_IF_ERROR(Park(std::move(sock), fd, p->pid(), m));
        continue;
      }
      if (!pairs.count(fd.sock_ino())) RETURN_IF_ERROR(CreatePair(fd, p->pid(), m, &pairs));
      int master = pairs.at(fd.sock_ino());
      if (::fcntl(master, F_SETFL, fd.flags()) != 0) return ErrnoStatus("fcntl(F_SETFL) on " + Where(fd, p->pid()));
      m->fds[{p->pid(), fd.fd()}] = master;
      if (fd.content_size() > 0 || fd.message_sizes_size() > 0) queues.emplace_back(&fd, p->pid());
    }
  }
  // A socket that other, unnamed sockets had sent messages gets them back from an unnamed one,
  // before it connects anywhere or is shut down (either would refuse them).
  for (const image::Process* p : procs) {
    for (const image::Fd& fd : p->fds()) {
      if (IsSocket(fd) && fd.messages_from_unnamed() && (fd.content_size() > 0 || fd.message_sizes_size() > 0)) {
        RETURN_IF_ERROR(SendFromUnnamed(img, fd, p->pid(), rights));
      }
    }
  }
  // Datagram sockets connect to their peers once every name is bound.
  for (const auto& [fd, pid] : connects) {
    const std::string& peer = fd->socket().peer();
    int master = m->fds.at({pid, fd->fd()});
    if (ConnectTo(master, peer) != 0) {
      return ErrnoStatus(absl::StrFormat("connect %s to %s", Where(*fd, pid), FormatSockaddr(peer)));
    }
    uint32_t shut = fd->socket().shutdown();
    if (shut != 0 && ::shutdown(master, shut == 3 ? SHUT_RDWR : shut == 1 ? SHUT_RD : SHUT_WR) != 0) {
      return ErrnoStatus(absl::StrFormat("shutdown(%u) %s as it was", shut, Where(*fd, pid)));
    }
  }
  RETURN_IF_ERROR(ConnectPending(procs, pending, *m));
  // A listening socket only a message in flight holds (the holder, pid 0, is no process that
  // could listen again): the restorer listens, so that its receiver can accept on it.
  for (const image::Process* p : procs) {
    if (p->pid() != 0) continue;
    for (const image::Fd& fd : p->fds()) {
      if (!IsSocket(fd) || !fd.has_socket() || !fd.socket().listening()) continue;
      if (::listen(m->fds.at({0, fd.fd()}), fd.socket().backlog()) != 0) {
        return ErrnoStatus(absl::StrFormat("listen(backlog %d) on a listening socket in flight",
                                           fd.socket().backlog()));
      }
    }
  }
  // A datagram socket connected to itself gets back, from itself, the messages it had sent
  // itself and not read.
  for (const auto& [fd, pid] : connects) {
    if ((fd->content_size() == 0 && fd->message_sizes_size() == 0) || fd->messages_from_unnamed()) continue;
    ASSIGN_OR_RETURN(std::string content, img.FileContent(*fd));
    RETURN_IF_ERROR(SendQueue(m->fds.at({pid, fd->fd()}), content, *fd, pid, rights));
  }
  RETURN_IF_ERROR(RefillQueues(img, queues, pairs, rights));
  for (Orphan& o : orphans) RETURN_IF_ERROR(FillOrphan(img, o, rights));
  // shutdown(2) once the queues are full again (a socket shut down for sending, or whose
  // peer is, takes nothing more). Either end's call marks both; each end's bits are
  // given back as they were, which gives its peer the same bits again.
  for (const image::Process* p : procs) {
    for (const image::Fd& fd : p->fds()) {
      if (!IsSocket(fd) || fd.kind() != image::Fd::UNIX_SOCKET || fd.shutdown() == 0 || fd.orphaned()) continue;
      int how = fd.shutdown() == 3 ? SHUT_RDWR : fd.shutdown() == 1 ? SHUT_RD : SHUT_WR;
      if (::shutdown(m->fds.at({p->pid(), fd.fd()}), how) != 0) {
        return ErrnoStatus(absl::StrFormat("shutdown(%d) %s as it was", how, Where(fd, p->pid())));
      }
    }
  }
  // Filters last: the messages queued again had passed them once already.
  for (const image::Process* p : procs) {
    for (const image::Fd& fd : p->fds()) {
      if (IsSocket(fd) && !fd.socket_filter().empty()) {
        RETURN_IF_ERROR(AttachFilter(m->fds.at({p->pid(), fd.fd()}), fd, p->pid()));
      }
    }
  }
  return absl::OkStatus();
}

namespace {

absl::Status RefillQueues(const image::ImageReader& img, const std::vector<std::pair<const image::Fd*, pid_t>>& queues,
                          const std::map<uint64_t, int>& pairs, const Rights& rights) {
  for (const auto& [fd, pid] : queues) {
    auto peer = pairs.find(fd->peer_ino());
    if (peer == pairs.end()) {
      return absl::DataLossError(absl::StrFormat("%s: its socket's peer is not in the checkpoint (corrupt image)",
                                                 Where(*fd, pid)));
    }
    ASSIGN_OR_RETURN(std::string content, img.FileContent(*fd));
    RETURN_IF_ERROR(SendQueue(peer->second, content, *fd, pid, rights));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ListenSockets(inject::Injector& inj, const image::Process& proc) {
  for (const image::Fd& fd : proc.fds()) {
    if (!IsSocket(fd) || !fd.has_socket() || !fd.socket().listening()) continue;
    RETURN_IF_ERROR(inj.Call(absl::StrFormat("listen(fd %d, backlog %d) on %s", fd.fd(), fd.socket().backlog(),
                                             fd.socket().bound().empty() ? "an unbound socket"
                                                                         : FormatSockaddr(fd.socket().bound())),
                             SYS_listen, static_cast<uint64_t>(fd.fd()), static_cast<uint64_t>(fd.socket().backlog()))
                        .status());
  }
  return absl::OkStatus();
}

}  // namespace cairn::restore
