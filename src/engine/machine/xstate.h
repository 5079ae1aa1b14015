// A thread's XSAVE area (the NT_X86_XSTATE regset, standard format) carried to a CPU whose
// area is laid out otherwise: another size (AVX-512 or AMX present on one side only) or other
// component offsets. The legacy area (x87, SSE) and the 64-byte header are at fixed places; each
// further component sits where CPUID leaf 0xD says on each machine.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/machine/cpu.h"

namespace cairn::machine {

// XSTATE_BV of the area: the components not in their initial state (the thread used them).
// 0 for an area too short to have a header (FXSAVE only: x87 and SSE, taken as used).
uint64_t ComponentsInUse(const std::string& xstate);
// The components the thread uses (its area laid out by `layout`) beyond x87 and SSE that XCR0
// `xcr0` lacks. Not counted: a component whose bytes are all zero — its initial state, which a
// CPU without it has too (XSTATE_BV may keep the bit set after the registers were cleared, and
// QEMU's TCG sets every bit) — and PKRU holding the kernel's default: a program changes it only
// to use protection keys, and without it restored it behaves the same.
uint64_t ComponentsLacking(const std::string& xstate, const std::vector<XsaveComponent>& layout, uint64_t xcr0);
// "AVX-512 registers zmm16-31" for a component's bit index; several, comma-separated.
std::string ComponentNames(uint64_t components);

// `saved` (laid out by `saved_layout`) rewritten into the layout of `here` (this CPU), using
// `fresh` (a new thread's own area here, of this kernel's size) for everything the saved area
// does not set. `saved` is returned as it is when the layouts agree (the same machine) or
// when the image did not record its layout (`saved_layout` empty, older images).
absl::StatusOr<std::string> FitXstate(const std::string& saved, const std::vector<XsaveComponent>& saved_layout,
                                      uint32_t saved_size, const std::string& fresh, const Cpu& here);

}  // namespace cairn::machine
