#include "engine/net/silence.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "common/status.h"
#include "common/unique_fd.h"
#include "engine/proc/fds.h"
#include "engine/proc/pidfd.h"

namespace cairn::net {

absl::Status SilenceTcpConnections(const std::vector<pid_t>& pids) {
  absl::Status first;
  auto keep = [&](absl::Status s) {
    if (first.ok() && !s.ok()) first = std::move(s);
  };
  for (pid_t pid : pids) {
    absl::StatusOr<std::vector<std::pair<int, std::string>>> fds = proc::ListFdTargets(pid);
    if (!fds.ok()) {
      if (!absl::IsNotFound(fds.status())) keep(fds.status());  // gone meanwhile: nothing to silence
      continue;
    }
    for (const auto& [fd, target] : *fds) {
      if (!absl::StartsWith(target, "socket:[")) continue;
      absl::StatusOr<UniqueFd> copy = proc::CopyFd(pid, fd);
      if (!copy.ok()) continue;  // closed meanwhile
      int domain = 0, protocol = 0, listening = 0;
      socklen_t len = sizeof domain;
      if (::getsockopt(copy->get(), SOL_SOCKET, SO_DOMAIN, &domain, &len) != 0 ||
          (domain != AF_INET && domain != AF_INET6)) {
        continue;
      }
      len = sizeof protocol;
      if (::getsockopt(copy->get(), SOL_SOCKET, SO_PROTOCOL, &protocol, &len) != 0 || protocol != IPPROTO_TCP) continue;
      len = sizeof listening;
      if (::getsockopt(copy->get(), SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) != 0 || listening) continue;
      int on = 1;
      if (::setsockopt(copy->get(), IPPROTO_TCP, TCP_REPAIR, &on, sizeof on) != 0) {
        keep(ErrnoStatus(absl::StrFormat("setsockopt(TCP_REPAIR) on pid %d fd %d (needs CAP_NET_ADMIN)", pid, fd)));
      }
    }
  }
  return first;
}

}  // namespace cairn::net
