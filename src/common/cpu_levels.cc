#include "common/cpu_levels.h"

#include <algorithm>
#include <iterator>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace cairn {

std::set<std::string> LevelFeatures(int level) {
  std::set<std::string> f = {"fpu", "cx8", "cmov", "mmx", "fxsr", "sse", "sse2"};
  if (level >= 2) f.insert({"cx16", "lahf_lm", "popcnt", "sse3", "sse4_1", "sse4_2", "ssse3"});
  if (level >= 3) f.insert({"avx", "avx2", "bmi1", "bmi2", "f16c", "fma", "lzcnt", "movbe", "xsave", "osxsave"});
  if (level >= 4) f.insert({"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"});
  return f;
}

int LevelOf(const std::set<std::string>& features) {
  int level = 0;
  for (int l = 1; l <= 4; ++l) {
    if (!Missing(LevelFeatures(l), features).empty()) break;
    level = l;
  }
  return level;
}

absl::StatusOr<int> ParseBaseline(const std::string& text) {
  std::string lower = absl::AsciiStrToLower(text);
  absl::string_view t = lower;
  absl::ConsumePrefix(&t, "x86-64-");
  absl::ConsumePrefix(&t, "v");
  if (t.size() == 1 && t[0] >= '1' && t[0] <= '4') return t[0] - '0';
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown CPU baseline '", text, "': use x86-64-v1, x86-64-v2, x86-64-v3 or x86-64-v4 (the psABI levels: v2 ",
      "adds SSE4.2 and POPCNT, v3 AVX2, BMI2 and FMA, v4 AVX-512)"));
}

std::string LevelName(int level) { return absl::StrCat("x86-64-v", level); }

std::vector<std::string> Missing(const std::set<std::string>& need, const std::set<std::string>& have) {
  std::vector<std::string> out;
  std::set_difference(need.begin(), need.end(), have.begin(), have.end(), std::back_inserter(out));
  return out;
}

}  // namespace cairn
