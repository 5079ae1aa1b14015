#pragma once
// Chains of incremental checkpoints.
//
// An incremental checkpoint (Checkpoint.parent set) holds only the pages written since
// its parent; its areas marked `inherits` take every other page from the parent, which
// may itself be incremental. A parent is named by a plain directory name, resolved next
// to the child's directory (so a chain is moved as one folder), and by its id: a parent
// directory that now holds another checkpoint is refused.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/image/image.h"
#include "image.pb.h"

namespace cairn::image {

inline constexpr int kMaxChainLength = 1000;

// Opens `dir` and every parent down to a full checkpoint; each link is verified (headers,
// metadata checksum, parent id).
absl::StatusOr<std::unique_ptr<ImageReader>> OpenChain(const std::string& dir);

// Checks that `name` may name a parent: a plain directory name (no '/', not "." or "..").
absl::Status CheckParentName(const std::string& name);

// Where the parent of the checkpoint in `dir` lives.
std::string ParentPath(const std::string& dir, const std::string& name);

// The process with `pid` in `meta` (the root or a descendant), or null.
const Process* FindProcess(const Checkpoint& meta, int pid);

// A part of a stored block to write at block.vaddr() + offset.
struct Piece {
  const ImageReader* image = nullptr;
  const PageBlock* block = nullptr;
  uint64_t offset = 0;
  uint64_t len = 0;
};

// The pages of area `v` of process `proc` in `img` (the newest link), each taken from the
// newest image of the chain that holds it; later blocks of one image win over earlier
// ones (pre-copy rounds). Zero blocks hide older copies and produce no piece.
std::vector<Piece> ResolveArea(const ImageReader& img, const Process& proc, const Vma& v);

// Bytes of page data a restore of `v` writes (sum of its pieces).
uint64_t PieceBytes(const std::vector<Piece>& pieces);

}  // namespace cairn::image
