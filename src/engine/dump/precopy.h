#pragma once
// Pre-copy: copying a process's memory while it runs, so that the freeze at the end only
// has to copy what was written during the last round.
//
// 1. A brief freeze starts write tracking (tracker.h): every private anonymous area is
//    registered and write-protected; then the process runs on.
// 2. Round 1 copies every page of the tracked areas (process_vm_readv) while the process
//    runs. Each later round lists the pages written since the previous scan (PAGEMAP_SCAN,
//    re-protecting them in the same walk) and copies those again. Rounds stop when one finds
//    less than `small_bytes` written, when one finds more than 90% of what the one before
//    found (not converging), or after `max_rounds`.
// 3. The dump then freezes the process as usual and, for the tracked areas, copies only the
//    pages written since the last round (plus any run a round could not read); other areas
//    (new since step 1, file-backed, shared) are copied in full while frozen.
// Blocks of one area are recorded in copy order; a later copy of a page wins on restore.
// Round 1 (the bulk copy) runs at nice 19, so that on a busy machine it takes CPU time from
// others rather than from the process; the short later rounds at normal priority.

#include <sys/types.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/dump/guardian.h"
#include "engine/dump/memory.h"
#include "engine/image/image.h"
#include "engine/proc/maps.h"
#include "image.pb.h"

namespace cairn::dump {

struct PreCopyOptions {
  int max_rounds = 8;                // copy rounds while the process runs (at least 1)
  uint64_t small_bytes = 8ull << 20;  // stop once a round finds less than this written
  uint64_t rate_bytes = 0;            // copy at most this many bytes per second (0: no limit)
  GuardJournal* journal = nullptr;    // the dump's (guardian.h): the tracker it creates
};

struct PreCopied {
  std::vector<image::PageBlock> blocks;                // copied while running, in copy order
  std::vector<std::pair<uint64_t, uint64_t>> unread;   // runs a round could not read
  int rounds = 0;
  uint64_t bytes = 0;                                  // page data copied while running
  std::vector<uint64_t> written_per_round;             // bytes found written by rounds 2..
  double start_freeze_seconds = 0;                     // the brief stop of step 1
  int tracker_fd = -1;                                 // where step 1 parked the tracker
  // The areas (smaps, with VmFlags) as the last round saw them. The frozen phase reads
  // only /proc/PID/maps and, when the layout is unchanged, takes the flags from here:
  // smaps would cost about 10 ms per GiB of downtime. (A flag changed without changing
  // the layout, by madvise over a whole area during the last round, is taken as it was
  // when that round started.)
  std::vector<proc::MapEntry> last_maps;
};

absl::StatusOr<PreCopied> PreCopy(pid_t pid, image::ImageWriter& writer, const PreCopyOptions& opts,
                                  const ProgressFn& progress);

}  // namespace cairn::dump
