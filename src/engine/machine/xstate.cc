#include "engine/machine/xstate.h"

#include <cstring>
#include <map>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"

namespace cairn::machine {
namespace {

constexpr size_t kLegacy = 512;      // FXSAVE area: x87, SSE
constexpr size_t kSwReserved = 464;  // bytes 464..511: the kernel's own note (fx_sw_bytes)
constexpr size_t kHeader = 64;       // XSTATE_BV, XCOMP_BV, reserved
constexpr int kPkru = 9;
constexpr uint32_t kPkruDefault = 0x55555554;  // the kernel's: every key but 0 denied

const XsaveComponent* Find(const std::vector<XsaveComponent>& layout, uint32_t index) {
  for (const XsaveComponent& c : layout) {
    if (c.index == index) return &c;
  }
  return nullptr;
}

}  // namespace

uint64_t ComponentsInUse(const std::string& xstate) {
  if (xstate.size() < kLegacy + kHeader) return 0;
  uint64_t bv;
  std::memcpy(&bv, xstate.data() + kLegacy, sizeof bv);
  return bv;
}

uint64_t ComponentsLacking(const std::string& xstate, const std::vector<XsaveComponent>& layout, uint64_t xcr0) {
  uint64_t lacking = ComponentsInUse(xstate) & ~xcr0 & ~3ULL;
  for (int i = 2; i < 64; ++i) {
    if (!(lacking >> i & 1) || i == kPkru) continue;
    const XsaveComponent* c = Find(layout, i);
    if (c == nullptr || c->size == 0 || uint64_t{c->offset} + c->size > xstate.size()) continue;
    absl::string_view bytes(xstate.data() + c->offset, c->size);
    if (bytes.find_first_not_of('\0') == absl::string_view::npos) lacking &= ~(1ULL << i);
  }
  if (lacking >> kPkru & 1) {
    const XsaveComponent* c = Find(layout, kPkru);
    uint32_t pkru = 0;
    if (c != nullptr && c->offset + 4 <= xstate.size()) std::memcpy(&pkru, xstate.data() + c->offset, 4);
    if (c == nullptr || pkru == kPkruDefault || pkru == 0) lacking &= ~(1ULL << kPkru);
  }
  return lacking;
}

std::string ComponentNames(uint64_t components) {
  static const std::map<int, const char*> kNames = {
      {0, "x87 registers"},        {1, "SSE registers"},          {2, "AVX registers (ymm upper halves)"},
      {3, "MPX bounds"},           {4, "MPX configuration"},      {5, "AVX-512 mask registers"},
      {6, "AVX-512 registers (zmm upper halves)"},                {7, "AVX-512 registers zmm16-31"},
      {9, "protection-key register (PKRU)"},                      {11, "CET user state"},
      {17, "AMX tile configuration"}, {18, "AMX tile data"},
  };
  std::vector<std::string> out;
  for (int i = 0; i < 64; ++i) {
    if (!(components >> i & 1)) continue;
    auto it = kNames.find(i);
    out.push_back(it != kNames.end() ? it->second : absl::StrCat("XSAVE component ", i));
  }
  return absl::StrJoin(out, ", ");
}

absl::StatusOr<std::string> FitXstate(const std::string& saved, const std::vector<XsaveComponent>& saved_layout,
                                      uint32_t saved_size, const std::string& fresh, const Cpu& here) {
  if (saved_layout.empty() && saved_size == 0) return saved;  // an older image: as it was
  if (saved.size() < kLegacy) return absl::DataLossError("a thread's saved XSAVE area is shorter than 512 bytes");
  uint64_t in_use = ComponentsInUse(saved);
  uint64_t lacking = ComponentsLacking(saved, saved_layout, here.xcr0);
  if (lacking != 0) {
    return absl::FailedPreconditionError(absl::StrCat("the thread was using ", ComponentNames(lacking),
                                                      ", which this CPU does not have"));
  }
  bool same = saved.size() == fresh.size() && saved_size == here.xsave_size;
  for (int i = 2; same && i < 64; ++i) {
    if (!(in_use >> i & 1)) continue;
    const XsaveComponent *a = Find(saved_layout, i), *b = Find(here.components, i);
    same = a != nullptr && b != nullptr && a->offset == b->offset && a->size == b->size;
  }
  if (same && (in_use & ~here.xcr0) == 0) return saved;

  std::string out = fresh;
  std::memcpy(out.data(), saved.data(), kSwReserved);  // x87 and SSE: the same everywhere
  if (out.size() < kLegacy + kHeader) return out;      // no XSAVE here: FXSAVE's area only
  uint64_t bv = in_use & here.xcr0;  // (a default PKRU where this CPU has none: dropped)
  std::memset(out.data() + kLegacy, 0, kHeader);  // standard format: XCOMP_BV 0, reserved 0
  std::memcpy(out.data() + kLegacy, &bv, sizeof bv);
  for (int i = 2; i < 64; ++i) {
    if (!(bv >> i & 1)) continue;
    const XsaveComponent *from = Find(saved_layout, i), *to = Find(here.components, i);
    if (from == nullptr || to == nullptr || from->size != to->size || from->offset + from->size > saved.size() ||
        to->offset + to->size > out.size()) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "the thread's %s cannot be placed in this CPU's XSAVE area (component %d: saved at %u+%u, here %s)",
          ComponentNames(1ULL << i), i, from ? from->offset : 0, from ? from->size : 0,
          to ? absl::StrFormat("%u+%u", to->offset, to->size) : std::string("absent")));
    }
    std::memcpy(out.data() + to->offset, saved.data() + from->offset, from->size);
  }
  return out;
}

}  // namespace cairn::machine
