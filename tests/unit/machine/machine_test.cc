// The machine module's pieces on their own: CPU levels and baselines (with glibc's own view of
// a baseline's tunables), XSAVE areas laid out for another CPU, and the vDSO proxy's jumps.
#include <elf.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "engine/machine/cpu.h"
#include "engine/machine/vdso.h"
#include "engine/machine/xstate.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cairn::machine {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// The output of `command` run by the shell with `env` ("NAME=value") before it.
std::string Output(const std::string& env, const std::string& command) {
  std::string line = env.empty() ? command : absl::StrCat("env '", env, "' ", command);
  FILE* f = ::popen((line + " 2>&1").c_str(), "r");
  if (f == nullptr) return "";
  std::string out;
  char buf[4096];
  for (size_t n; (n = ::fread(buf, 1, sizeof buf, f)) > 0;) out.append(buf, n);
  ::pclose(f);
  return out;
}

TEST(CpuTest, LevelsFollowThePsAbiAndThisCpuHasOne) {
  EXPECT_EQ(LevelOf(LevelFeatures(1)), 1);
  EXPECT_EQ(LevelOf(LevelFeatures(3)), 3);
  std::set<std::string> v4_but_bw = LevelFeatures(4);
  v4_but_bw.erase("avx512bw");
  EXPECT_EQ(LevelOf(v4_but_bw), 3);
  std::set<std::string> v3_but_movbe = LevelFeatures(3);
  v3_but_movbe.erase("movbe");
  EXPECT_EQ(LevelOf(v3_but_movbe), 2);
  const Cpu& cpu = ThisCpu();
  EXPECT_GE(cpu.level, 1);
  EXPECT_EQ(cpu.level, LevelOf(cpu.features));
  EXPECT_TRUE(cpu.features.count("sse2"));
  EXPECT_EQ(Missing({"sse2", "avx9000"}, cpu.features), std::vector<std::string>{"avx9000"});
}

TEST(CpuTest, BaselineNamesAreParsedOrRefused) {
  EXPECT_EQ(*ParseBaseline("x86-64-v2"), 2);
  EXPECT_EQ(*ParseBaseline("V3"), 3);
  EXPECT_EQ(*ParseBaseline("4"), 4);
  auto bad = ParseBaseline("haswell");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("x86-64-v2"));
  EXPECT_FALSE(ParseBaseline("v5").ok());
}

// glibc itself says which glibc-hwcaps levels it will use under a baseline's environment.
TEST(CpuTest, GlibcFollowsTheBaselineEnvironment) {
  if (ThisCpu().level < 3) GTEST_SKIP() << "this CPU is below x86-64-v3: nothing to turn off";
  auto env = BaselineEnvironment(2, "");
  ASSERT_EQ(env.size(), 3u);
  EXPECT_EQ(env[0].first, "GLIBC_TUNABLES");
  EXPECT_THAT(env[0].second, HasSubstr("-AVX2"));
  EXPECT_THAT(env[0].second, HasSubstr("-XSAVEC"));
  EXPECT_THAT(env[0].second, Not(HasSubstr("-SSE4_2")));
  EXPECT_EQ(env[2].second, "x86-64-v2");
  std::string help = Output(absl::StrCat(env[0].first, "=", env[0].second), "/lib64/ld-linux-x86-64.so.2 --help");
  EXPECT_THAT(help, HasSubstr("x86-64-v2 (supported, searched)")) << help;
  EXPECT_THAT(help, Not(HasSubstr("x86-64-v3 (supported, searched)"))) << help;
  // And its string functions: the features and preferences their ifuncs choose by are off
  // (glibc's own view of them, ld.so --list-diagnostics).
  std::string diag =
      Output(absl::StrCat(env[0].first, "=", env[0].second), "/lib64/ld-linux-x86-64.so.2 --list-diagnostics");
  for (const char* bit : {"x86.cpu_features.preferred.AVX_Fast_Unaligned_Load=0x0",
                          "x86.cpu_features.xsave_state_size=0x0"}) {
    EXPECT_THAT(diag, HasSubstr(bit)) << diag;
  }
  EXPECT_THAT(diag, Not(HasSubstr("x86.cpu_features.preferred.AVX_Fast_Unaligned_Load=0x1"))) << diag;
  // Without it, this CPU's own level is searched.
  std::string plain = Output("", "/lib64/ld-linux-x86-64.so.2 --help");
  EXPECT_THAT(plain, HasSubstr("x86-64-v3 (supported, searched)")) << plain;
  // Tunables the caller had are kept.
  EXPECT_THAT(BaselineEnvironment(3, "glibc.malloc.arena_max=2")[0].second,
              HasSubstr("glibc.malloc.arena_max=2:glibc.cpu.hwcaps="));
}

// A standard-format area: legacy 512 bytes, header, then components where `layout` says.
std::string Area(size_t size, uint64_t bv) {
  std::string a(size, '\0');
  std::memcpy(a.data() + 512, &bv, 8);
  return a;
}

TEST(XstateTest, ComponentsMoveToThisCpusOffsetsAndTheHeaderFollows) {
  // Saved: AVX at 576, AVX-512 opmask at 1088, PKRU at 2688; 2696 bytes in all.
  std::vector<XsaveComponent> saved_layout = {{2, 576, 256}, {5, 1088, 64}, {6, 1152, 512}, {7, 1664, 1024},
                                              {9, 2688, 8}};
  std::string saved = Area(2696, 0x3 | 0x4 | 0x200);
  for (int i = 0; i < 160; ++i) saved[32 + i] = static_cast<char>(i);      // SSE registers
  for (int i = 0; i < 256; ++i) saved[576 + i] = static_cast<char>(0x40 + i);  // ymm upper halves
  uint32_t pkru = 0x55555554;
  std::memcpy(saved.data() + 2688, &pkru, 4);
  // Here: AVX only (no AVX-512, no PKRU), with AVX somewhere else to be sure it moves.
  Cpu here;
  here.xcr0 = 0x7;
  here.xsave_size = 1000;
  here.components = {{2, 700, 256}};
  std::string fresh(1000, '\x5a');
  auto fitted = FitXstate(saved, saved_layout, 2696, fresh, here);
  ASSERT_TRUE(fitted.ok()) << fitted.status();
  ASSERT_EQ(fitted->size(), 1000u);
  EXPECT_EQ(fitted->substr(32, 160), saved.substr(32, 160));
  EXPECT_EQ(fitted->substr(700, 256), saved.substr(576, 256));
  uint64_t bv;
  std::memcpy(&bv, fitted->data() + 512, 8);
  EXPECT_EQ(bv, 0x7u) << "the default PKRU is dropped, x87/SSE/AVX kept";
  EXPECT_EQ(fitted->substr(464, 48), fresh.substr(464, 48)) << "the kernel's own note is this kernel's";

  // A PKRU the program changed is refused by name, as are AVX-512 registers in use.
  pkru = 0x55555550;
  std::memcpy(saved.data() + 2688, &pkru, 4);
  auto changed = FitXstate(saved, saved_layout, 2696, fresh, here);
  ASSERT_FALSE(changed.ok());
  EXPECT_THAT(std::string(changed.status().message()), HasSubstr("PKRU"));
  // zmm16-31 marked in use but all zero is their initial state (XSTATE_BV may keep a bit set
  // after the registers were cleared; QEMU's TCG sets them all): not lacking. With a value, lacking.
  std::string zmm = Area(2696, 0x3 | 0x80);
  EXPECT_EQ(ComponentsLacking(zmm, saved_layout, here.xcr0), 0u);
  zmm[1664 + 100] = 1;
  EXPECT_EQ(ComponentsLacking(zmm, saved_layout, here.xcr0), 0x80u);
  EXPECT_THAT(ComponentNames(0x80), HasSubstr("zmm16-31"));
  EXPECT_FALSE(FitXstate(zmm, saved_layout, 2696, fresh, here).ok());

  // The same layout: returned as it is.
  Cpu same;
  same.xcr0 = 0x2e7;
  same.xsave_size = 2696;
  same.components = saved_layout;
  auto kept = FitXstate(saved, saved_layout, 2696, std::string(2696, '\0'), same);
  ASSERT_TRUE(kept.ok());
  EXPECT_EQ(*kept, saved);
  // An older image (no layout recorded): as it is.
  EXPECT_EQ(*FitXstate(saved, {}, 0, fresh, here), saved);
}

// Decodes the jump at `at` of `code` (mapped at `base`): its target.
uint64_t JumpTarget(const std::string& code, uint64_t base, uint64_t at) {
  auto op = static_cast<unsigned char>(code[at]);
  if (op == 0xe9) {
    int32_t rel;
    std::memcpy(&rel, code.data() + at + 1, 4);
    return base + at + 5 + rel;
  }
  if (op == 0xff && static_cast<unsigned char>(code[at + 1]) == 0x25) {
    uint64_t to;
    std::memcpy(&to, code.data() + at + 6, 8);
    return to;
  }
  return 0;
}

TEST(VdsoTest, EveryFunctionOfTheOldVdsoJumpsToTheSameNameInTheNew) {
  const std::string& vdso = ThisVdso();
  if (vdso.empty()) GTEST_SKIP() << "this process has no vDSO";
  auto fns = VdsoFunctions(vdso);
  ASSERT_TRUE(fns.ok()) << fns.status();
  ASSERT_TRUE(fns->count("__vdso_clock_gettime")) << "the x86-64 vDSO exports __vdso_clock_gettime";
  // Near (rel32) and far (absolute) placements of the new vDSO.
  for (uint64_t new_base : {0x7f0000100000ULL, 0x100000000ULL}) {
    uint64_t old_base = 0x7ffff7fc0000ULL;
    auto proxy = VdsoProxy(vdso, old_base, vdso, new_base);
    ASSERT_TRUE(proxy.ok()) << proxy.status();
    ASSERT_EQ(proxy->size(), vdso.size());
    for (const auto& [name, sym] : *fns) {
      EXPECT_EQ(JumpTarget(*proxy, old_base, sym.offset), new_base + sym.offset) << name;
    }
    EXPECT_EQ(proxy->substr(0, 64), vdso.substr(0, 64)) << "the ELF header stays: programs parse it";
  }
  // A function the new vDSO lacks: a time function becomes its system call, any other is refused.
  std::string no_getcpu = vdso;
  size_t at = no_getcpu.find("__vdso_getcpu");
  ASSERT_NE(at, std::string::npos);
  no_getcpu[at + 7] = 'G';  // "__vdso_Getcpu" (and "getcpu" where the linker shares the string)
  auto fallback = VdsoProxy(vdso, 0x7ffff7fc0000ULL, no_getcpu, 0x7f0000100000ULL);
  ASSERT_TRUE(fallback.ok()) << fallback.status();
  uint64_t getcpu_at = fns->at("__vdso_getcpu").offset;
  EXPECT_EQ(static_cast<unsigned char>((*fallback)[getcpu_at]), 0xb8) << "mov $SYS_getcpu, %eax first";
  int32_t nr;
  std::memcpy(&nr, fallback->data() + getcpu_at + 1, 4);
  EXPECT_EQ(nr, SYS_getcpu);
  std::string odd = vdso;
  at = odd.find("__vdso_time");
  ASSERT_NE(at, std::string::npos);
  odd[at + 7] = 'X';  // "__vdso_Xime": no counterpart, no system call of that name
  auto refused = VdsoProxy(odd, 0x7ffff7fc0000ULL, vdso, 0x7f0000100000ULL);
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("Xime"));  // or its alias "Xime"
}

}  // namespace
}  // namespace cairn::machine
