// cairnd's side of checkpoint storage (storage/storage.h): storing a committed checkpoint,
// bringing one back for a restore, removing one, and importing one another node took.
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "common/file_util.h"
#include "common/log.h"
#include "common/status.h"
#include "common/stop_points.h"
#include "common/unique_fd.h"
#include "daemon/cgroup.h"
#include "daemon/daemon.h"
#include "daemon/job_spec_check.h"
#include "daemon/migrate.h"
#include "daemon/storage/manifest.h"
#include "engine/image/format.h"
#include "engine/image/chain.h"
#include "engine/image/image.h"
#include "engine/image/seal.h"
#include "engine/job/job.h"

namespace cairn::daemon {
namespace {

namespace fs = std::filesystem;

absl::StatusOr<std::string> MetaChecksum(const std::string& dir) {
  ASSIGN_OR_RETURN(std::string meta, ReadFile(dir + "/" + image::kMetaFile));
  return absl::StrFormat("xxh3:%016x", image::Checksum(meta.data(), meta.size()));
}


}  // namespace

absl::Status Daemon::StoreCheckpoint(api::Checkpoint& c, const api::JobSpec& spec) {
  if (!opts_.store->Remote()) return absl::OkStatus();
  std::string local = c.location();
  RETURN_IF_ERROR(WriteFileSynced(local + "/" + storage::kJobSpecFile, spec.SerializeAsString()));
  // The spec says as whom the job comes back (its user): the image's seal does not cover it,
  // so it gets one of its own, bound to the image's (image/seal.h).
  if (opts_.image_key) RETURN_IF_ERROR(image::SealSideFile(local, storage::kJobSpecFile, *opts_.image_key));
  RETURN_IF_ERROR(WriteFileSynced(local + "/" + storage::kJobDirFile, JobDir(c.job())));
  if (opts_.image_key) RETURN_IF_ERROR(image::SealSideFile(local, storage::kJobDirFile, *opts_.image_key));
  FaultPoint("upload-begun");
  auto start = std::chrono::steady_clock::now();
  ASSIGN_OR_RETURN(std::string location, opts_.store->Put(local, c.job(), c.id()));
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  spdlog::info("stored checkpoint={} job={} bytes={} in={} seconds={:.3f} MiB/s={:.1f}", c.id(), c.job(), c.size_bytes(),
               location, secs, secs > 0 ? static_cast<double>(c.size_bytes()) / secs / (1 << 20) : 0.0);
  if (!opts_.keep_local) {
    std::error_code ec;
    fs::remove_all(local, ec);
  }
  c.set_location(location);
  // Stored and checked, but the row still says `writing`: a restart removes it from the store.
  FaultPoint("upload-stored");
  return absl::OkStatus();
}

absl::StatusOr<std::string> Daemon::LocalCheckpoint(const api::Checkpoint& c, bool* fetched) {
  *fetched = false;
  std::string local = CheckpointDir(c.job()) + "/" + c.id();
  if (c.location() == local) return local;  // the local store (or a checkpoint taken before a --storage change)
  if (fs::exists(local + "/" + image::kMetaFile)) {
    auto sum = MetaChecksum(local);
    if (sum.ok() && (c.checksum().empty() || *sum == c.checksum())) return local;  // the kept local copy
    CAIRN_LOG_WARN("checkpoint={} local copy {} does not match the catalog's checksum; fetching it again", c.id(), local);
  }
  std::error_code ec;
  fs::create_directories(CheckpointDir(c.job()), ec);
  RETURN_IF_ERROR(opts_.store->Fetch(c.location(), local));
  *fetched = true;
  ASSIGN_OR_RETURN(std::string sum, MetaChecksum(local));
  if (!c.checksum().empty() && sum != c.checksum()) {
    fs::remove_all(local, ec);
    return absl::DataLossError(absl::StrCat("checkpoint ", c.id(), " fetched from ", c.location(), " has metadata checksum ",
                                            sum, ", but the catalog recorded ", c.checksum()));
  }
  return local;
}

absl::Status Daemon::DropCheckpointFiles(const api::Checkpoint& c, bool from_store) {
  std::error_code ec;
  std::string local = CheckpointDir(c.job()) + "/" + c.id();
  fs::remove_all(local, ec);
  fs::remove_all(local + ".partial", ec);
  if (!from_store || !opts_.store->Remote() || c.reason() == "imported") return absl::OkStatus();
  // A row still 'writing' points at the engine's directory; its objects (if any) are where the
  // store would have put them.
  std::string remote = c.location() == local ? opts_.store->LocationOf(c.job(), c.id()) : c.location();
  absl::Status st = opts_.store->Remove(remote);
  if (!st.ok()) CAIRN_LOG_WARN("checkpoint={} not removed from {}: {}", c.id(), remote, std::string(st.message()));
  return st;
}

absl::Status Daemon::AdoptForThisNode(const std::string& name, const std::string& dir) {
  // Only a checkpoint that went through the store has it (older ones neither): as it was.
  if (::access((dir + "/" + storage::kJobDirFile).c_str(), F_OK) != 0) return absl::OkStatus();
  absl::StatusOr<std::string> from = opts_.image_key
                                         ? image::ReadSealedSideFile(dir, storage::kJobDirFile, *opts_.image_key)
                                         : ReadFile(dir + "/" + storage::kJobDirFile);
  if (!from.ok()) return from.status();
  const std::string to = JobDir(name);
  if (*from == to) return absl::OkStatus();
  // The image is checked before it is changed: its seal then covers only what was checked.
  if (opts_.image_key) RETURN_IF_ERROR(image::CheckSeal(dir, *opts_.image_key));
  for (const char* log : kJobLogs) {  // the job writes on to this node's logs (appending)
    std::string path = to + "/" + log;
    UniqueFd f(::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, kJobLogMode));
    if (!f.valid()) return ErrnoStatus("create " + path);
  }
  RETURN_IF_ERROR(RewriteForNode(dir, *from, to, CgroupOf(name), EngineName(name)));
  RETURN_IF_ERROR(WriteFileSynced(dir + "/" + storage::kJobDirFile, to));
  if (opts_.image_key) {  // sealed again: the image's seal, then its side files' (bound to it)
    ::unlink((dir + "/" + image::kSealFile).c_str());
    RETURN_IF_ERROR(image::SealImage(dir, *opts_.image_key));
    for (const char* side : {storage::kJobSpecFile, storage::kJobDirFile}) {
      if (::access((dir + "/" + side).c_str(), F_OK) != 0) continue;
      ::unlink((dir + "/" + side + ".seal").c_str());
      RETURN_IF_ERROR(image::SealSideFile(dir, side, *opts_.image_key));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> Daemon::ImportCheckpoint(const std::string& name, const std::string& from, int depth) {
  if (depth > image::kMaxChainLength) {
    return absl::DataLossError(absl::StrCat(from, ": a chain of parents longer than ", image::kMaxChainLength,
                                            " (a loop?)"));
  }
  RETURN_IF_ERROR(job::CheckName(name));
  RETURN_IF_ERROR(CheckEngineName(name));
  std::string id(absl::StripSuffix(from, "/"));
  id = id.substr(id.find_last_of('/') + 1);
  RETURN_IF_ERROR(job::CheckName(id));
  if (auto known = catalog_->GetCheckpoint(id); known.ok() && known->has_value() && (*known)->state() == "complete") {
    if ((*known)->job() != name) {
      return absl::AlreadyExistsError(absl::StrCat("checkpoint ", id, " is already known here as one of job ", (*known)->job()));
    }
    return id;  // already here (this node took it, or imported it before)
  }
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = jobs_.find(name);
    if (it != jobs_.end() && (it->second.busy || it->second.job.state() == "running")) {
      return absl::FailedPreconditionError(absl::StrCat("job ", name, " runs or is busy on node ", opts_.node,
                                                        ": kill it first (cairn job kill ", name, ")"));
    }
  }
  std::string local = CheckpointDir(name) + "/" + id;
  std::error_code ec;
  fs::create_directories(CheckpointDir(name), ec);
  RETURN_IF_ERROR(Annotate(opts_.store->Fetch(from, local), "restore --from"));
  auto cleanup = [&](absl::Status st) {
    fs::remove_all(local, ec);
    return st;
  };
  api::JobSpec spec;
  absl::StatusOr<std::string> spec_bytes =
      opts_.image_key ? image::ReadSealedSideFile(local, storage::kJobSpecFile, *opts_.image_key)
                      : ReadFile(local + "/" + storage::kJobSpecFile);
  if (!spec_bytes.ok() && opts_.image_key && !absl::IsNotFound(spec_bytes.status())) {
    return cleanup(Annotate(spec_bytes.status(), absl::StrCat("restore --from ", from, ": the job spec stored with it")));
  }
  if (!spec_bytes.ok() || !spec.ParseFromString(*spec_bytes)) {
    return cleanup(absl::DataLossError(absl::StrCat(from, ": no readable job spec (", storage::kJobSpecFile,
                                                    "): not a checkpoint stored by cairnd")));
  }
  spec.set_name(name);
  if (absl::Status bad = CheckJobSpec(spec); !bad.ok()) {
    return cleanup(Annotate(bad, absl::StrCat(from, ": the job spec stored with it")));
  }
  api::Checkpoint c;
  c.set_id(id);
  c.set_job(name);
  c.set_state("complete");
  c.set_location(from);
  c.set_reason("imported");
  c.set_created(absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch()));
  int64_t bytes = 0;
  for (auto it = fs::recursive_directory_iterator(local, ec); !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (it->is_regular_file(ec)) bytes += static_cast<int64_t>(it->file_size(ec));
  }
  c.set_size_bytes(bytes);
  auto sum = MetaChecksum(local);
  if (!sum.ok()) return cleanup(sum.status());
  c.set_checksum(*sum);
  // An incremental checkpoint comes with the chain it builds on, stored beside it.
  auto image = image::ImageReader::Open(local);
  if (!image.ok()) return cleanup(Annotate(image.status(), absl::StrCat("restore --from ", from)));
  if (std::string parent = (*image)->meta().parent().dir(); !parent.empty()) {
    // A plain name next to this checkpoint in the store: nothing from the image names a path.
    if (absl::Status bad = image::CheckParentName(parent); !bad.ok()) return cleanup(Annotate(bad, from));
    if (parent == id) return cleanup(absl::DataLossError(absl::StrCat(from, ": the checkpoint names itself as its parent")));
    std::string from_dir(absl::StripSuffix(from, "/"));
    std::string parent_from = from_dir.substr(0, from_dir.find_last_of('/') + 1) + parent;
    auto imported = ImportCheckpoint(name, parent_from, depth + 1);
    if (!imported.ok()) {
      return cleanup(Annotate(imported.status(), absl::StrCat(from, " builds on ", parent_from)));
    }
    c.set_parent(parent);
  }
  {
    std::lock_guard<std::mutex> l(mu_);
    if (!jobs_.count(name)) {
      JobState s;
      s.job.set_name(name);
      *s.job.mutable_spec() = spec;
      s.job.set_state("exited");
      s.job.set_node(opts_.node);
      s.job.set_created(c.created());
      s.job.set_dir(JobDir(name));
      s.job.mutable_health()->set_state("exited");
      s.job.mutable_health()->set_detail("imported from " + from + "; not restored yet");
      s.tracker = std::make_unique<HealthTracker>(spec.health());
      if (absl::Status st = PrepareJobDir(name); !st.ok()) return cleanup(st);
      if (absl::Status st = Persist(s); !st.ok()) return cleanup(st);
      jobs_.emplace(name, std::move(s));
    }
  }
  if (absl::Status st = catalog_->PutCheckpoint(c); !st.ok()) return cleanup(st);
  Event(name, "checkpoint-imported", absl::StrCat("checkpoint ", id, " from ", from));
  return id;
}

bool Daemon::FreezeJob(const std::string& name) {
  std::string state = "/sys/fs/cgroup/freezer/" + CgroupOf(name) + "/freezer.state";
  int fd = ::open(state.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  bool ok = ::write(fd, "FROZEN", 6) == 6;
  ::close(fd);
  for (int i = 0; ok && i < 200; ++i) {
    auto now = ReadFile(state);
    if (now.ok() && absl::StripAsciiWhitespace(*now) == "FROZEN") return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (ok) ThawFreezer(CgroupOf(name));
  return false;
}

}  // namespace cairn::daemon
