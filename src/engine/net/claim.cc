#include "engine/net/claim.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cerrno>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/file_util.h"
#include "common/status.h"
#include "common/unique_fd.h"

namespace cairn::net {
namespace {

// A table's name is its file's name: letters, digits, '_', '-' and '.' (cairn_lock_ and a
// checkpoint id), not starting with '.', so that no name reaches outside the directory.
absl::Status CheckTableName(const std::string& table) {
  bool ok = !table.empty() && table.size() <= 200 && table[0] != '.';
  for (char c : table) {
    ok = ok && (absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.');
  }
  if (ok) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "network lock table name \"", table, "\": only letters, digits, '_', '-' and '.' (not first) may name a claim"));
}

absl::StatusOr<UniqueFd> OpenClaimDir(const std::string& dir) {
  return OpenPrivateDir(dir, /*create=*/true, "the network lock claim directory");
}

// Whether `fd` is still the file named `name` in `dirfd` (a remover may have unlinked it
// between our open and our flock).
bool StillNamed(int dirfd, const std::string& name, int fd) {
  struct stat held {}, named {};
  return ::fstat(fd, &held) == 0 && ::fstatat(dirfd, name.c_str(), &named, AT_SYMLINK_NOFOLLOW) == 0 &&
         held.st_ino == named.st_ino && held.st_dev == named.st_dev;
}

// Who holds a flock on the file `fd`, as /proc/locks names it: "pid N (COMM)".
std::string ClaimerOf(int fd) {
  const std::string unnamed = "a process /proc/locks does not name (it may have let go just now)";
  struct stat st {};
  absl::StatusOr<std::string> locks = ReadFile("/proc/locks");
  if (::fstat(fd, &st) != 0 || !locks.ok()) return unnamed;
  // "1: FLOCK  ADVISORY  READ 1234 00:1a:5678 0 EOF": pid, then major:minor (hex):inode.
  std::string id = absl::StrFormat("%02x:%02x:%lu", major(st.st_dev), minor(st.st_dev),
                                   static_cast<unsigned long>(st.st_ino));
  for (absl::string_view line : absl::StrSplit(*locks, '\n')) {
    std::vector<absl::string_view> f = absl::StrSplit(line, ' ', absl::SkipWhitespace());
    // A waiter's line has "->" after its number: no holder.
    if (f.size() < 6 || f[1] != "FLOCK" || f[5] != id) continue;
    int pid = -1;
    if (!absl::SimpleAtoi(f[4], &pid)) continue;
    absl::StatusOr<std::string> comm = ReadFile(absl::StrCat("/proc/", pid, "/comm"));
    return absl::StrCat("pid ", pid, " (", comm.ok() ? absl::StripTrailingAsciiWhitespace(*comm) : "gone", ")");
  }
  return unnamed;
}

// The file for `table`, open and flocked with `op` (LOCK_SH or LOCK_EX, never waited for), and
// still named so. Held by another: tried again every millisecond for `wait`, then Unavailable,
// with the holder named in *holder (read from /proc/locks once: each read costs the kernel an RCU
// grace period).
absl::StatusOr<UniqueFd> OpenLocked(int dirfd, const std::string& dir, const std::string& table, int op,
                                    absl::Duration wait, std::string* holder) {
  const absl::Time deadline = absl::Now() + wait;
  for (;;) {
    UniqueFd fd(::openat(dirfd, table.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600));
    if (!fd.valid()) return ErrnoStatus(absl::StrCat("open the network lock claim ", dir, "/", table));
    int rc;
    while ((rc = ::flock(fd.get(), op | LOCK_NB)) != 0 && errno == EINTR) {
    }
    if (rc == 0 && StillNamed(dirfd, table, fd.get())) return fd;
    if (rc != 0 && errno != EWOULDBLOCK) return ErrnoStatus(absl::StrCat("flock the network lock claim ", dir, "/", table));
    if (rc != 0 && absl::Now() >= deadline) {
      *holder = ClaimerOf(fd.get());
      return absl::UnavailableError(absl::StrCat("the network lock claim ", dir, "/", table, " is held by ", *holder));
    }
    if (rc != 0) absl::SleepFor(absl::Milliseconds(1));
  }
}

}  // namespace

std::string ClaimDir() { return "/run/cairn/network-locks"; }

struct LockClaim::State {
  std::string dir;
  std::string table;
  UniqueFd dirfd;
  UniqueFd fd;
  ~State() {
    // The last claim on the file removes it: an exclusive lock, taken without waiting, means
    // no one else holds a share (converting drops our share first; failing, we hold none).
    if (::flock(fd.get(), LOCK_EX | LOCK_NB) == 0 && StillNamed(dirfd.get(), table, fd.get())) {
      ::unlinkat(dirfd.get(), table.c_str(), 0);
    }
  }
};

const std::string& LockClaim::table() const {
  static const std::string none;
  return state_ ? state_->table : none;
}

absl::StatusOr<LockClaim> LockClaim::Take(const std::string& table, const std::string& dir, absl::Duration wait) {
  RETURN_IF_ERROR(CheckTableName(table));
  ASSIGN_OR_RETURN(UniqueFd dirfd, OpenClaimDir(dir));
  std::string holder;
  absl::StatusOr<UniqueFd> fd = OpenLocked(dirfd.get(), dir, table, LOCK_SH, wait, &holder);
  if (absl::IsUnavailable(fd.status())) {
    return absl::UnavailableError(absl::StrCat("claim the network lock ", table, ": ", fd.status().message(),
                                               " (a `cairn check --fix` removing it) for more than ",
                                               absl::FormatDuration(wait), "; try again"));
  }
  if (!fd.ok()) return fd.status();
  auto state = std::make_shared<State>();
  state->dir = dir;
  state->table = table;
  state->dirfd = std::move(dirfd);
  state->fd = std::move(*fd);
  LockClaim claim;
  claim.state_ = std::move(state);
  return claim;
}

absl::StatusOr<std::string> RemoveUnclaimed(const std::string& table, const std::function<absl::Status()>& remove,
                                            const std::string& dir) {
  RETURN_IF_ERROR(CheckTableName(table));
  ASSIGN_OR_RETURN(UniqueFd dirfd, OpenClaimDir(dir));
  std::string holder;
  absl::StatusOr<UniqueFd> fd = OpenLocked(dirfd.get(), dir, table, LOCK_EX, absl::ZeroDuration(), &holder);
  if (absl::IsUnavailable(fd.status())) return holder;
  if (!fd.ok()) return fd.status();
  // Held exclusively: a claim made from now on waits until the table and its file are gone.
  absl::Status removed = remove();
  ::unlinkat(dirfd.get(), table.c_str(), 0);
  if (!removed.ok()) return removed;
  return std::string();
}

}  // namespace cairn::net
