#pragma once
// Capturing a frozen process's memory: which areas exist, which of their pages must be
// saved, and streaming those pages into the image.

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/dump/tracker.h"
#include "engine/image/image.h"
#include "engine/proc/maps.h"
#include "image.pb.h"

namespace cairn::dump {

// Classifies the areas of `pid` into image Vma records (no pages yet). Fails with a clear
// message for areas the engine cannot save (System V shm, memfd, deleted files mapped privately...).
absl::StatusOr<std::vector<image::Vma>> DescribeAreas(pid_t pid, const std::vector<proc::MapEntry>& maps);

struct MemoryStats {
  uint64_t pages = 0;  // pages written to the image
  uint64_t bytes = 0;
};

// Called with (bytes done, bytes to scan) as the dump progresses.
using ProgressFn = std::function<void(uint64_t, uint64_t)>;

// Writes every page of `vmas` that cannot be rebuilt without the image, and records
// the blocks in each Vma. Reads memory with process_vm_readv (or /proc/PID/mem for
// unreadable areas) while a second thread checksums and writes, in bounded buffers.
// Saves the content of every deleted file and every scratch file (scratch_files.h) that
// `vmas` map, once per file across calls (`saved` holds (dev, inode) of the files already saved).
absl::Status SaveDeletedMappedFiles(pid_t pid, std::vector<image::Vma>& vmas, image::ImageWriter& writer,
                                    std::set<std::pair<uint64_t, uint64_t>>* saved);

// Shared anonymous objects whose pages are already in the image (`saved_shmem`, by id)
// are skipped; the ones this call saves are added to it.
// `written` (optional): for the areas it lists (by index in `vmas`), only those runs are
// saved instead of every page found; a zero page among them is recorded as a zero block
// (it must hide an older copy), as is a run that is no longer present.
// Blocks are appended to each Vma after the ones it already has.
// `unread` (optional, for a process that runs meanwhile): a run that cannot be read is
// recorded there as [start, end) and skipped instead of failing the dump.
// `zeroed`: bytes [first, second) are saved as zeros, whatever they read now: the injection
// trampoline, when it sits in a text page of the process (inject/trampoline.h), where they
// were zeros before it came.
using WrittenPages = std::map<size_t, std::vector<WrittenRun>>;
absl::StatusOr<MemoryStats> DumpPages(pid_t pid, std::vector<image::Vma>& vmas,
                                      image::ImageWriter& writer, const ProgressFn& progress,
                                      std::set<uint64_t>* saved_shmem, const WrittenPages* written = nullptr,
                                      std::vector<std::pair<uint64_t, uint64_t>>* unread = nullptr,
                                      std::pair<uint64_t, uint64_t> zeroed = {0, 0});

}  // namespace cairn::dump
