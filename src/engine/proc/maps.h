#pragma once
// Reader for /proc/PID/smaps: the memory areas of a process with their flags.

#include <sys/types.h>

#include <cstdint>
#include <string>
#include "absl/strings/string_view.h"
#include <vector>

#include "absl/status/statusor.h"

namespace cairn::proc {

struct MapEntry {
  uint64_t start = 0;
  uint64_t end = 0;
  uint32_t prot = 0;  // PROT_READ | PROT_WRITE | PROT_EXEC
  bool shared = false;
  uint64_t offset = 0;
  uint32_t dev_major = 0;
  uint32_t dev_minor = 0;
  uint64_t inode = 0;
  std::string path;                    // as printed; may end in " (deleted)"
  std::vector<std::string> vm_flags;   // smaps "VmFlags:" mnemonics

  bool HasFlag(absl::string_view f) const;
  uint64_t size() const { return end - start; }
};

// Parses one line of /proc/PID/maps (the header line of an smaps entry).
absl::StatusOr<MapEntry> ParseMapsLine(absl::string_view line);

// Parses the whole text of /proc/PID/smaps (or /proc/PID/maps, without VmFlags).
absl::StatusOr<std::vector<MapEntry>> ParseSmaps(absl::string_view text);

// Reads and parses /proc/PID/smaps.
absl::StatusOr<std::vector<MapEntry>> ReadSmaps(pid_t pid);

// Reads /proc/PID/maps: the same areas without VmFlags, but much cheaper (smaps walks
// every page table to count resident pages: about 10 ms per GiB mapped).
absl::StatusOr<std::vector<MapEntry>> ReadMaps(pid_t pid);

// True when `a` and `b` list the same areas (bounds, protections, sharing, file, offset).
bool SameLayout(const std::vector<MapEntry>& a, const std::vector<MapEntry>& b);

}  // namespace cairn::proc
