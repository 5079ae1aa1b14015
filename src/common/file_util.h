#pragma once
// Small file helpers that report failures as statuses naming the path.

#include <sys/types.h>

#include <string>
#include <utility>
#include <vector>
#include "absl/strings/string_view.h"

#include "absl/status/statusor.h"
#include "common/unique_fd.h"

namespace cairn {

// Reads a whole file (works for /proc files whose size reads as 0).
absl::StatusOr<std::string> ReadFile(const std::string& path);

// Writes `data` fully at the current offset of `fd`; `what` names the file in errors.
absl::Status WriteAll(int fd, absl::string_view data, absl::string_view what);

// Reads exactly `len` bytes at `offset`; a short read is a DataLoss error.
absl::Status PreadAll(int fd, void* buf, size_t len, off_t offset, absl::string_view what);

// Creates or truncates `path` (mode 0600), writes `data` and fsyncs it.
absl::Status WriteFileSynced(const std::string& path, absl::string_view data);

// An anonymous in-memory file (memfd, close-on-exec) holding `data`, read from its start: what a
// child should read but no file system should hold (a job's environment, with its secrets).
// `name` shows in /proc/PID/fd.
absl::StatusOr<int> MemoryFileWith(const char* name, absl::string_view data);

// Sets the mode of the regular file or directory at `path` to `mode`, without following a
// symlink there (a link is refused, FailedPrecondition, and left as it is); NotFound when
// nothing is there.
absl::Status ChmodNoFollow(const std::string& path, mode_t mode);

// Opens directory `dir` (made first with `create`, mode 0700, its missing parents 0755 whatever
// the umask) and refuses it unless it is a directory of our effective uid that no one else can
// open: what is in it is acted on as root. `what` names it in errors ("the dump journal
// directory"); the error says to remove it (cairn makes it again).
absl::StatusOr<UniqueFd> OpenPrivateDir(const std::string& dir, bool create, absl::string_view what);

// fsyncs the directory at `path` so a rename or create inside it is durable.
absl::Status SyncDir(const std::string& path);

// The ranges [first, last] that cover every descriptor number from `from` up except those in
// `keep`, ascending, for close_range (the last one ends at ~0U).
std::vector<std::pair<unsigned, unsigned>> RangesAround(std::vector<int> keep, unsigned from);

// Closes every descriptor from 3 up except those in `keep` (close_range over the gaps). For a
// child just forked that must hold nothing of its parent's but what it names.
void CloseAllDescriptorsBut(std::vector<int> keep);

}  // namespace cairn
