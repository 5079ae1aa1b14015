#include "engine/lazy/lazy_areas.h"

#include <algorithm>

namespace cairn::lazy {

bool IsLazyKind(const image::Vma& v) {
  // The main stack is filled before the process runs: it is small, touched at once, and
  // holds argv and the environment, which /proc/PID/cmdline and environ read from outside
  // (a remote read cannot wait for a userfaultfd handler, it would see nothing).
  // A droppable mapping (MAP_DROPPABLE) cannot be registered with a userfaultfd.
  bool droppable = std::find(v.vm_flags().begin(), v.vm_flags().end(), "dp") != v.vm_flags().end();
  return v.kind() == image::Vma::ANON && v.path() != "[stack]" && !droppable;
}

std::vector<LazyArea> LazyAreas(const image::ImageReader& img, const image::Process& proc) {
  std::vector<LazyArea> out;
  for (const image::Vma& v : proc.vmas()) {
    if (!IsLazyKind(v)) continue;
    std::vector<image::Piece> p = image::ResolveArea(img, proc, v);
    if (!p.empty()) out.push_back({&v, std::move(p)});
  }
  return out;
}

}  // namespace cairn::lazy
