#pragma once
// A user namespace's id maps (/proc/PID/uid_map, gid_map: user_namespaces(7)): ranges of ids
// inside the namespace and the ids they are outside it, as the reader's namespace sees them.
// The kernel keeps credentials and file owners as the machine's ids; inside the namespace a
// process names them by their inside ids.

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace cairn::proc {

struct IdRange {
  uint32_t inside = 0;
  uint32_t outside = 0;
  uint32_t count = 0;
};

// The text of a uid_map or gid_map: one "INSIDE OUTSIDE COUNT" line per range.
absl::StatusOr<std::vector<IdRange>> ParseIdMap(const std::string& text);

// The text the kernel takes for a map (at most 340 ranges, none overlapping: it checks).
std::string FormatIdMap(const std::vector<IdRange>& map);

// The inside id of outside id `outside`, if the map holds it.
std::optional<uint32_t> InsideId(const std::vector<IdRange>& map, uint32_t outside);

// The outside id of inside id `inside`, if the map holds it.
std::optional<uint32_t> OutsideId(const std::vector<IdRange>& map, uint32_t inside);

// Whether `pid` is in a user namespace other than the caller's.
absl::StatusOr<bool> OwnUserNamespace(pid_t pid);

// Whether `pid`'s user namespace is a child of the caller's (NS_GET_PARENT, ioctl_ns(2)).
absl::StatusOr<bool> UserNamespaceIsChild(pid_t pid);

}  // namespace cairn::proc
