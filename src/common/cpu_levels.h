// The x86-64 micro-architecture levels (the psABI's x86-64-v1..v4) and the CPU feature names
// cairn uses for them: what the engine records of a CPU (engine/machine/cpu.h), what a job
// started with --cpu-baseline keeps to, and what the controller's placement compares between
// nodes. Names are Linux's /proc/cpuinfo flags, but sse3 (pni), lzcnt (abm) and sha (sha_ni).
#pragma once

#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace cairn {

// The features level 1..4 requires, each level including the ones below.
std::set<std::string> LevelFeatures(int level);
// The highest level all of whose features are in `features` (0: not even v1).
int LevelOf(const std::set<std::string>& features);
// "x86-64-v2", "v2" or "2" → 2 (1..4); anything else is refused, saying what is accepted.
absl::StatusOr<int> ParseBaseline(const std::string& text);
std::string LevelName(int level);  // "x86-64-v3"
// Features in `need` that `have` lacks, sorted.
std::vector<std::string> Missing(const std::set<std::string>& need, const std::set<std::string>& have);

}  // namespace cairn
