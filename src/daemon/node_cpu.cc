#include "daemon/node_cpu.h"

#include <cstdlib>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/cpu_levels.h"
#include "engine/machine/cpu.h"

namespace cairn::daemon {

std::set<std::string> NodeCpuFeatures() {
  std::set<std::string> features = machine::ThisCpu().features;
  if (const char* lacks = std::getenv("CAIRND_TEST_CPU_LACKS"); lacks != nullptr) {
    for (absl::string_view f : absl::StrSplit(lacks, ',', absl::SkipEmpty())) features.erase(std::string(f));
  }
  return features;
}

std::string CpuMismatch(int baseline, const std::set<std::string>& here, const std::set<std::string>& there,
                        const std::string& node) {
  if (there.empty()) return "";
  const std::set<std::string> need = baseline > 0 ? LevelFeatures(baseline) : here;
  std::vector<std::string> missing = Missing(need, there);
  if (missing.empty()) return "";
  int common = std::max(1, std::min(LevelOf(here), LevelOf(there)));
  if (baseline > 0) {
    return absl::StrCat("node ", node, "'s CPU (", LevelName(LevelOf(there)), ") lacks ", absl::StrJoin(missing, ", "),
                        ", which the job's baseline ", LevelName(baseline), " has: move it to a ", LevelName(baseline),
                        " node");
  }
  return absl::StrCat("node ", node, "'s CPU (", LevelName(LevelOf(there)), ") lacks ", absl::StrJoin(missing, ", "),
                      ", which the job may use (it started on this node's ", LevelName(LevelOf(here)),
                      " CPU; there it would die of SIGILL): move it to a node whose CPU has them, or start it with "
                      "--cpu-baseline ", LevelName(common), " so that it can go to any ", LevelName(common), " node");
}

}  // namespace cairn::daemon
