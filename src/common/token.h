#pragma once
// Shared-secret tokens for the TCP listeners of cairnd and cairn-controller.

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace cairn {

// Reads the token in `path`: one secret line, at least 16 characters, in a file that
// group and others cannot read (else the error says to chmod 600 it).
absl::StatusOr<std::string> ReadTokenFile(const std::string& path);

// True when `a` equals `b`; compares without an early exit, so the time taken says nothing
// about the secret (only its length).
bool SameSecret(absl::string_view a, absl::string_view b);

}  // namespace cairn
