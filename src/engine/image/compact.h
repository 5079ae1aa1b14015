#pragma once
// Folding a chain of incremental checkpoints into one standalone checkpoint.

#include <string>

#include "absl/status/statusor.h"
#include "engine/image/seal.h"

namespace cairn::image {

struct CompactResult {
  int links = 0;           // checkpoints the chain had
  uint64_t bytes = 0;      // page data in the result
};

// Writes the memory state of the checkpoint in `dir` (resolved down its chain) as one
// standalone checkpoint. With `out` empty, `dir` itself is replaced, atomically (the new
// image is written next to it and exchanged with it by renameat2(RENAME_EXCHANGE)); the
// result keeps `dir`'s id, so later links that name it as their parent stay valid.
// With `check`: every link's seal is checked with it first (seal.h); with `seal`, the result
// is sealed with that key.
absl::StatusOr<CompactResult> Compact(const std::string& dir, const std::string& out, const ImageKey* check = nullptr,
                                      const ImageKey* seal = nullptr);

}  // namespace cairn::image
