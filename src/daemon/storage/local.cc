// The local store: checkpoints stay where the engine wrote them; and OpenStore.
#include <filesystem>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "daemon/storage/stores.h"

namespace cairn::daemon::storage {
namespace {

class Local : public CheckpointStore {
 public:
  std::string Describe() const override { return "local"; }
  bool Remote() const override { return false; }
  std::string LocationOf(const std::string&, const std::string&) const override { return ""; }
  absl::StatusOr<std::string> Put(const std::string& dir, const std::string&, const std::string&) override { return dir; }
  absl::Status Fetch(const std::string& location, const std::string& dir) override {
    if (location == dir) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat(
        "checkpoint at ", location, " is not in this daemon's local store; start cairnd with the --storage that holds it"));
  }
  absl::Status Remove(const std::string& location) override {
    RemoveLocalTree(location);
    return absl::OkStatus();
  }
  absl::StatusOr<std::vector<std::string>> List(const std::string& job) override {
    return absl::FailedPreconditionError(absl::StrCat(
        "the local store holds only this node's checkpoints of job ", job,
        " (cairn checkpoint list); listing the checkpoints other nodes took needs a shared --storage (dir:/PATH or s3://)"));
  }
};

}  // namespace

void RemoveLocalTree(const std::string& dir) {
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  std::filesystem::remove_all(dir + ".partial", ec);
}

std::unique_ptr<CheckpointStore> LocalStore() { return std::make_unique<Local>(); }

absl::StatusOr<std::unique_ptr<CheckpointStore>> OpenStore(const StoreOptions& opts) {
  if (opts.spec.empty() || opts.spec == "local") return LocalStore();
  if (absl::StartsWith(opts.spec, "dir:")) return DirStore(opts.spec.substr(4));
  if (absl::StartsWith(opts.spec, "s3://")) return S3Store(opts.spec, opts);
  return absl::InvalidArgumentError(absl::StrCat("--storage ", opts.spec,
                                                 ": use local, dir:/PATH (a shared directory) or s3://BUCKET[/PREFIX]"));
}

}  // namespace cairn::daemon::storage
