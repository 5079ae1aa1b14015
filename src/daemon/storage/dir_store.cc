// dir:/PATH — checkpoints copied to PATH/JOB/ID, a directory other nodes may share (NFS).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/file_util.h"
#include "common/status.h"
#include "common/stop_points.h"
#include "common/unique_fd.h"
#include "daemon/storage/manifest.h"
#include "daemon/storage/stores.h"

namespace cairn::daemon::storage {
namespace {

namespace fs = std::filesystem;

// Copies `from` to `to` (created 0600) and fsyncs it.
absl::Status CopySynced(const std::string& from, const std::string& to) {
  UniqueFd in(::open(from.c_str(), O_RDONLY | O_CLOEXEC));
  if (!in.valid()) return ErrnoStatus("open " + from);
  UniqueFd out(::open(to.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
  if (!out.valid()) return ErrnoStatus("create " + to);
  std::string buf(1 << 20, '\0');
  while (true) {
    ssize_t n = ::read(in.get(), buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoStatus("read " + from);
    if (n == 0) break;
    RETURN_IF_ERROR(WriteAll(out.get(), absl::string_view(buf.data(), static_cast<size_t>(n)), to));
  }
  if (::fsync(out.get()) != 0) return ErrnoStatus("fsync " + to);
  return absl::OkStatus();
}

// Copies the files `m` names from `from` into `to` (created), fsyncing files and directories.
// `fault`: the fault point (common/stop_points.h) passed once the first file is copied.
absl::Status CopyFiles(const std::string& from, const std::string& to, const Manifest& m, const char* fault) {
  std::error_code ec;
  fs::create_directories(to, ec);
  if (ec) return absl::InternalError(absl::StrCat("create ", to, ": ", ec.message()));
  for (const ManifestFile& f : m.files) {
    std::string dst = to + "/" + f.path;
    fs::create_directories(fs::path(dst).parent_path(), ec);
    RETURN_IF_ERROR(CopySynced(from + "/" + f.path, dst));
    if (&f == &m.files.front()) FaultPoint(fault);
  }
  return SyncDir(to);
}

class Dir : public CheckpointStore {
 public:
  explicit Dir(std::string root) : root_(std::move(root)) {}
  std::string Describe() const override { return "dir:" + root_; }
  bool Remote() const override { return true; }
  std::string LocationOf(const std::string& job, const std::string& id) const override {
    return absl::StrCat(root_, "/", job, "/", id);
  }

  absl::StatusOr<std::string> Put(const std::string& dir, const std::string& job, const std::string& id) override {
    std::string dst = LocationOf(job, id), partial = dst + ".partial";
    auto attempt = [&]() -> absl::Status {
      ASSIGN_OR_RETURN(Manifest m, ManifestOf(dir, job, id));
      RemoveLocalTree(dst);
      RETURN_IF_ERROR(CopyFiles(dir, partial, m, "upload-partial"));
      // Read back what the store holds before calling it stored.
      RETURN_IF_ERROR(VerifyDir(partial, m));
      FaultPoint("upload-before-manifest");
      UniqueFd mf(::open((partial + "/" + kManifestFile).c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
      if (!mf.valid()) return ErrnoStatus("create the manifest in " + partial);
      RETURN_IF_ERROR(WriteAll(mf.get(), m.Serialize(), partial + "/" + kManifestFile));
      if (::fsync(mf.get()) != 0) return ErrnoStatus("fsync the manifest in " + partial);
      RETURN_IF_ERROR(SyncDir(partial));
      if (::rename(partial.c_str(), dst.c_str()) != 0) return ErrnoStatus("rename " + partial + " to " + dst);
      return SyncDir(root_ + "/" + job);
    };
    absl::Status st = attempt();
    if (!st.ok()) {
      RemoveLocalTree(dst);
      return Annotate(st, absl::StrCat("store checkpoint ", id, " in ", Describe()));
    }
    return dst;
  }

  absl::Status Fetch(const std::string& location, const std::string& dir) override {
    std::string partial = dir + ".partial";
    auto attempt = [&]() -> absl::Status {
      auto text = ReadFile(location + "/" + kManifestFile);
      if (!text.ok()) {
        return absl::NotFoundError(absl::StrCat("checkpoint ", location, " has no manifest: it is missing or was never completely stored"));
      }
      ASSIGN_OR_RETURN(Manifest m, Manifest::Parse(*text, location + "/" + kManifestFile));
      RemoveLocalTree(dir);
      RETURN_IF_ERROR(CopyFiles(location, partial, m, "fetch-partial"));
      RETURN_IF_ERROR(VerifyDir(partial, m));
      RETURN_IF_ERROR(CopySynced(location + "/" + kManifestFile, partial + "/" + kManifestFile));
      if (::rename(partial.c_str(), dir.c_str()) != 0) return ErrnoStatus("rename " + partial + " to " + dir);
      return SyncDir(fs::path(dir).parent_path().string());
    };
    absl::Status st = attempt();
    if (!st.ok()) RemoveLocalTree(dir);
    return st;
  }

  absl::Status Remove(const std::string& location) override {
    if (!absl::StartsWith(location, root_ + "/")) {
      return absl::InvalidArgumentError(absl::StrCat(location, " is not in ", Describe()));
    }
    ::unlink((location + "/" + kManifestFile).c_str());  // not complete from here on
    RemoveLocalTree(location);
    return absl::OkStatus();
  }

  absl::StatusOr<std::vector<std::string>> List(const std::string& job) override {
    std::vector<std::string> ids;
    std::error_code ec;
    std::string dir = root_ + "/" + job;
    if (!fs::exists(dir, ec)) return ids;
    for (auto it = fs::directory_iterator(dir, ec); !ec && it != fs::directory_iterator(); it.increment(ec)) {
      std::string id = it->path().filename().string();
      if (absl::EndsWith(id, ".partial") || !fs::exists(it->path() / kManifestFile)) continue;
      ids.push_back(id);
    }
    if (ec) return absl::InternalError(absl::StrCat("list ", dir, ": ", ec.message()));
    std::sort(ids.begin(), ids.end());
    return ids;
  }

 private:
  std::string root_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<CheckpointStore>> DirStore(const std::string& root_in) {
  std::string root = root_in;
  while (root.size() > 1 && root.back() == '/') root.pop_back();
  struct stat st;
  if (root.empty() || root[0] != '/' || ::stat(root.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat("--storage dir:", root_in,
                                                   ": not an existing directory given by an absolute path (mount or create it first)"));
  }
  return std::unique_ptr<CheckpointStore>(new Dir(root));
}

}  // namespace cairn::daemon::storage
