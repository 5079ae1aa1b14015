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

// `m` as JSON with proto field names and every field, as people and scripts read it (not
// proto3's mapping as is): 64-bit integers as numbers, not strings; unix-second times as RFC 3339
// strings in UTC ("2026-12-06T04:15:10.558Z"; null for 0, "none"). One line unless `pretty`;
// "" when it cannot be encoded.
std::string ToJson(const google::protobuf::Message& m, bool pretty);
// Prints ToJson(m, pretty); 0, or Fail.
int PrintJson(const google::protobuf::Message& m);

// "2026-11-30T12:00:00Z" (UTC), or "-" for 0.
std::string TimeString(double unix_s);

// "1.5 GiB".
std::string HumanBytes(double bytes);

// "512M", "2G", "1048576" -> bytes (whole numbers only) (K, M, G, T are binary; a
// trailing "B" or "iB" is allowed); -1 when malformed. The same sizes for every command.
int64_t ParseSize(std::string s);

}  // namespace cairn::cli
