// What user code can see of this machine's CPU: the instruction-set features that glibc,
// compilers' function multi-versioning and libraries such as OpenSSL choose code paths by
// (CPUID, gated by what the kernel enabled in XCR0), the x86-64 micro-architecture level they
// add up to, and the layout of the XSAVE area that the kernel's NT_X86_XSTATE regset uses.
//
// A process picks its code paths once, at start-up, from what its CPU had: restored on a CPU
// without one of them it dies of SIGILL at the first such instruction. So a checkpoint records
// these facts (image.proto `Machine`) and restore compares them before touching anything.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/cpu_levels.h"

namespace cairn::machine {

// One component of the standard-format XSAVE area (CPUID leaf 0xD, sub-leaf `index`).
struct XsaveComponent {
  uint32_t index = 0;
  uint32_t offset = 0;
  uint32_t size = 0;
};

struct Cpu {
  std::set<std::string> features;  // usable by user code, lower-case names (avx2, avx512f, lahf_lm...)
  int level = 1;                   // x86-64-v1..v4
  std::string model;               // /proc/cpuinfo "model name", for messages
  uint64_t xcr0 = 0;               // the state components the kernel enabled
  uint32_t xsave_size = 0;         // of the standard-format area for xcr0's components
  std::vector<XsaveComponent> components;  // 2.. of xcr0 (0 and 1 are the legacy area)
};

// This machine's CPU, read once (CPUID, XGETBV).
const Cpu& ThisCpu();

// The level vocabulary (LevelFeatures, LevelOf, ParseBaseline, LevelName, Missing) is
// common/cpu_levels.h, shared with the controller.
using ::cairn::LevelFeatures;
using ::cairn::LevelName;
using ::cairn::LevelOf;
using ::cairn::Missing;
using ::cairn::ParseBaseline;

// What a process started to use only the features of `level` gets in its environment:
// GLIBC_TUNABLES (glibc.cpu.hwcaps: glibc's own string functions, its lazy-binding trampoline
// and the glibc-hwcaps library directories then follow the level) and OPENSSL_ia32cap
// (OpenSSL's own CPU dispatch). `existing_tunables` (the caller's GLIBC_TUNABLES) is kept.
std::vector<std::pair<std::string, std::string>> BaselineEnvironment(int level, const std::string& existing_tunables);
// The environment variable a baseline job carries, naming its level ("x86-64-v2"): a dump
// reads it from the process to know what the job may use.
inline constexpr char kBaselineEnv[] = "CAIRN_CPU_BASELINE";

}  // namespace cairn::machine
