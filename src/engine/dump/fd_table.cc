#include "engine/dump/fd_table.h"

#include <fcntl.h>
#include <sys/syscall.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace cairn::dump {

absl::StatusOr<std::vector<proc::FdInfo>> ReadFrozenFds(const FrozenProcess& fp, inject::Injector& inj,
                                                        inject::RemoteScratch& scratch) {
  pid_t pid = fp.pid();
  auto socket = [](absl::string_view target) { return proc::SocketInode(target).has_value(); };
  ASSIGN_OR_RETURN(std::vector<proc::FdInfo> fds,
                   proc::ReadFds(pid, [&](absl::string_view target) { return !socket(target); }));
  std::vector<size_t> asked;
  for (size_t i = 0; i < fds.size(); ++i) {
    if (socket(fds[i].target)) asked.push_back(i);
  }
  // Two rows per socket, as many as the scratch area holds at once (with the row after the
  // table whose first word says the loop is done: batch.h).
  inject::CallBatch batch = fp.batch();
  const size_t per_run = (scratch.size() / sizeof(inject::BatchRow) - 1) / 2;
  for (size_t at = 0; at < asked.size(); at += per_run) {
    size_t n = std::min(per_run, asked.size() - at);
    std::vector<inject::BatchedCall> calls;
    calls.reserve(2 * n);
    for (size_t k = 0; k < n; ++k) {
      uint64_t fd = static_cast<uint64_t>(fds[asked[at + k]].fd);
      calls.push_back({SYS_fcntl, {fd, F_GETFL}});
      calls.push_back({SYS_fcntl, {fd, F_GETFD}});
    }
    RETURN_IF_ERROR(batch.Run(inj, scratch, 0, calls));
    for (size_t k = 0; k < n; ++k) {
      proc::FdInfo& info = fds[asked[at + k]];
      long fl = calls[2 * k].result, fd_flags = calls[2 * k + 1].result;
      if (fl < 0 || fd_flags < 0) {
        return ErrnoStatus(absl::StrCat("fcntl(F_GETFL/F_GETFD) of fd ", info.fd, " inside pid ", pid),
                           static_cast<int>(-(fl < 0 ? fl : fd_flags)));
      }
      info.flags = static_cast<int>(fl) | ((fd_flags & FD_CLOEXEC) != 0 ? O_CLOEXEC : 0);
    }
  }
  return fds;
}

}  // namespace cairn::dump
