// The vDSO across kernels and CPUs. A process's code calls its vDSO at the addresses it
// looked up at start-up (glibc keeps them), and the vDSO reads the [vvar] pages the kernel
// maps before it at fixed offsets. Another kernel — or the same kernel on another CPU model,
// which patches CPU-specific instructions into its vDSO at boot — has other code with other
// offsets. A restore there keeps the old vDSO's bytes at the old address as a *proxy* whose
// exported entry points jump to the same-named functions of this kernel's vDSO, which is
// placed (with its vvar areas, as the kernel laid them out) in free space near it.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "absl/status/statusor.h"

namespace cairn::machine {

// This process's own vDSO as the kernel mapped it (empty when it has none), read once.
const std::string& ThisVdso();

struct VdsoSymbol {
  uint64_t offset = 0;  // from the start of the image
  uint64_t size = 0;
};
// The functions a vDSO image exports (its dynamic symbols), by name.
absl::StatusOr<std::map<std::string, VdsoSymbol>> VdsoFunctions(const std::string& image);

// `old_image` (mapped at `old_base`) with each exported function's entry replaced by a jump
// to the function of the same name in `new_image` mapped at `new_base` (or, for the time
// functions a kernel's vDSO may lack, by their system call). Refused, naming the function,
// when a function has no counterpart or is too short for the jump.
absl::StatusOr<std::string> VdsoProxy(const std::string& old_image, uint64_t old_base, const std::string& new_image,
                                      uint64_t new_base);

}  // namespace cairn::machine
