// Incremental checkpoints of a daemon's jobs: which checkpoint a new one builds on, and the
// chain of checkpoints a restore needs on this node's disk. Retention keeps a kept
// checkpoint's parents (Catalog::CompleteCheckpoint); a parent cannot be deleted alone.

#include <filesystem>
#include <map>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "daemon/daemon.h"
#include "engine/image/format.h"

namespace cairn::daemon {

namespace fs = std::filesystem;

namespace {

constexpr uint32_t kDefaultFullEvery = 8;

}  // namespace

std::string Daemon::IncrementalParent(const std::string& name, const api::JobSpec& spec, std::string* why) {
  auto cps = catalog_->ListCheckpoints(name);
  if (!cps.ok()) {
    *why = absl::StrCat("the catalog could not list the job's checkpoints: ", cps.status().message());
    return "";
  }
  std::map<std::string, const api::Checkpoint*> by_id;
  const api::Checkpoint* newest = nullptr;
  for (const api::Checkpoint& c : *cps) {
    by_id[c.id()] = &c;
    if (c.state() == "complete" && (newest == nullptr || c.created() >= newest->created())) newest = &c;
  }
  if (newest == nullptr) {
    *why = "the job has no checkpoint to build on yet";
    return "";
  }
  // The engine finds a parent next to the new checkpoint's directory.
  if (!fs::exists(CheckpointDir(name) + "/" + newest->id() + "/" + image::kMetaFile)) {
    *why = absl::StrCat("checkpoint ", newest->id(), " is not on this node's disk (a remote --storage keeps a local "
                        "copy with --keep-local-copy)");
    return "";
  }
  uint32_t full_every = spec.checkpoint().full_every() > 0 ? spec.checkpoint().full_every() : kDefaultFullEvery;
  uint32_t length = 1;  // checkpoints in the chain the new one would end
  for (const api::Checkpoint* c = newest; !c->parent().empty(); ++length) {
    auto it = by_id.find(c->parent());
    if (it == by_id.end()) break;
    c = it->second;
  }
  if (length + 1 > full_every) {
    *why = absl::StrCat("a full checkpoint every ", full_every, " (full_every)");
    return "";
  }
  return newest->id();
}

absl::StatusOr<std::string> Daemon::LocalChain(const api::Checkpoint& c, std::vector<std::string>* fetched) {
  std::string dir;
  const api::Checkpoint* at = &c;
  api::Checkpoint parent;
  for (int depth = 0; depth < 1000; ++depth) {
    bool got = false;
    ASSIGN_OR_RETURN(std::string local, LocalCheckpoint(*at, &got));
    if (got) fetched->push_back(local);
    if (dir.empty()) dir = local;
    if (at->parent().empty()) return dir;
    auto p = catalog_->GetCheckpoint(at->parent());
    if (!p.ok()) return p.status();
    if (!p->has_value() || (*p)->state() != "complete") {
      return absl::NotFoundError(absl::StrCat("checkpoint ", at->id(), " builds on checkpoint ", at->parent(),
                                              ", which this node no longer has"));
    }
    parent = **p;
    at = &parent;
  }
  return absl::FailedPreconditionError(absl::StrCat("checkpoint ", c.id(), ": its chain of parents does not end"));
}

std::optional<std::string> Daemon::ChildOf(const std::string& name, const std::string& id) {
  auto cps = catalog_->ListCheckpoints(name);
  if (!cps.ok()) return std::nullopt;
  for (const api::Checkpoint& c : *cps) {
    if (c.parent() == id && c.state() != "failed") return c.id();  // complete, or being written on it
  }
  return std::nullopt;
}

}  // namespace cairn::daemon
