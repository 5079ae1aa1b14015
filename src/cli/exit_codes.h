#pragma once
// cairn's exit statuses: the same for every subcommand, engine and daemon and controller alike
// (README, "Exit status"), so that a script can tell why a command failed without reading its
// message. A command that runs a program (`cairn restore` without --detach, `cairn job attach`)
// exits with that program's status instead, once it ran.

#include "absl/status/status.h"

namespace cairn::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailed = 1;       // tried and failed: the system, the image, the job
inline constexpr int kExitUsage = 2;        // a bad command line or argument: nothing was tried
inline constexpr int kExitNotFound = 3;     // what it names does not exist (job, checkpoint, pid, node)
inline constexpr int kExitRefused = 4;      // not in this state, not allowed, not supported: nothing changed
inline constexpr int kExitTimedOut = 5;     // not finished in time (it may still finish: the message says)
inline constexpr int kExitUnavailable = 6;  // the daemon or controller does not answer

// The statuses above as a manual page's EXIT STATUS section (roff).
inline constexpr char kExitStatusRoff[] =
    ".SH EXIT STATUS\n"
    ".TP\n.B 0\ndone\n"
    ".TP\n.B 1\ntried and failed (the system, the image, the job; a dump ended by a caught signal)\n"
    ".TP\n.B 2\na bad command line or argument: nothing was tried\n"
    ".TP\n.B 3\nwhat it names does not exist (job, checkpoint, pid, node)\n"
    ".TP\n.B 4\nrefused: not in this state, not allowed or not supported; nothing changed\n"
    ".TP\n.B 5\nnot finished within \\-\\-timeout (it may still finish: the message says how to follow it)\n"
    ".TP\n.B 6\nthe daemon or controller does not answer\n"
    ".PP\n\\fBcairn restore\\fR without \\-\\-detach and \\fBcairn job attach\\fR exit with the program's own "
    "status once it ran (128+N for signal N).\n";

// The exit status for an error of `code` (gRPC's codes are the same numbers).
constexpr int ExitFor(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kOk:
      return kExitOk;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
      return kExitUsage;
    case absl::StatusCode::kNotFound:
      return kExitNotFound;
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kAlreadyExists:
    case absl::StatusCode::kPermissionDenied:
    case absl::StatusCode::kUnauthenticated:
    case absl::StatusCode::kUnimplemented:
      return kExitRefused;
    case absl::StatusCode::kDeadlineExceeded:
      return kExitTimedOut;
    case absl::StatusCode::kUnavailable:
      return kExitUnavailable;
    default:  // cancelled (a caught signal), aborted, data loss, internal, unknown, exhausted
      return kExitFailed;
  }
}

}  // namespace cairn::cli
