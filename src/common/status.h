#pragma once
// Error helpers. Every syscall failure becomes an absl::Status that names the call,
// the object it acted on, and errno's text, so a user-facing message needs no more context.

#include <cerrno>
#include "absl/strings/string_view.h"

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

namespace cairn {

// Maps an errno value onto the closest absl status code.
absl::StatusCode ErrnoToCode(int err);

// Returns a status for a failed syscall: "<what>: <strerror(err)>".
// `what` should name the call and its object, e.g. "open /proc/12/maps".
absl::Status ErrnoStatus(absl::string_view what, int err = errno);

// Prefixes `status`'s message with `context` ("context: message"); OK passes through.
absl::Status Annotate(const absl::Status& status, absl::string_view context);

}  // namespace cairn

#define CAIRN_CONCAT_INNER(a, b) a##b
#define CAIRN_CONCAT(a, b) CAIRN_CONCAT_INNER(a, b)

// Returns early from the enclosing function when `expr` (an absl::Status) is not OK.
#define RETURN_IF_ERROR(expr)                    \
  do {                                           \
    if (absl::Status _st = (expr); !_st.ok()) {  \
      return _st;                                \
    }                                            \
  } while (0)

// `ASSIGN_OR_RETURN(auto x, StatusOrExpr)`: unwraps a StatusOr or returns its error.
#define ASSIGN_OR_RETURN(lhs, expr) \
  ASSIGN_OR_RETURN_IMPL(CAIRN_CONCAT(_statusor_, __LINE__), lhs, expr)
#define ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                          \
  if (!tmp.ok()) return tmp.status();         \
  lhs = std::move(tmp).value()
