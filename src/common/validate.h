#pragma once
// What a request may name and how large its numbers may be: the rules cairnd, cairn-controller,
// the engine's job registry and the CLI all apply, so that each refuses the same inputs with the
// same words. A refusal is InvalidArgument naming the field, the value given and what is allowed.

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace cairn {

// The job name rule, as the errors state it: [A-Za-z0-9][A-Za-z0-9._-]{0,63}. A name is a path
// component (STATE/jobs/NAME), a cgroup and a command-line argument, so it never starts with '-'
// (an option to whatever is given it) or '.' ('..', hidden files).
inline constexpr char kJobNameRule[] =
    "1 to 64 letters, digits, '.', '_' or '-', the first a letter or digit ([A-Za-z0-9][A-Za-z0-9._-]{0,63})";
inline constexpr size_t kMaxJobName = 64;

// OK when `name` follows kJobNameRule; else InvalidArgument: "invalid job name '-x': use ...".
// `what` names the kind of name in the message ("job name", "node name", "checkpoint id").
absl::Status CheckJobName(absl::string_view name, absl::string_view what = "job name");

// The range a number may take: [min, max], and 0 too when `zero` says what 0 means ("no
// limit"). Nothing outside, and never NaN or an infinity.
struct NumberRange {
  double min;
  double max;
  const char* zero = nullptr;
};

// OK when `value` is finite and within `range`; else InvalidArgument naming `field` (e.g.
// "limits.cpus (--cpus)"), the value and the range: "limits.cpus (--cpus) nan: give a finite
// number from 0.01 to 8192, or 0 (no limit)".
absl::Status CheckNumber(absl::string_view field, double value, const NumberRange& range);
// The same for an integer field (the value printed exactly).
absl::Status CheckInteger(absl::string_view field, int64_t value, const NumberRange& range);

// Shared bounds, so that the same quantity has the same limit wherever it arrives.
inline constexpr double kMaxCpus = 8192;                     // Linux's NR_CPUS on the largest configs
inline constexpr double kMaxMemoryBytes = double(1ll << 50);  // 1 PiB
inline constexpr double kMaxMemoryMb = double(1ll << 30);     // 1 PiB in MiB
inline constexpr double kMaxGpus = 1024;
inline constexpr double kYearSeconds = 365.0 * 24 * 3600;
inline constexpr double kDaySeconds = 24.0 * 3600;
inline constexpr double kMaxUnixTime = 253402300799;         // 9999-12-31T23:59:59Z
inline constexpr double kMaxUsd = 1e9;

}  // namespace cairn
