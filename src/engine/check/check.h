#pragma once
// `cairn check`: which kernel features the engine needs, and whether this machine has them.

#include <string>
#include <vector>

namespace cairn::check {

struct Feature {
  std::string name;
  std::string needed_for;
  bool ok = false;
  std::string detail;  // why it failed, or what was found
};

// Probes every feature (forks short-lived helper processes for the ptrace checks).
std::vector<Feature> ProbeFeatures();

}  // namespace cairn::check
