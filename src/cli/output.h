#pragma once
// How the `cairn` commands print: errors on stderr with a non-zero exit, replies as JSON,
// times and sizes for people.

#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace google::protobuf {
class Message;
}

namespace cairn::cli {

// Prints "cairn: error: MSG" on stderr; returns the exit status for a failed command: 1, or
// the one for an error of `code` (exit_codes.h).
int Fail(const std::string& msg);
int Fail(absl::StatusCode code, const std::string& msg);
int Fail(const absl::Status& s);

// Prints `m` as indented JSON with proto field names and every field; 0, or Fail.
int PrintJson(const google::protobuf::Message& m);

// "2026-11-30T12:00:00Z" (UTC), or "-" for 0.
std::string TimeString(double unix_s);

// "1.5 GiB".
std::string HumanBytes(double bytes);

// "512M", "2G", "1048576" -> bytes (whole numbers only) (K, M, G, T are binary; a
// trailing "B" or "iB" is allowed); -1 when malformed. The same sizes for every command.
int64_t ParseSize(std::string s);

}  // namespace cairn::cli
