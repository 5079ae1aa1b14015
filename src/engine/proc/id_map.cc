#include "engine/proc/id_map.h"

#include <fcntl.h>
#include <linux/nsfs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/status.h"
#include "common/unique_fd.h"

namespace cairn::proc {
namespace {

absl::StatusOr<struct stat> StatNs(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return ErrnoStatus("stat " + path);
  return st;
}

bool SameInode(const struct stat& a, const struct stat& b) { return a.st_dev == b.st_dev && a.st_ino == b.st_ino; }

}  // namespace

absl::StatusOr<std::vector<IdRange>> ParseIdMap(const std::string& text) {
  std::vector<IdRange> map;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipWhitespace())) {
    std::vector<absl::string_view> f = absl::StrSplit(line, ' ', absl::SkipEmpty());
    IdRange r;
    if (f.size() != 3 || !absl::SimpleAtoi(f[0], &r.inside) || !absl::SimpleAtoi(f[1], &r.outside) ||
        !absl::SimpleAtoi(f[2], &r.count) || r.count == 0) {
      return absl::DataLossError(absl::StrCat("id map line '", line, "' is not INSIDE OUTSIDE COUNT"));
    }
    map.push_back(r);
  }
  return map;
}

std::string FormatIdMap(const std::vector<IdRange>& map) {
  std::string text;
  for (const IdRange& r : map) absl::StrAppend(&text, r.inside, " ", r.outside, " ", r.count, "\n");
  return text;
}

std::optional<uint32_t> InsideId(const std::vector<IdRange>& map, uint32_t outside) {
  for (const IdRange& r : map) {
    if (outside >= r.outside && outside - r.outside < r.count) return r.inside + (outside - r.outside);
  }
  return std::nullopt;
}

std::optional<uint32_t> OutsideId(const std::vector<IdRange>& map, uint32_t inside) {
  for (const IdRange& r : map) {
    if (inside >= r.inside && inside - r.inside < r.count) return r.outside + (inside - r.inside);
  }
  return std::nullopt;
}

absl::StatusOr<bool> OwnUserNamespace(pid_t pid) {
  ASSIGN_OR_RETURN(struct stat mine, StatNs("/proc/self/ns/user"));
  ASSIGN_OR_RETURN(struct stat theirs, StatNs(absl::StrCat("/proc/", pid, "/ns/user")));
  return !SameInode(mine, theirs);
}

absl::StatusOr<bool> UserNamespaceIsChild(pid_t pid) {
  std::string path = absl::StrCat("/proc/", pid, "/ns/user");
  UniqueFd ns(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!ns.valid()) return ErrnoStatus("open " + path);
  UniqueFd parent(::ioctl(ns.get(), NS_GET_PARENT));
  if (!parent.valid()) {
    if (errno == EPERM) return false;  // the initial namespace, or one above ours
    return ErrnoStatus("ioctl(NS_GET_PARENT) on " + path);
  }
  struct stat p {};
  if (::fstat(parent.get(), &p) != 0) return ErrnoStatus("fstat the parent of " + path);
  ASSIGN_OR_RETURN(struct stat mine, StatNs("/proc/self/ns/user"));
  return SameInode(p, mine);
}

}  // namespace cairn::proc
