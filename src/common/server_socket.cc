#include "common/server_socket.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status.h"
#include "common/unique_fd.h"

namespace cairn {

absl::Status PrepareServerSocket(const std::string& path, const char* server) {
  sockaddr_un addr{};
  if (path.empty() || path[0] != '/' || path.size() >= sizeof(addr.sun_path)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--socket ", path, ": give an absolute path shorter than ", sizeof(addr.sun_path), " bytes"));
  }
  std::string dir = path.substr(0, std::max<size_t>(1, path.find_last_of('/')));
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) return ErrnoStatus("mkdir " + dir);
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0) return ErrnoStatus("stat " + dir);
  if (st.st_uid != 0 || (st.st_mode & 022) != 0) {
    // (Not "chmod go-w DIR": that would break a shared directory such as /tmp for everyone.)
    return absl::PermissionDeniedError(absl::StrFormat(
        "--socket %s: its directory %s is owned by uid %d with mode %o; it must be owned by root and writable by "
        "root only, or another user could take the daemon's place: put the socket in a directory of root's "
        "own (e.g. --socket /run/cairn/%s.sock; /run/cairn is made 0755 for root when missing)",
        path, dir, st.st_uid, st.st_mode & 07777, server));
  }
  if (::lstat(path.c_str(), &st) != 0) return absl::OkStatus();
  if (!S_ISSOCK(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat("--socket ", path, ": exists and is not a socket; remove it"));
  }
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  addr.sun_family = AF_UNIX;
  std::copy(path.begin(), path.end(), addr.sun_path);
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("--socket ", path, ": another process (a running ", server, "?) answers there; stop it first"));
  }
  if (::unlink(path.c_str()) != 0) return ErrnoStatus("unlink stale socket " + path);
  return absl::OkStatus();
}

}  // namespace cairn
