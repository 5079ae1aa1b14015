#pragma once
// Which areas a lazy restore leaves to the page handler (restore --lazy).
//
// Private anonymous areas holding saved pages, except the main stack, are mapped empty, registered with a
// userfaultfd in missing mode, and filled by the page handler (lazy/handler.h) on first
// touch and by its background prefetch. Everything else (file-backed private pages,
// shared anonymous memory, System V segments) is still filled before the process runs:
// shared memory may be reached through several address spaces, which one userfaultfd
// cannot cover. The restorer and the handler both call LazyAreas, so they agree on the
// registered ranges without passing them along.

#include <vector>

#include "engine/image/chain.h"
#include "engine/image/image.h"

namespace cairn::lazy {

struct LazyArea {
  const image::Vma* vma = nullptr;
  std::vector<image::Piece> pieces;
};

// The lazily filled areas of `proc` in `img` (the newest link of a chain).
std::vector<LazyArea> LazyAreas(const image::ImageReader& img, const image::Process& proc);

// True when `v` is of a kind a lazy restore leaves to the handler (if it has pages).
bool IsLazyKind(const image::Vma& v);

}  // namespace cairn::lazy
