#include "common/status.h"

#include <cstring>

namespace cairn {

absl::StatusCode ErrnoToCode(int err) {
  switch (err) {
    case ENOENT:
    case ESRCH:
      return absl::StatusCode::kNotFound;
    case EPERM:
    case EACCES:
      return absl::StatusCode::kPermissionDenied;
    case EEXIST:
    case EBUSY:
      return absl::StatusCode::kAlreadyExists;
    case EINVAL:
    case EBADF:
    case ENOTDIR:
    case EISDIR:
      return absl::StatusCode::kInvalidArgument;
    case ENOSPC:
    case ENOMEM:
    case EMFILE:
    case ENFILE:
      return absl::StatusCode::kResourceExhausted;
    case ENOSYS:
    case EOPNOTSUPP:
      return absl::StatusCode::kUnimplemented;
    case EAGAIN:
    case EINTR:
      return absl::StatusCode::kUnavailable;
    default:
      return absl::StatusCode::kInternal;
  }
}

absl::Status ErrnoStatus(absl::string_view what, int err) {
  return absl::Status(ErrnoToCode(err), absl::StrCat(what, ": ", std::strerror(err)));
}

absl::Status Annotate(const absl::Status& status, absl::string_view context) {
  if (status.ok()) return status;
  return absl::Status(status.code(), absl::StrCat(context, ": ", status.message()));
}

}  // namespace cairn
