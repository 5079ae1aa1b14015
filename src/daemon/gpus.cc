// The node's GPUs handed to jobs (JobSpec.gpus, Job.gpu_devices): which are free, which job holds
// which, and the check a restore of a GPU job makes. The node's GPUs are the ones NVML found
// (node_signals.cc); a job holds its devices while it starts, runs, is checkpointed, restored or
// migrates away.
#include <map>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "daemon/daemon.h"

namespace cairn::daemon {
namespace {

bool HoldsItsGpus(const api::Job& j) {
  const std::string& s = j.state();
  return s == "starting" || s == "running" || s == "checkpointing" || s == "restoring" || s == "migrating";
}

}  // namespace

int Daemon::NodeGpuCount() {
  std::lock_guard<std::mutex> l(node_mu_);
  return static_cast<int>(gpus_.size());
}

namespace {

// GPU index -> the job holding it, of `jobs` but `except`.
template <typename Jobs>
std::map<int, std::string> Holders(const Jobs& jobs, const std::string& except) {
  std::map<int, std::string> out;
  for (const auto& [name, s] : jobs) {
    if (name == except) continue;
    for (int d : s.reserved_gpus) out[d] = name;
    if (!HoldsItsGpus(s.job)) continue;
    for (int d : s.job.gpu_devices()) out[d] = name;
  }
  return out;
}

std::string Held(const std::map<int, std::string>& holders) {
  std::vector<std::string> parts;
  for (const auto& [d, job] : holders) parts.push_back(absl::StrCat("GPU ", d, " by job ", job));
  return parts.empty() ? "" : absl::StrCat(" (held: ", absl::StrJoin(parts, ", "), ")");
}

}  // namespace

absl::StatusOr<std::vector<int>> Daemon::PickGpusLocked(const std::string& name, int n, int node_gpus) {
  std::map<int, std::string> holders = Holders(jobs_, name);
  std::vector<int> free;
  for (int d = 0; d < node_gpus; ++d) {
    if (holders.count(d) == 0) free.push_back(d);
  }
  if (static_cast<int>(free.size()) < n) {
    if (node_gpus == 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          "job ", name, " asks for ", n, " GPU", n == 1 ? "" : "s", "; node ", opts_.node,
          " has none that cairnd can see (NVML: cairn node info says why); run it on a GPU node"));
    }
    return absl::FailedPreconditionError(absl::StrCat("job ", name, " asks for ", n, " GPU", n == 1 ? "" : "s",
                                                      "; node ", opts_.node, " has ", node_gpus, ", ", free.size(),
                                                      " free", Held(holders)));
  }
  free.resize(static_cast<size_t>(n));
  return free;
}

bool Daemon::GpusFreeLocked(const std::string& name, const google::protobuf::RepeatedField<int32_t>& devices,
                            int node_gpus) {
  std::map<int, std::string> holders = Holders(jobs_, name);
  for (int d : devices) {
    if (d >= node_gpus || holders.count(d) != 0) return false;
  }
  return true;
}

}  // namespace cairn::daemon
