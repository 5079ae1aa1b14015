#include "engine/proc/unix_sockets.h"

#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <linux/unix_diag.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "common/unique_fd.h"
#include "engine/proc/setns.h"

namespace cairn::proc {

namespace {

// A sock_diag socket, answering for the caller's network namespace as of now.
UniqueFd SockDiag() { return UniqueFd(::socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG)); }

// The unix sockets the sock_diag socket `nl` lists.
absl::StatusOr<std::map<uint64_t, UnixSocket>> ReadFrom(UniqueFd nl) {
  if (!nl.valid()) return ErrnoStatus("socket(NETLINK_SOCK_DIAG)");
  struct {
    nlmsghdr hdr;
    unix_diag_req req;
  } msg{};
  msg.hdr.nlmsg_len = sizeof msg;
  msg.hdr.nlmsg_type = SOCK_DIAG_BY_FAMILY;
  msg.hdr.nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
  msg.req.sdiag_family = AF_UNIX;
  msg.req.udiag_states = ~0U;
  msg.req.udiag_show = UDIAG_SHOW_NAME | UDIAG_SHOW_VFS | UDIAG_SHOW_PEER | UDIAG_SHOW_RQLEN | UDIAG_SHOW_ICONS;
  if (::send(nl.get(), &msg, sizeof msg, 0) != static_cast<ssize_t>(sizeof msg)) {
    return ErrnoStatus("send sock_diag request");
  }
  std::map<uint64_t, UnixSocket> out;
  std::vector<char> buf(1 << 16);
  for (;;) {
    ssize_t n = ::recv(nl.get(), buf.data(), buf.size(), 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus("recv sock_diag reply");
    }
    for (auto* h = reinterpret_cast<nlmsghdr*>(buf.data()); NLMSG_OK(h, static_cast<unsigned>(n));
         h = NLMSG_NEXT(h, n)) {
      if (h->nlmsg_type == NLMSG_DONE) return out;
      if (h->nlmsg_type == NLMSG_ERROR) {
        auto* e = static_cast<nlmsgerr*>(NLMSG_DATA(h));
        return ErrnoStatus("sock_diag for unix sockets", -e->error);
      }
      auto* m = static_cast<unix_diag_msg*>(NLMSG_DATA(h));
      UnixSocket s;
      s.ino = m->udiag_ino;
      s.type = m->udiag_type;
      s.state = m->udiag_state;
      int len = static_cast<int>(h->nlmsg_len - NLMSG_LENGTH(sizeof *m));
      for (auto* a = reinterpret_cast<nlattr*>(m + 1); len >= static_cast<int>(sizeof(nlattr)) &&
                                                      a->nla_len >= sizeof(nlattr) && a->nla_len <= len;
           len -= NLA_ALIGN(a->nla_len), a = reinterpret_cast<nlattr*>(reinterpret_cast<char*>(a) + NLA_ALIGN(a->nla_len))) {
        const char* data = reinterpret_cast<const char*>(a) + NLA_HDRLEN;
        size_t dlen = a->nla_len - NLA_HDRLEN;
        switch (a->nla_type) {
          case UNIX_DIAG_NAME:
            s.name.assign(data, dlen);
            // A path name comes with the terminating NUL bind(2) was given, if any.
            while (!s.name.empty() && s.name[0] != '\0' && s.name.back() == '\0') s.name.pop_back();
            break;
          case UNIX_DIAG_PEER:
            if (dlen >= 4) {
              uint32_t peer;
              std::memcpy(&peer, data, 4);
              s.peer = peer;
            }
            break;
          case UNIX_DIAG_RQLEN:
            if (dlen >= sizeof(unix_diag_rqlen)) {
              unix_diag_rqlen q;
              std::memcpy(&q, data, sizeof q);
              s.rqueue = q.udiag_rqueue;
              s.wqueue = q.udiag_wqueue;
            }
            break;
          case UNIX_DIAG_VFS:
            if (dlen >= sizeof(unix_diag_vfs)) {
              unix_diag_vfs v;
              std::memcpy(&v, data, sizeof v);
              s.vfs_ino = v.udiag_vfs_ino;
            }
            break;
          case UNIX_DIAG_ICONS:
            for (size_t at = 0; at + 4 <= dlen; at += 4) {
              uint32_t client;
              std::memcpy(&client, data + at, 4);
              s.pending.push_back(client);
            }
            break;
          case UNIX_DIAG_SHUTDOWN:
            if (dlen >= 1) s.shutdown = static_cast<uint8_t>(data[0]);
            break;
          default:
            break;
        }
      }
      out[s.ino] = s;
    }
  }
}

}  // namespace

absl::StatusOr<std::map<uint64_t, UnixSocket>> ReadUnixSockets(pid_t netns_of) {
  // The netlink socket answers for the namespace it was made in.
  struct stat mine {}, theirs {};
  std::string ns = absl::StrCat("/proc/", netns_of, "/ns/net");
  if (netns_of != 0 && ::stat("/proc/self/ns/net", &mine) == 0 && ::stat(ns.c_str(), &theirs) == 0 &&
      mine.st_ino != theirs.st_ino) {
    UniqueFd there;
    RETURN_IF_ERROR(InNamespaceOf(netns_of, CLONE_NEWNET, "net", [&]() -> absl::Status {
      there = SockDiag();
      return absl::OkStatus();
    }));
    ASSIGN_OR_RETURN(auto theirs_list, ReadFrom(std::move(there)));
    // Those its processes hold from outside it (a runtime's) are ours.
    ASSIGN_OR_RETURN(auto ours, ReadFrom(SockDiag()));
    theirs_list.merge(ours);
    return theirs_list;
  }
  return ReadFrom(SockDiag());
}


}  // namespace cairn::proc
