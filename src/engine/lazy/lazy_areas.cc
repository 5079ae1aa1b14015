#include "engine/lazy/lazy_areas.h"

namespace cairn::lazy {

bool IsLazyKind(const image::Vma& v) {
  // The main stack is filled before the process runs: it is small, touched at once, and
  // holds argv and the environment, which /proc/PID/cmdline and environ read from outside
  // (a remote read cannot wait for a userfaultfd handler, it would see nothing).
  return v.kind() == image::Vma::ANON && v.path() != "[stack]";
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
