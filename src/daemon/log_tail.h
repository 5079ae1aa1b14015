#pragma once
// Where `cairn job logs --tail` and `cairn job attach --tail` start in a job's log: the last N
// lines (a final line without its newline counts as one), or with --tail-bytes the last N bytes
// taken back to the start of the line they begin in, so that nobody is shown half a line.

#include <sys/types.h>

#include <cstdint>

namespace cairn::daemon {

// The offset in the open log `fd` (`size` bytes long) of its last `lines` lines when lines > 0,
// else of its last `bytes` bytes taken back to a line's start (neither: the end). Looks at most
// `max_back` bytes back from the end (a line longer than that is cut).
off_t LogTailOffset(int fd, off_t size, int64_t lines, int64_t bytes, off_t max_back = 4 << 20);

}  // namespace cairn::daemon
