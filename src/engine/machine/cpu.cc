#include "engine/machine/cpu.h"

#include <cpuid.h>

#include <algorithm>
#include <fstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace cairn::machine {
namespace {

// XCR0 bits: what the kernel saves and restores, so what user code may use.
constexpr uint64_t kXcr0Sse = 1 << 1, kXcr0Avx = 1 << 2;
constexpr uint64_t kXcr0Avx512 = (1 << 5) | (1 << 6) | (1 << 7);  // opmask, ZMM_Hi256, Hi16_ZMM
constexpr uint64_t kXcr0Amx = (1ULL << 17) | (1ULL << 18);         // XTILECFG, XTILEDATA

enum Reg { kEax, kEbx, kEcx, kEdx };

// A CPUID feature bit, usable only if the XCR0 components `xcr0` are all enabled.
struct Bit {
  const char* name;
  uint32_t leaf, subleaf;
  Reg reg;
  int bit;
  uint64_t xcr0 = 0;
};

constexpr uint64_t kAvxState = kXcr0Sse | kXcr0Avx;
constexpr uint64_t kAvx512State = kAvxState | kXcr0Avx512;

// The features code dispatches on. Names are Linux's /proc/cpuinfo names, but for the few
// that name them otherwise (pni → sse3, abm → lzcnt, sha_ni → sha).
constexpr Bit kBits[] = {
    {"fpu", 1, 0, kEdx, 0},          {"cx8", 1, 0, kEdx, 8},
    {"cmov", 1, 0, kEdx, 15},        {"mmx", 1, 0, kEdx, 23},
    {"fxsr", 1, 0, kEdx, 24},        {"sse", 1, 0, kEdx, 25},
    {"sse2", 1, 0, kEdx, 26},        {"sse3", 1, 0, kEcx, 0},
    {"pclmulqdq", 1, 0, kEcx, 1},    {"ssse3", 1, 0, kEcx, 9},
    {"fma", 1, 0, kEcx, 12, kAvxState},
    {"cx16", 1, 0, kEcx, 13},        {"sse4_1", 1, 0, kEcx, 19},
    {"sse4_2", 1, 0, kEcx, 20},      {"movbe", 1, 0, kEcx, 22},
    {"popcnt", 1, 0, kEcx, 23},      {"aes", 1, 0, kEcx, 25},
    {"xsave", 1, 0, kEcx, 26},       {"osxsave", 1, 0, kEcx, 27},
    {"avx", 1, 0, kEcx, 28, kAvxState},
    {"f16c", 1, 0, kEcx, 29, kAvxState},
    {"rdrand", 1, 0, kEcx, 30},
    {"bmi1", 7, 0, kEbx, 3},         {"avx2", 7, 0, kEbx, 5, kAvxState},
    {"bmi2", 7, 0, kEbx, 8},         {"erms", 7, 0, kEbx, 9},
    {"avx512f", 7, 0, kEbx, 16, kAvx512State},
    {"avx512dq", 7, 0, kEbx, 17, kAvx512State},
    {"rdseed", 7, 0, kEbx, 18},      {"adx", 7, 0, kEbx, 19},
    {"avx512ifma", 7, 0, kEbx, 21, kAvx512State},
    {"clflushopt", 7, 0, kEbx, 23},  {"clwb", 7, 0, kEbx, 24},
    {"avx512cd", 7, 0, kEbx, 28, kAvx512State},
    {"sha", 7, 0, kEbx, 29},
    {"avx512bw", 7, 0, kEbx, 30, kAvx512State},
    {"avx512vl", 7, 0, kEbx, 31, kAvx512State},
    {"avx512vbmi", 7, 0, kEcx, 1, kAvx512State},
    {"waitpkg", 7, 0, kEcx, 5},
    {"avx512_vbmi2", 7, 0, kEcx, 6, kAvx512State},
    {"gfni", 7, 0, kEcx, 8},
    {"vaes", 7, 0, kEcx, 9, kAvxState},
    {"vpclmulqdq", 7, 0, kEcx, 10, kAvxState},
    {"avx512_vnni", 7, 0, kEcx, 11, kAvx512State},
    {"avx512_bitalg", 7, 0, kEcx, 12, kAvx512State},
    {"avx512_vpopcntdq", 7, 0, kEcx, 14, kAvx512State},
    {"rdpid", 7, 0, kEcx, 22},       {"movdiri", 7, 0, kEcx, 27},
    {"movdir64b", 7, 0, kEcx, 28},   {"fsrm", 7, 0, kEdx, 4},
    {"avx512_vp2intersect", 7, 0, kEdx, 8, kAvx512State},
    {"serialize", 7, 0, kEdx, 14},
    {"amx_bf16", 7, 0, kEdx, 22, kXcr0Amx},
    {"avx512_fp16", 7, 0, kEdx, 23, kAvx512State},
    {"amx_tile", 7, 0, kEdx, 24, kXcr0Amx},
    {"amx_int8", 7, 0, kEdx, 25, kXcr0Amx},
    {"avx_vnni", 7, 1, kEax, 4, kAvxState},
    {"avx512_bf16", 7, 1, kEax, 5, kAvx512State},
    {"xsaveopt", 0xd, 1, kEax, 0},   {"xsavec", 0xd, 1, kEax, 1},
    {"xsaves", 0xd, 1, kEax, 3},
    {"lahf_lm", 0x80000001, 0, kEcx, 0},
    {"lzcnt", 0x80000001, 0, kEcx, 5},
    {"sse4a", 0x80000001, 0, kEcx, 6},
    {"prefetchw", 0x80000001, 0, kEcx, 8},
    {"xop", 0x80000001, 0, kEcx, 11, kAvxState},
    {"fma4", 0x80000001, 0, kEcx, 16, kAvxState},
    {"tbm", 0x80000001, 0, kEcx, 21},
    {"rdtscp", 0x80000001, 0, kEdx, 27},
};

bool Cpuid(uint32_t leaf, uint32_t subleaf, uint32_t out[4]) {
  uint32_t max = __get_cpuid_max(leaf & 0x80000000, nullptr);
  if (max < leaf) return false;
  __cpuid_count(leaf, subleaf, out[0], out[1], out[2], out[3]);
  return true;
}

uint64_t Xgetbv() {
  uint32_t eax, edx;
  __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
  return (static_cast<uint64_t>(edx) << 32) | eax;
}

std::string ModelName() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (!absl::StartsWith(line, "model name")) continue;
    size_t colon = line.find(':');
    if (colon != std::string::npos) return std::string(absl::StripAsciiWhitespace(line.substr(colon + 1)));
  }
  return "unknown";
}

Cpu Read() {
  Cpu cpu;
  uint32_t r[4];
  bool osxsave = Cpuid(1, 0, r) && (r[kEcx] >> 27 & 1);
  cpu.xcr0 = osxsave ? Xgetbv() : kXcr0Sse | 1;
  for (const Bit& b : kBits) {
    if (!Cpuid(b.leaf, b.subleaf, r)) continue;
    if (!(r[b.reg] >> b.bit & 1)) continue;
    if ((cpu.xcr0 & b.xcr0) != b.xcr0) continue;  // present, but the kernel did not enable its state
    cpu.features.insert(b.name);
  }
  cpu.level = LevelOf(cpu.features);
  cpu.model = ModelName();
  if (osxsave && Cpuid(0xd, 0, r)) {
    cpu.xsave_size = r[kEbx];  // for the components enabled in XCR0
    for (uint32_t i = 2; i < 64; ++i) {
      if (!(cpu.xcr0 >> i & 1) || !Cpuid(0xd, i, r)) continue;
      cpu.components.push_back({i, r[kEbx], r[kEax]});
    }
  } else {
    cpu.xsave_size = 512;  // FXSAVE's area only
  }
  return cpu;
}

}  // namespace

const Cpu& ThisCpu() {
  static const Cpu cpu = Read();
  return cpu;
}

std::vector<std::pair<std::string, std::string>> BaselineEnvironment(int level, const std::string& existing_tunables) {
  // The names glibc 2.36's glibc.cpu.hwcaps honours (checked with ld.so --list-diagnostics:
  // each changes glibc's active feature bits), with the level that brings each. XSAVEC is in
  // no level (Haswell lacks it; ld.so's lazy-binding trampoline would use it): always off.
  // AVX_Fast_Unaligned_Load is a preference, not a CPU feature: glibc sets it from AVX2 before
  // the tunables apply, and memmove/memcpy pick their AVX versions by it alone — turning AVX2
  // off leaves it on (an x86-64-v2 job died of SIGILL in memmove on a CPU without AVX).
  struct Off {
    const char* name;
    int level;
  };
  constexpr Off kGlibc[] = {
      {"SSSE3", 2},    {"SSE4_1", 2},   {"SSE4_2", 2},   {"POPCNT", 2},   {"AVX", 3},      {"AVX2", 3},
      {"BMI1", 3},     {"BMI2", 3},     {"FMA", 3},      {"LZCNT", 3},    {"MOVBE", 3},    {"XSAVE", 3},
      {"AVX512F", 4},  {"AVX512BW", 4}, {"AVX512CD", 4}, {"AVX512DQ", 4}, {"AVX512VL", 4}, {"XSAVEC", 5},
      {"AVX_Fast_Unaligned_Load", 3},
  };
  std::vector<std::string> off;
  for (const Off& o : kGlibc) {
    if (o.level > level) off.push_back(absl::StrCat("-", o.name));
  }
  std::string hwcaps = absl::StrCat("glibc.cpu.hwcaps=", absl::StrJoin(off, ","));
  std::string tunables = existing_tunables.empty() ? hwcaps : absl::StrCat(existing_tunables, ":", hwcaps);
  // OpenSSL: ~MASK1:~MASK2 clears bits of CPUID.1 (EDX low, ECX high) and CPUID.7.0 (EBX low,
  // ECX high). Every ECX bit of leaf 1 and every bit of leaf 7 outside the level goes.
  uint32_t leaf1_ecx = 0, leaf7_ebx = 0;
  std::set<std::string> keep = LevelFeatures(level);
  for (const Bit& b : kBits) {
    if (!keep.count(b.name)) continue;
    if (b.leaf == 1 && b.reg == kEcx) leaf1_ecx |= 1u << b.bit;
    if (b.leaf == 7 && b.subleaf == 0 && b.reg == kEbx) leaf7_ebx |= 1u << b.bit;
  }
  uint64_t mask1 = static_cast<uint64_t>(~leaf1_ecx) << 32;
  uint64_t mask2 = 0xffffffff00000000ULL | ~leaf7_ebx;
  return {{"GLIBC_TUNABLES", tunables},
          {"OPENSSL_ia32cap", absl::StrCat("~0x", absl::Hex(mask1), ":~0x", absl::Hex(mask2))},
          {kBaselineEnv, LevelName(level)}};
}

}  // namespace cairn::machine
