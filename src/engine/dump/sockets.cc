#include "engine/dump/sockets.h"

#include <fcntl.h>
#include <linux/filter.h>
#include <linux/sockios.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <netinet/udp.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstddef>
#include <cstring>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "common/log.h"
#include "common/sockaddr.h"
#include "common/status.h"
#include "common/stop_points.h"
#include "common/unique_fd.h"
#include "engine/dump/guardian.h"
#include "engine/dump/tcp.h"
#include "engine/image/socket_options.h"
#include "engine/net/netlock.h"
#include "engine/proc/pidfd.h"

namespace cairn::dump {
namespace {

constexpr int kTcpEstablished = 1;  // TCP_ESTABLISHED, as sock_diag reports unix socket states
constexpr int kTcpListen = 10;      // TCP_LISTEN

absl::Status Refuse(pid_t pid, const proc::FdInfo& info, absl::string_view what, absl::string_view advice) {
  return absl::UnimplementedError(
      absl::StrFormat("pid %d fd %d is %s (%s); %s", pid, info.fd, what, info.target, advice));
}

constexpr absl::string_view kUnixAdvice =
    "checkpoints support unix sockets connected in pairs inside the checkpoint, bound or listening sockets, "
    "and datagram sockets connected to a named socket of the checkpoint — close it before checkpointing";

std::string UnixSockaddr(absl::string_view name) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::string out(reinterpret_cast<const char*>(&a), offsetof(sockaddr_un, sun_path));
  out.append(name.data(), name.size());
  return out;
}

// Whether an inet address names a port (bound) rather than the unbound any-address.
bool BoundInet(const std::string& a) {
  if (a.size() >= sizeof(sockaddr_in6) && reinterpret_cast<const sockaddr*>(a.data())->sa_family == AF_INET6) {
    sockaddr_in6 s;
    std::memcpy(&s, a.data(), sizeof s);
    return s.sin6_port != 0;
  }
  if (a.size() >= sizeof(sockaddr_in)) {
    sockaddr_in s;
    std::memcpy(&s, a.data(), sizeof s);
    return s.sin_port != 0;
  }
  return false;
}

const char* FamilyName(int family) {
  switch (family) {
    case AF_NETLINK: return "a netlink socket";
    case AF_PACKET: return "a packet socket";
    case AF_VSOCK: return "a vsock socket";
    case AF_BLUETOOTH: return "a bluetooth socket";
    case AF_ALG: return "a crypto (AF_ALG) socket";
    default: return "a network socket of a family checkpoints do not support";
  }
}

absl::Status CaptureOptions(int theirs, int family, int type, int protocol, image::SocketState* s) {
  const auto& fresh = image::FreshSocketOptions(family, type, protocol);
  auto record = [&](int level, int name, const char* text) -> absl::Status {
    char a[64] = {};
    socklen_t alen = sizeof a;
    if (::getsockopt(theirs, level, name, a, &alen) != 0) {
      if (errno == ENOPROTOOPT || errno == EOPNOTSUPP) return absl::OkStatus();
      return ErrnoStatus(absl::StrCat("getsockopt ", text));
    }
    std::string value(a, alen);
    if (auto it = fresh.find({level, name}); it != fresh.end() && it->second == value) return absl::OkStatus();
    image::SocketOption* o = s->add_options();
    o->set_level(level);
    o->set_name(name);
    o->set_value(std::move(value));
    return absl::OkStatus();
  };
  absl::Status status;
  image::ForEachSocketOption(family, type, protocol, [&](const image::SocketOptionSpec& o) {
    if (status.ok()) status = record(o.level, o.name, o.text);
  });
  RETURN_IF_ERROR(status);
  return absl::OkStatus();
}

constexpr int kScmPidfd = 0x04;  // SCM_PIDFD (Linux 6.5), newer than Debian's headers

// The descriptors a peek received with SCM_RIGHTS (`mh`'s control messages), now the caller's.
std::vector<UniqueFd> ReceivedRights(msghdr& mh) {
  std::vector<UniqueFd> out;
  for (cmsghdr* c = CMSG_FIRSTHDR(&mh); c != nullptr; c = CMSG_NXTHDR(&mh, c)) {
    // SCM_PIDFD (a receiver with SO_PASSPIDFD): a pidfd of the sender, installed by the peek.
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == kScmPidfd) {
      int pidfd;
      std::memcpy(&pidfd, CMSG_DATA(c), sizeof pidfd);
      ::close(pidfd);
      continue;
    }
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int received;
      std::memcpy(&received, CMSG_DATA(c) + i * sizeof(int), sizeof received);
      out.emplace_back(received);
    }
  }
  return out;
}

// What waits to be read on a unix socket, copied without taking it off the queue: with a
// peek offset set (SO_PEEK_OFF), each MSG_PEEK returns what follows the last one — the next
// message of a datagram or seqpacket socket (`messages`: their sizes go to `fd`), the next
// bytes of a stream. The socket's own peek offset is put back after. A stream's copy must hold
// `expected` bytes (0: not checked, for a process still running).
// `unnamed_senders`: each message must come from a socket with no name (refused otherwise: a
// restore could not send it again from that name, which its sender still holds).
//
// Descriptors in flight (SCM_RIGHTS) come with the peek as copies of ours: each is recorded in
// `fd` (in_flight) as the descriptor `in_flight` resolves it to. `may_add`: it may find
// descriptions not seen before (the first look at the queues, or a check while the processes
// run); otherwise one is an error — the queue changed since that first look.
absl::StatusOr<std::string> PeekQueue(pid_t pid, const proc::FdInfo& info, bool messages, uint32_t expected,
                                      image::Fd* fd, InFlightFiles* in_flight, bool may_add, GuardJournal* journal,
                                      bool read_shut = false, bool unnamed_senders = false) {
  ASSIGN_OR_RETURN(UniqueFd copy, proc::CopyFd(pid, info.fd));
  auto where = [&] { return absl::StrFormat("the queue of pid %d fd %d", pid, info.fd); };
  int saved_off = -1;
  socklen_t len = sizeof saved_off;
  if (::getsockopt(copy.get(), SOL_SOCKET, SO_PEEK_OFF, &saved_off, &len) != 0) {
    return ErrnoStatus("getsockopt(SO_PEEK_OFF) on " + where());
  }
  // Journaled first: a dumper that dies from here on leaves the guardian to give it back (a
  // socket in flight, the dumper's copy only, cannot be reached and is not journaled).
  int slot = -1;
  if (journal != nullptr && pid != ::getpid()) {
    struct stat st {};
    if (::fstat(copy.get(), &st) != 0) return ErrnoStatus("fstat " + where());
    ASSIGN_OR_RETURN(slot, journal->PeekOffsetChanging(pid, info.fd, st.st_ino, saved_off));
  }
  int zero = 0;
  if (::setsockopt(copy.get(), SOL_SOCKET, SO_PEEK_OFF, &zero, sizeof zero) != 0) {
    return ErrnoStatus("setsockopt(SO_PEEK_OFF) on " + where());
  }
  FaultPoint("socket_queue");
  std::string out;
  std::vector<char> buf(1 << 20);
  // Room for the most descriptors one message carries (SCM_MAX_FD), and for the sender's
  // credentials and pidfd a receiver may ask for.
  alignas(cmsghdr) char control[CMSG_SPACE(253 * sizeof(int)) + CMSG_SPACE(sizeof(ucred)) + CMSG_SPACE(sizeof(int))];
  absl::Status st;
  for (;;) {
    iovec iov{buf.data(), buf.size()};
    msghdr mh{};
    sockaddr_un from{};
    mh.msg_name = &from;
    mh.msg_namelen = sizeof from;
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    mh.msg_control = control;
    mh.msg_controllen = sizeof control;
    ssize_t n = ::recvmsg(copy.get(), &mh, MSG_PEEK | MSG_DONTWAIT | MSG_CMSG_CLOEXEC | (messages ? MSG_TRUNC : 0));
    if (n < 0) {
      if (errno != EAGAIN && errno != EWOULDBLOCK) st = ErrnoStatus("peek " + where());
      break;
    }
    std::vector<UniqueFd> rights = ReceivedRights(mh);
    if ((mh.msg_flags & MSG_CTRUNC) != 0) {
      st = Refuse(pid, info,
                  "a unix socket with descriptors in flight that a peek could not take (more than one message "
                  "carries, or more than the checkpointer may open: raise its RLIMIT_NOFILE)",
                  "let the process receive them before checkpointing");
      break;
    }
    if (unnamed_senders && mh.msg_namelen > sizeof(sa_family_t)) {
      st = Refuse(pid, info,
                  absl::StrFormat("a datagram unix socket with a message waiting from the bound socket %s",
                                  FormatSockaddr(std::string(reinterpret_cast<const char*>(&from), mh.msg_namelen))),
                  "read it before checkpointing (messages from unnamed senders are saved)");
      break;
    }
    // A stream's end of data; and a seqpacket socket shut down for reading reads 0 at its
    // end too (a zero-length message there cannot be told from it, and is not kept).
    if (n == 0 && rights.empty() && (!messages || read_shut)) break;
    if (static_cast<size_t>(n) > buf.size() || (!messages && !rights.empty() && static_cast<size_t>(n) == buf.size())) {
      st = absl::UnimplementedError(absl::StrFormat(
          "%s holds %s of %d bytes or more, more than 1 MiB", where(),
          messages ? "a message" : "bytes sent with descriptors (and the bytes before them)", n));
      break;
    }
    if (!rights.empty()) {
      image::InFlight* f = fd->add_in_flight();
      if (messages) {
        f->set_message(static_cast<uint32_t>(fd->message_sizes_size()));
      } else {
        // A stream's peek stops after the bytes descriptors came with, but where those bytes
        // start cannot be seen: a peek also brings the descriptors of the next bytes that have
        // some when it ends before them (it walks on with nothing left to copy). They are
        // recorded with every byte since the previous descriptors — exactly the bytes they came
        // with when nothing was written without descriptors in between.
        f->set_offset(out.size());
        f->set_length(static_cast<uint64_t>(n));
      }
      for (const UniqueFd& r : rights) {
        bool added = false;
        auto ref = in_flight->Resolve(r.get(), &added, pid, info.fd);
        if (!ref.ok()) {
          st = ref.status();
          break;
        }
        if (added && !may_add) {
          st = absl::InternalError(absl::StrFormat(
              "%s: a descriptor in flight appeared while the checkpoint was written; try again", where()));
          break;
        }
        *f->add_files() = *ref;
      }
      if (!st.ok()) break;
    }
    out.append(buf.data(), static_cast<size_t>(n));
    if (messages) fd->add_message_sizes(static_cast<uint32_t>(n));
  }
  if (::setsockopt(copy.get(), SOL_SOCKET, SO_PEEK_OFF, &saved_off, sizeof saved_off) != 0) {
    if (st.ok()) st = ErrnoStatus("put back SO_PEEK_OFF on " + where());
  } else if (slot >= 0) {
    journal->PeekOffsetBack(slot);
  }
  RETURN_IF_ERROR(st);
  if (!messages && expected != 0 && out.size() != expected) {
    return absl::InternalError(absl::StrFormat("%s: copied %d of the %d bytes waiting; try again", where(),
                                               out.size(), expected));
  }
  return out;
}

// Which directions of the connected UDP socket `c` (a copy of the process's) are shut
// down: 1 receiving, 2 sending. Nothing reports the sending side, so it is probed with a
// send whose data the kernel cannot read: a socket shut down for sending refuses it
// (EPIPE) before it looks at the data; any other socket takes a buffer, fails to copy the
// byte into it (EFAULT) and sends nothing. A corked socket is refused: a failed send would
// drop the datagram it is assembling.
absl::StatusOr<uint32_t> UdpShutdown(int c) {
  uint32_t shut = 0;
  pollfd p{c, POLLRDHUP, 0};
  if (::poll(&p, 1, 0) == 1 && (p.revents & POLLRDHUP) != 0) shut |= 1;
  if (p.revents & POLLERR) {
    // A send would first hand over (and clear) the error waiting for the program, such as
    // the ECONNREFUSED of an ICMP port unreachable: not probed, the sending side is taken
    // as open.
    CAIRN_LOG_WARN("event=udp_shutdown_not_probed reason=\"an error is waiting on the socket\"");
    return shut;
  }
  ASSIGN_OR_RETURN(int corked, SocketIntOption(c, IPPROTO_UDP, UDP_CORK, "UDP_CORK"));
  if (corked != 0) {
    return absl::UnimplementedError("a UDP socket corked (UDP_CORK) with a datagram being assembled cannot be "
                                    "checkpointed; uncork it first");
  }
  // A datagram being assembled (MSG_MORE) holds send buffer: a failed send would drop it.
  int outq = 0;
  if (::ioctl(c, SIOCOUTQ, &outq) != 0 || outq != 0) {
    CAIRN_LOG_WARN("event=udp_shutdown_not_probed reason=\"a datagram is being sent or assembled\"");
    return shut;
  }
  // A page of ours that cannot be read (a kernel address would fail before the check).
  static void* const unreadable = ::mmap(nullptr, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (unreadable == MAP_FAILED) return ErrnoStatus("mmap a PROT_NONE page (to probe a UDP socket's shutdown)");
  if (::send(c, unreadable, 1, MSG_DONTWAIT | MSG_NOSIGNAL) >= 0) {
    return absl::InternalError("a probe of a UDP socket's shutdown state sent a datagram");
  }
  if (errno == EPIPE) shut |= 2;
  return shut;
}

// What waits to be read on unix socket `us` (PeekQueue), saved as `fd`'s content when
// `writer` is set; without it (the check before anything is frozen) only peeked.
// Returns whether anything waits. A datagram socket's `rqueue` is the size of its first message
// only (0 for an empty one, with others behind it): its queue is always peeked.
absl::StatusOr<bool> SaveQueue(pid_t pid, const proc::FdInfo& info, const proc::UnixSocket& us,
                               image::ImageWriter* writer, image::Fd* fd, InFlightFiles* in_flight,
                               GuardJournal* journal, bool unnamed_senders = false) {
  if (us.rqueue == 0 && us.type != SOCK_DGRAM) return false;
  bool messages = us.type != SOCK_STREAM;
  uint32_t expected = writer != nullptr && !messages ? us.rqueue : 0;
  ASSIGN_OR_RETURN(std::string data, PeekQueue(pid, info, messages, expected, fd, in_flight, writer == nullptr,
                                               journal, (us.shutdown & 1) != 0, unnamed_senders));
  bool waiting = !data.empty() || fd->message_sizes_size() > 0;
  if (writer == nullptr) {  // (the descriptors in flight stay: they are checked, CheckInFlight)
    fd->clear_message_sizes();
    return waiting;
  }
  if (!waiting) return false;
  ASSIGN_OR_RETURN(auto blob, writer->AppendBytes(data));
  fd->set_content_offset(blob.offset);
  fd->set_content_size(blob.size);
  fd->set_content_xxh3(blob.xxh3);
  return true;
}

}  // namespace

absl::StatusOr<TreeSockets> TreeSockets::Load(std::set<uint64_t> inodes, const FdOptions& opts, pid_t netns_of) {
  TreeSockets t;
  t.opts_ = opts;
  if (!inodes.empty()) {
    ASSIGN_OR_RETURN(t.unix_, proc::ReadUnixSockets(netns_of));
  }
  t.inodes_ = std::move(inodes);
  for (const auto& [ino, us] : t.unix_) {
    for (size_t i = 0; i < us.pending.size(); ++i) {
      if (us.pending[i] != 0) t.pending_[us.pending[i]] = {ino, static_cast<uint32_t>(i + 1)};
    }
  }
  return t;
}

absl::Status TreeSockets::FindInFlight(std::vector<SocketFd> todo, InFlightFiles* in_flight) {
  in_flight_ = in_flight;
  std::set<uint64_t> looked;
  while (!todo.empty()) {
    SocketFd q = todo.back();
    todo.pop_back();
    auto it = unix_.find(q.ino);
    if (it == unix_.end() || !looked.insert(q.ino).second) continue;
    const proc::UnixSocket& us = it->second;
    if (us.state == kTcpListen || (us.type == SOCK_STREAM && us.rqueue == 0)) continue;
    proc::FdInfo info;
    info.fd = q.fd;
    info.target = absl::StrCat("socket:[", q.ino, "]");
    image::Fd scratch;
    ASSIGN_OR_RETURN(std::string ignored, PeekQueue(q.pid, info, us.type != SOCK_STREAM, 0, &scratch, in_flight, true,
                                                    opts_.journal, (us.shutdown & 1) != 0));
    for (const image::InFlight& f : scratch.in_flight()) {
      for (const image::FdRef& ref : f.files()) {
        if (ref.pid() != kInFlightHolder) continue;
        struct stat held {};
        if (::fstat(ref.fd(), &held) == 0 && S_ISSOCK(held.st_mode) && unix_.count(held.st_ino) &&
            inodes_.insert(held.st_ino).second) {
          todo.push_back({::getpid(), ref.fd(), static_cast<uint64_t>(held.st_ino)});
        }
      }
    }
  }
  return absl::OkStatus();
}

std::string TreeSockets::UnreachableName(pid_t pid, const proc::UnixSocket& us) const {
  if (us.name.empty()) return "it has no name";
  if (us.name[0] == '\0') return "";  // abstract
  if (us.name[0] != '/') return absl::StrFormat("its name '%s' is relative to another process's directory", us.name);
  struct stat st {};
  std::string seen = absl::StrCat("/proc/", pid, "/root", us.name);
  if (::lstat(seen.c_str(), &st) != 0 || !S_ISSOCK(st.st_mode) || st.st_ino != us.vfs_ino) {
    return absl::StrFormat("its socket file %s was removed or replaced", us.name);
  }
  return "";
}

absl::Status TreeSockets::CapturePendingClient(pid_t pid, const proc::FdInfo& info, const proc::UnixSocket& us,
                                               const proc::UnixSocket& listener, uint32_t position,
                                               image::Fd* fd) const {
  std::string name = FormatSockaddr(UnixSockaddr(listener.name));
  if (!inodes_.count(listener.ino)) {
    return Refuse(pid, info,
                  absl::StrFormat("a unix socket whose connection to %s was not accepted yet by a listening socket "
                                  "outside the checkpoint",
                                  name),
                  "let the server accept it, or checkpoint the server with it");
  }
  if (us.wqueue != 0) {
    return Refuse(pid, info,
                  absl::StrFormat("a unix socket whose connection to %s was not accepted yet and which has already "
                                  "sent data on it (nothing can read it before the server accepts)",
                                  name),
                  "let the server accept it before checkpointing");
  }
  if (std::string why = UnreachableName(pid, listener); !why.empty()) {
    return Refuse(pid, info,
                  absl::StrFormat("a unix socket whose connection to %s was not accepted yet, and the listening "
                                  "socket could not be reached again (%s)",
                                  name, why),
                  "let the server accept it before checkpointing");
  }
  image::SocketState* s = fd->mutable_socket();
  s->set_family(AF_UNIX);
  s->set_type(us.type);
  s->set_peer(UnixSockaddr(listener.name));
  fd->set_pending_on(listener.ino);
  fd->set_pending_position(position);
  return absl::OkStatus();
}

absl::StatusOr<UniqueFd> TreeSockets::CopyOf(pid_t pid, const proc::FdInfo& info) const {
  if (opts_.tcp != nullptr && (info.flags & O_PATH) == 0) {  // (an O_PATH open is not the socket's description)
    if (std::optional<uint64_t> ino = proc::SocketInode(info.target)) {
      if (UniqueFd taken = opts_.tcp->TakeCopy(*ino); taken.valid()) return taken;
    }
  }
  return proc::CopyFd(pid, info.fd);
}

absl::Status TreeSockets::Capture(pid_t pid, const proc::FdInfo& info, UniqueFd copy, image::ImageWriter* writer,
                                  image::Fd* fd) const {
  std::optional<uint64_t> ino = proc::SocketInode(info.target);
  if (!ino) {
    return absl::DataLossError(absl::StrFormat("pid %d fd %d: malformed socket link '%s'", pid, info.fd, info.target));
  }
  fd->set_sock_ino(*ino);
  RETURN_IF_ERROR(CaptureFilter(pid, info, copy.get(), fd));
  auto it = unix_.find(*ino);
  if (it != unix_.end()) return CaptureUnix(pid, info, it->second, writer, fd);
  return CaptureInet(pid, info, std::move(copy), writer, fd);
}

absl::Status TreeSockets::CaptureFilter(pid_t pid, const proc::FdInfo& info, int copy, image::Fd* fd) const {
  // SO_GET_FILTER with no room answers the program's length in instructions (0: none).
  socklen_t count = 0;
  if (::getsockopt(copy, SOL_SOCKET, SO_GET_FILTER, nullptr, &count) != 0) {
    if (errno == EACCES) {
      return Refuse(pid, info, "a socket with an eBPF filter (SO_ATTACH_BPF)",
                    "an eBPF program cannot be read back from the socket; detach it (SO_DETACH_BPF) before "
                    "checkpointing");
    }
    return ErrnoStatus(absl::StrFormat("getsockopt(SO_GET_FILTER) on pid %d fd %d", pid, info.fd));
  }
  if (count == 0) return absl::OkStatus();
  std::vector<sock_filter> program(count);
  socklen_t got = count;
  if (::getsockopt(copy, SOL_SOCKET, SO_GET_FILTER, program.data(), &got) != 0 || got != count) {
    return ErrnoStatus(absl::StrFormat("getsockopt(SO_GET_FILTER) on pid %d fd %d (a %u-instruction filter)", pid,
                                       info.fd, count));
  }
  fd->set_socket_filter(std::string(reinterpret_cast<const char*>(program.data()), count * sizeof(sock_filter)));
  ASSIGN_OR_RETURN(int locked, SocketIntOption(copy, SOL_SOCKET, SO_LOCK_FILTER, "SO_LOCK_FILTER"));
  fd->set_filter_locked(locked != 0);
  return absl::OkStatus();
}

absl::Status TreeSockets::CaptureUnix(pid_t pid, const proc::FdInfo& info, const proc::UnixSocket& us,
                                      image::ImageWriter* writer, image::Fd* fd) const {
  fd->set_kind(image::Fd::UNIX_SOCKET);
  fd->set_sock_type(us.type);
  fd->set_shutdown(us.shutdown);
  // A connection not accepted yet also shows no peer: only its listener names it.
  auto pending = pending_.find(us.ino);
  if (pending != pending_.end()) {
    RETURN_IF_ERROR(CapturePendingClient(pid, info, us, unix_.at(pending->second.first), pending->second.second, fd));
  } else if (us.type != SOCK_DGRAM && us.state == kTcpEstablished && us.peer == 0) {
    // A connected end whose peer is gone (closed: the kernel shut this end down both ways).
    // What waits in it can still be read.
    fd->set_orphaned(true);
    return SaveQueue(pid, info, us, writer, fd, in_flight_, opts_.journal).status();
  }
  auto peer = us.peer != 0 ? unix_.find(us.peer) : unix_.end();
  // A datagram socket bound and connected to itself is rebuilt on its own, like one
  // connected to another named socket; what it sent itself and has not read yet is saved.
  bool self = us.peer != 0 && us.peer == us.ino;
  bool pair = !self && peer != unix_.end() && peer->second.peer == us.ino;
  if (pair || (us.type != SOCK_DGRAM && us.peer != 0 && !self)) {
    if (!inodes_.count(us.peer)) {
      return Refuse(pid, info,
                    "a unix socket connected to a socket no process of the checkpoint holds (a process outside it, "
                    "or a connection not accepted yet)",
                    kUnixAdvice);
    }
    fd->set_peer_ino(us.peer);
    return SaveQueue(pid, info, us, writer, fd, in_flight_, opts_.journal).status();
  }
  // A socket rebuilt on its own.
  image::SocketState* s = fd->mutable_socket();
  s->set_family(AF_UNIX);
  s->set_type(us.type);
  if (pending != pending_.end()) {
    // Its name, if it has one, below.
  } else if (us.state == kTcpListen) {
    // Connections waiting to be accepted are made again by their clients, which must be in
    // the checkpoint and able to reach this socket's name again.
    size_t outside = 0;
    for (uint64_t client : us.pending) outside += client == 0 || !inodes_.count(client) ? 1 : 0;
    if (outside != 0 || us.pending.size() != us.rqueue) {
      return Refuse(pid, info,
                    absl::StrFormat("a listening unix socket with %u connection%s waiting to be accepted from "
                                    "processes outside the checkpoint (or whose clients closed them)",
                                    us.rqueue - static_cast<uint32_t>(us.pending.size() - outside),
                                    us.rqueue == 1 ? "" : "s"),
                    "accept or refuse them before checkpointing, or checkpoint their clients with it");
    }
    if (us.rqueue != 0) {
      if (std::string why = UnreachableName(pid, us); !why.empty()) {
        return Refuse(pid, info,
                      absl::StrFormat("a listening unix socket with connections waiting to be accepted, whose clients "
                                      "could not reach it again (%s)",
                                      why),
                      "accept them before checkpointing");
      }
    }
    s->set_listening(true);
    s->set_backlog(static_cast<int32_t>(us.wqueue));
  } else if (us.type == SOCK_DGRAM && !self) {
    // Messages other sockets sent it: kept when none of their senders had a name, sent again
    // from an unnamed socket to this one's name (which it must have, reachable, for that).
    ASSIGN_OR_RETURN(bool waiting, SaveQueue(pid, info, us, writer, fd, in_flight_, opts_.journal, /*unnamed_senders=*/true));
    if (waiting) {
      if (us.name.empty()) {
        return Refuse(pid, info, "an unbound datagram unix socket with messages waiting to be read", kUnixAdvice);
      }
      ASSIGN_OR_RETURN(UniqueFd copy, proc::CopyFd(pid, info.fd));
      int passcred = 0;
      socklen_t len = sizeof passcred;
      if (::getsockopt(copy.get(), SOL_SOCKET, SO_PASSCRED, &passcred, &len) == 0 && passcred) {
        return Refuse(pid, info,
                      "a datagram unix socket with SO_PASSCRED and messages waiting (their senders' credentials "
                      "could not be given back)",
                      "read them before checkpointing");
      }
      fd->set_messages_from_unnamed(true);
    }
  } else if (self) {  // what it sent itself
    RETURN_IF_ERROR(SaveQueue(pid, info, us, writer, fd, in_flight_, opts_.journal).status());
  } else if (us.rqueue != 0) {
    return Refuse(pid, info, "a unix socket with data waiting to be read", kUnixAdvice);
  }
  if (us.peer != 0) {
    // A datagram socket connected (one way) to a named socket.
    if (peer == unix_.end() || !inodes_.count(us.peer) || peer->second.name.empty()) {
      return Refuse(pid, info, "a datagram unix socket connected to a socket outside the checkpoint", kUnixAdvice);
    }
    const std::string& name = peer->second.name;
    if (name[0] != '\0' && name[0] != '/') {
      return Refuse(pid, info,
                    absl::StrFormat("a datagram unix socket connected to '%s', a name relative to another process's "
                                    "directory",
                                    name),
                    "bind the server socket to an absolute path");
    }
    s->set_peer(UnixSockaddr(name));
  }
  if (us.name.empty()) return absl::OkStatus();
  if (us.name[0] == '\0') {  // abstract: no file to account for
    s->set_bound(UnixSockaddr(us.name));
    return absl::OkStatus();
  }
  std::string path = us.name;
  if (path[0] != '/') {
    // bind(2) resolved it against the cwd of the process that bound it; that is most
    // likely this process's cwd. The socket file's inode below confirms it.
    char cwd[4096];
    std::string link = absl::StrCat("/proc/", pid, "/cwd");
    ssize_t n = ::readlink(link.c_str(), cwd, sizeof cwd - 1);
    if (n <= 0) return ErrnoStatus("readlink " + link);
    path = absl::StrCat(absl::string_view(cwd, static_cast<size_t>(n)), "/", path);
  }
  // The file as the process sees it (its mount namespace).
  std::string seen = absl::StrCat("/proc/", pid, "/root", path);
  struct stat st {};
  if (::lstat(seen.c_str(), &st) != 0 && (errno == ENOENT || errno == ENOTDIR)) {
    // The socket file (or a directory above it) was removed: the socket keeps its name,
    // which nothing can reach any more. Restore binds it and removes the file again.
    if (fd->messages_from_unnamed()) {
      return Refuse(pid, info,
                    absl::StrFormat("a datagram unix socket bound to %s, whose socket file was removed, with messages "
                                    "waiting (restore sends them again to its name, which nothing reaches now)",
                                    path),
                    "read them before checkpointing");
    }
    s->set_bound(UnixSockaddr(path));
    s->set_bound_file_removed(true);
    return absl::OkStatus();
  }
  if (!S_ISSOCK(st.st_mode) || st.st_ino != us.vfs_ino) {
    return Refuse(pid, info,
                  absl::StrFormat("a unix socket bound to %s, whose socket file was replaced since by another file",
                                  path),
                  "restore could not give the name back without removing that file; keep the socket file in place "
                  "while the socket is open");
  }
  s->set_bound(UnixSockaddr(path));
  s->set_bound_ino(us.vfs_ino);
  s->set_bound_mode(st.st_mode & 07777);
  s->set_bound_uid(st.st_uid);
  s->set_bound_gid(st.st_gid);
  return absl::OkStatus();
}

absl::Status TreeSockets::CaptureInet(pid_t pid, const proc::FdInfo& info, UniqueFd copy,
                                      image::ImageWriter* writer, image::Fd* fd) const {
  int c = copy.get();
  ASSIGN_OR_RETURN(int family, SocketIntOption(c, SOL_SOCKET, SO_DOMAIN, "SO_DOMAIN"));
  ASSIGN_OR_RETURN(int type, SocketIntOption(c, SOL_SOCKET, SO_TYPE, "SO_TYPE"));
  ASSIGN_OR_RETURN(int protocol, SocketIntOption(c, SOL_SOCKET, SO_PROTOCOL, "SO_PROTOCOL"));
  constexpr absl::string_view kAdvice =
      "checkpoints support TCP, UDP, UDP-Lite, ICMP (ping) and raw internet sockets and unix sockets — close it "
      "before checkpointing";
  if (family != AF_INET && family != AF_INET6) return Refuse(pid, info, FamilyName(family), kAdvice);
  bool tcp = type == SOCK_STREAM && protocol == IPPROTO_TCP;
  // Datagram sockets rebuilt from their name, peer and options: UDP, UDP-Lite, ICMP echo
  // ("ping") sockets, and raw sockets (their protocol is the one they were opened with).
  bool udp = type == SOCK_DGRAM && (protocol == IPPROTO_UDP || protocol == IPPROTO_UDPLITE);
  bool ping = type == SOCK_DGRAM && (protocol == IPPROTO_ICMP || protocol == IPPROTO_ICMPV6);
  bool raw = type == SOCK_RAW;
  if (!tcp && !udp && !ping && !raw) {
    return Refuse(pid, info, absl::StrFormat("an internet socket of type %d, protocol %d", type, protocol), kAdvice);
  }
  fd->set_kind(image::Fd::INET_SOCKET);
  image::SocketState* s = fd->mutable_socket();
  s->set_family(family);
  s->set_type(type);
  s->set_protocol(protocol);
  ASSIGN_OR_RETURN(std::string local, SocketAddress(c, false));
  ASSIGN_OR_RETURN(std::string remote, SocketAddress(c, true));
  if (tcp) {
    tcp_info ti{};
    socklen_t len = sizeof ti;
    if (::getsockopt(c, IPPROTO_TCP, TCP_INFO, &ti, &len) != 0) return ErrnoStatus("getsockopt TCP_INFO");
    if (ti.tcpi_state == kTcpListen) {
      // For a listener the kernel reports the accept queue's length and limit here.
      if (ti.tcpi_unacked != 0) {
        if (!opts_.tcp_close) {
          return Refuse(pid, info,
                        absl::StrFormat("a TCP socket listening on %s with %u connection%s waiting to be accepted",
                                        FormatSockaddr(local), ti.tcpi_unacked, ti.tcpi_unacked == 1 ? "" : "s"),
                        "accept them first, or pass --tcp-close to drop them (their clients see a reset)");
        }
        CAIRN_LOG_WARN("event=tcp_pending_dropped pid={} fd={} listen={} connections={}", pid, info.fd,
                       FormatSockaddr(local), ti.tcpi_unacked);
      }
      s->set_listening(true);
      s->set_backlog(static_cast<int32_t>(ti.tcpi_sacked));
    } else if (ti.tcpi_state != TCP_CLOSE) {
      std::string conn = absl::StrCat(FormatSockaddr(local), " -> ", FormatSockaddr(remote));
      if (opts_.tcp_established) {
        s->set_bound(local);
        s->set_peer(remote);
        // The check, before anything is frozen: the lock will need nft (tcp.h refuses other states).
        if (writer == nullptr) return NftablesChecked();
        if (opts_.tcp == nullptr) return absl::InternalError("no network lock for " + conn);
        // Options first: repair mode shows SO_REUSEADDR forced on.
        RETURN_IF_ERROR(CaptureOptions(c, family, type, protocol, s));
        return opts_.tcp->Save(pid, info.fd, std::move(copy), *writer, s);
      }
      if (!opts_.tcp_close) {
        return Refuse(pid, info, absl::StrCat("an established TCP connection ", conn),
                      "pass --tcp-established to save it whole (its peer notices only a pause), or --tcp-close to "
                      "restore it as a connection reset by its peer (the program sees ECONNRESET and can reconnect)");
      }
      s->set_reset(true);
      s->set_reset_from(conn);
      return absl::OkStatus();
    }
  } else {
    int queued = 0;
    if (::ioctl(c, SIOCINQ, &queued) == 0 && queued > 0) {
      CAIRN_LOG_WARN("event=udp_queue_dropped pid={} fd={} bound={} reason=\"datagrams waiting to be read are not "
                     "saved; a datagram network may lose them\"",
                     pid, info.fd, FormatSockaddr(local));
    }
    s->set_peer(remote);
    if (!remote.empty() && udp) {
      ASSIGN_OR_RETURN(uint32_t shut, UdpShutdown(c));
      s->set_shutdown(shut);
    } else if (!remote.empty()) {
      // Ping and raw sockets check what is sent before they check the shutdown, so the
      // probe UdpShutdown makes would not see it: the receiving side only.
      pollfd p{c, POLLRDHUP, 0};
      if (::poll(&p, 1, 0) == 1 && (p.revents & POLLRDHUP) != 0) s->set_shutdown(1);
      CAIRN_LOG_WARN("event=raw_shutdown_not_probed pid={} fd={} peer={} reason=\"a connected ping or raw socket: "
                     "its sending side is taken as open\"",
                     pid, info.fd, FormatSockaddr(remote));
    }
  }
  if (BoundInet(local)) s->set_bound(local);
  return CaptureOptions(c, family, type, protocol, s);
}

}  // namespace cairn::dump
