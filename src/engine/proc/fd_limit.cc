#include "engine/proc/fd_limit.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <fstream>

#include "absl/strings/str_format.h"

namespace cairn::proc {
namespace {

// The restorer's own descriptors (image files, sockets, its pidfds; a daemon's more) and the
// masters of files made again (deleted files, memfds, above the highest number): a margin, not a
// count — a checkpoint of hundreds of memfds near the limit can pass the dump's check and still
// find no room at its restore, which then refuses before it makes anything.
constexpr uint64_t kRestorerOwn = 256;

uint64_t NrOpen() {
  std::ifstream in("/proc/sys/fs/nr_open");
  uint64_t v = 0;
  return in >> v ? v : 0;
}

bool MayRaiseHardLimit() {
  __user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2]{};
  if (::syscall(SYS_capget, &hdr, data) != 0) return false;
  return (data[CAP_SYS_RESOURCE / 32].effective & (1u << (CAP_SYS_RESOURCE % 32))) != 0;
}

}  // namespace

uint64_t DescriptorsToRestore(int highest_fd, uint64_t descriptions, uint64_t pipes) {
  return std::max<uint64_t>(static_cast<uint64_t>(std::max(highest_fd, 2)) + 1, 3 + descriptions + pipes) + kRestorerOwn;
}

uint64_t DescriptorRoom() {
  rlimit r{};
  if (::getrlimit(RLIMIT_NOFILE, &r) != 0) return 0;
  uint64_t room = r.rlim_max;
  if (MayRaiseHardLimit()) room = std::max(room, NrOpen());
  return room;
}

absl::Status RaiseDescriptorLimit(uint64_t need, const std::string& what) {
  rlimit r{};
  if (::getrlimit(RLIMIT_NOFILE, &r) != 0) return absl::InternalError("getrlimit(RLIMIT_NOFILE) failed");
  rlimit want = r;
  want.rlim_cur = std::max<rlim_t>(r.rlim_max, need);
  want.rlim_max = std::max<rlim_t>(r.rlim_max, need);
  if (want.rlim_cur == r.rlim_cur && want.rlim_max == r.rlim_max) return absl::OkStatus();
  if (::setrlimit(RLIMIT_NOFILE, &want) == 0) return absl::OkStatus();
  if (need <= r.rlim_max) {  // the soft limit alone could not move: nothing more to try
    return absl::OkStatus();
  }
  return absl::ResourceExhaustedError(absl::StrFormat(
      "%s needs %d descriptors at once (the processes' own, up to their highest number, and one more for each open "
      "file they share), and this machine's hard limit for cairn is %d (raising it needs CAP_SYS_RESOURCE, and at "
      "most fs.nr_open = %d); raise cairn's hard limit (ulimit -Hn, or LimitNOFILE= in cairnd's unit) to at least %d",
      what, need, r.rlim_max, NrOpen(), need));
}

absl::Status ReserveOwnDescriptors(uint64_t count, const std::string& what) {
  if (count == 0) return absl::OkStatus();
  // The highest descriptor open now: the table holds at least that many already.
  int probe = ::open("/proc/self/fd", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (probe < 0) return absl::InternalError("open /proc/self/fd failed");
  int highest = probe;
  int listed = ::fcntl(probe, F_DUPFD_CLOEXEC, 0);
  if (DIR* dir = listed >= 0 ? ::fdopendir(listed) : nullptr) {
    while (dirent* de = ::readdir(dir)) highest = std::max(highest, std::atoi(de->d_name));
    ::closedir(dir);
  } else if (listed >= 0) {
    ::close(listed);
  }
  uint64_t need = static_cast<uint64_t>(highest) + count + 64;
  absl::Status raised = RaiseDescriptorLimit(need, what);
  if (raised.ok()) {
    // A descriptor placed at the far end grows the table once; closing it keeps the room.
    int far = ::fcntl(probe, F_DUPFD_CLOEXEC, static_cast<int>(std::min<uint64_t>(need - 1, INT32_MAX)));
    if (far >= 0) ::close(far);
  }
  ::close(probe);
  return raised;
}

}  // namespace cairn::proc
