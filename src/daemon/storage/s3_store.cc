// s3://BUCKET[/PREFIX] — checkpoints as objects PREFIX/JOB/ID/FILE, committed by PREFIX/JOB/ID/cairn-manifest.
#include <sys/stat.h>
#include <unistd.h>

#include <fcntl.h>

#include <algorithm>
#include <atomic>
#include <functional>
#include <map>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/file_util.h"
#include "common/status.h"
#include "common/stop_points.h"
#include "daemon/storage/manifest.h"
#include "daemon/storage/s3_client.h"
#include "daemon/storage/stores.h"

namespace cairn::daemon::storage {
namespace {

namespace fs = std::filesystem;

// Splits s3://BUCKET/KEY into bucket and key.
absl::Status SplitUrl(const std::string& url, std::string* bucket, std::string* key) {
  absl::string_view rest(url);
  if (!absl::ConsumePrefix(&rest, "s3://") || rest.empty() || rest[0] == '/') {
    return absl::InvalidArgumentError(absl::StrCat(url, ": not an s3://BUCKET/KEY location"));
  }
  size_t slash = rest.find('/');
  *bucket = std::string(rest.substr(0, slash));
  *key = slash == absl::string_view::npos ? "" : std::string(absl::StripSuffix(rest.substr(slash + 1), "/"));
  return absl::OkStatus();
}

// Reads credentials from an AWS-style credentials file (aws_access_key_id / aws_secret_access_key
// lines; the first of each is taken) that must be root's and unreadable by others.
absl::Status ReadCredentials(const std::string& path, std::string* key, std::string* secret) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return Annotate(ErrnoStatus("stat " + path), "--s3-credentials");
  if (st.st_uid != 0 || (st.st_mode & 077) != 0) {
    return absl::PermissionDeniedError(absl::StrFormat(
        "--s3-credentials %s: must be owned by root and readable by no one else (mode %o, owner uid %d); "
        "chown root %s && chmod 600 %s", path, st.st_mode & 0777, st.st_uid, path, path));
  }
  ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    std::pair<absl::string_view, absl::string_view> kv = absl::StrSplit(line, absl::MaxSplits('=', 1));
    absl::string_view k = absl::StripAsciiWhitespace(kv.first), v = absl::StripAsciiWhitespace(kv.second);
    if (k == "aws_access_key_id" && key->empty()) *key = std::string(v);
    if (k == "aws_secret_access_key" && secret->empty()) *secret = std::string(v);
  }
  if (key->empty() || secret->empty()) {
    return absl::InvalidArgumentError(absl::StrCat("--s3-credentials ", path,
                                                   ": needs lines aws_access_key_id = ... and aws_secret_access_key = ..."));
  }
  return absl::OkStatus();
}

class S3 : public CheckpointStore {
 public:
  S3(S3Config cfg, std::string prefix, int parallel)
      : client_(std::move(cfg)), prefix_(std::move(prefix)), parallel_(parallel) {}

  std::string Describe() const override {
    return absl::StrCat("s3://", client_.config().bucket, prefix_.empty() ? "" : "/", prefix_);
  }
  bool Remote() const override { return true; }
  std::string LocationOf(const std::string& job, const std::string& id) const override {
    return client_.Url(KeyOf(job, id));
  }

  absl::StatusOr<std::string> Put(const std::string& dir, const std::string& job, const std::string& id) override {
    std::string base = KeyOf(job, id);
    absl::Status st = Upload(dir, job, id, base);
    if (!st.ok()) {
      absl::Status cleaned = RemoveKeys(client_, base);
      std::string note = cleaned.ok() ? "; what had reached the store was removed"
                                      : absl::StrCat("; removing what may have reached the store failed too: ", cleaned.message());
      return absl::Status(st.code(), absl::StrCat("store checkpoint ", id, " in ", Describe(), ": ", st.message(), note));
    }
    return client_.Url(base);
  }

  absl::Status Fetch(const std::string& location, const std::string& dir) override {
    std::string bucket, base;
    RETURN_IF_ERROR(SplitUrl(location, &bucket, &base));
    S3Config cfg = client_.config();
    cfg.bucket = bucket;
    S3Client c(cfg);
    std::string partial = dir + ".partial";
    auto attempt = [&]() -> absl::Status {
      auto text = c.GetBytes(base + "/" + kManifestFile);
      if (absl::IsNotFound(text.status())) {
        return absl::NotFoundError(absl::StrCat("checkpoint ", location,
                                                " has no manifest: it is missing or was never completely stored"));
      }
      RETURN_IF_ERROR(text.status());
      ASSIGN_OR_RETURN(Manifest m, Manifest::Parse(*text, location + "/" + kManifestFile));
      RemoveLocalTree(dir);
      std::error_code ec;
      fs::create_directories(partial, ec);
      if (ec) return absl::InternalError(absl::StrCat("create ", partial, ": ", ec.message()));
      std::atomic<bool> first{true};
      RETURN_IF_ERROR(ForEach(m, [&](const ManifestFile& f) {
        std::string dst = partial + "/" + f.path;
        std::error_code e2;
        fs::create_directories(fs::path(dst).parent_path(), e2);
        absl::Status got = c.GetFile(base + "/" + f.path, dst);
        if (got.ok() && first.exchange(false)) FaultPoint("fetch-partial");
        return got;
      }));
      RETURN_IF_ERROR(VerifyDir(partial, m));
      RETURN_IF_ERROR(WriteFileSynced(partial + "/" + kManifestFile, *text));
      RETURN_IF_ERROR(SyncDir(partial));
      if (::rename(partial.c_str(), dir.c_str()) != 0) return ErrnoStatus("rename " + partial + " to " + dir);
      return SyncDir(fs::path(dir).parent_path().string());
    };
    absl::Status st = attempt();
    if (!st.ok()) RemoveLocalTree(dir);
    return Annotate(st, "fetch checkpoint " + location);
  }

  absl::Status Remove(const std::string& location) override {
    std::string bucket, base;
    RETURN_IF_ERROR(SplitUrl(location, &bucket, &base));
    if (base.empty()) return absl::InvalidArgumentError(absl::StrCat(location, ": names a whole bucket"));
    S3Config cfg = client_.config();
    cfg.bucket = bucket;
    return RemoveKeys(S3Client(cfg), base);
  }

  absl::StatusOr<std::vector<std::string>> List(const std::string& job) override {
    std::string base = KeyOf(job, "");  // PREFIX/JOB/
    ASSIGN_OR_RETURN(std::vector<S3Object> objects, client_.List(base));
    std::vector<std::string> ids;
    const std::string tail = std::string("/") + kManifestFile;
    for (const S3Object& o : objects) {
      if (!absl::EndsWith(o.key, tail)) continue;
      std::string id = o.key.substr(base.size(), o.key.size() - base.size() - tail.size());
      if (!id.empty() && id.find('/') == std::string::npos) ids.push_back(id);
    }
    std::sort(ids.begin(), ids.end());
    return ids;
  }

 private:
  std::string KeyOf(const std::string& job, const std::string& id) const {
    return absl::StrCat(prefix_, prefix_.empty() ? "" : "/", job, "/", id);
  }

  // Runs `fn` over the manifest's files on up to `parallel_` threads; the first error wins.
  absl::Status ForEach(const Manifest& m, const std::function<absl::Status(const ManifestFile&)>& fn) {
    std::atomic<size_t> next{0};
    std::mutex mu;
    absl::Status err;
    auto work = [&] {
      for (size_t i; (i = next++) < m.files.size();) {
        {
          std::lock_guard<std::mutex> l(mu);
          if (!err.ok()) return;
        }
        absl::Status st = fn(m.files[i]);
        std::lock_guard<std::mutex> l(mu);
        if (!st.ok() && err.ok()) err = st;
      }
    };
    std::vector<std::thread> threads;
    size_t n = std::min<size_t>(static_cast<size_t>(std::max(1, parallel_)), m.files.size());
    for (size_t k = 1; k < n; ++k) threads.emplace_back(work);
    work();
    for (auto& t : threads) t.join();
    return err;
  }

  absl::Status Upload(const std::string& dir, const std::string& job, const std::string& id, const std::string& base) {
    ASSIGN_OR_RETURN(Manifest m, ManifestOf(dir, job, id));
    // Large files one after another, each in parts sent `parallel` at a time; then the small
    // ones, `parallel` files at a time: never more than `parallel` requests at once.
    Manifest small = m;
    small.files.clear();
    std::atomic<bool> first{true};
    auto put = [&](const ManifestFile& f) {
      absl::Status st = client_.PutFile(base + "/" + f.path, dir + "/" + f.path);
      if (st.ok() && first.exchange(false)) FaultPoint("upload-partial");
      return st;
    };
    for (const ManifestFile& f : m.files) {
      if (f.size > client_.config().part_bytes) {
        RETURN_IF_ERROR(put(f));
      } else {
        small.files.push_back(f);
      }
    }
    RETURN_IF_ERROR(ForEach(small, put));
    // Read back what the store holds: every file there, with its size, before the manifest
    // commits the checkpoint.
    ASSIGN_OR_RETURN(std::vector<S3Object> objects, client_.List(base + "/"));
    std::map<std::string, uint64_t> held;
    for (const S3Object& o : objects) held[o.key] = o.size;
    for (const ManifestFile& f : m.files) {
      auto it = held.find(base + "/" + f.path);
      if (it == held.end() || it->second != f.size) {
        return absl::DataLossError(absl::StrCat(client_.Url(base + "/" + f.path), ": ",
                                                it == held.end() ? "missing" : absl::StrCat(it->second, " bytes"),
                                                " after the upload of ", f.size, " bytes"));
      }
    }
    FaultPoint("upload-before-manifest");
    return client_.PutBytes(base + "/" + kManifestFile, m.Serialize());
  }

  // Deletes every object under BASE/, the manifest first.
  static absl::Status RemoveKeys(S3Client c, const std::string& base) {
    RETURN_IF_ERROR(c.Delete(base + "/" + kManifestFile));
    ASSIGN_OR_RETURN(std::vector<S3Object> objects, c.List(base + "/"));
    for (const S3Object& o : objects) RETURN_IF_ERROR(c.Delete(o.key));
    return absl::OkStatus();
  }

  S3Client client_;
  std::string prefix_;
  int parallel_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<CheckpointStore>> S3Store(const std::string& url, const StoreOptions& opts) {
  S3Config cfg;
  std::string prefix;
  RETURN_IF_ERROR(Annotate(SplitUrl(url, &cfg.bucket, &prefix), "--storage"));
  cfg.region = opts.s3_region.empty() ? "us-east-1" : opts.s3_region;
  cfg.endpoint = opts.s3_endpoint.empty() ? absl::StrCat("https://s3.", cfg.region, ".amazonaws.com") : opts.s3_endpoint;
  if (!absl::StartsWith(cfg.endpoint, "http://") && !absl::StartsWith(cfg.endpoint, "https://")) {
    return absl::InvalidArgumentError(absl::StrCat("--s3-endpoint ", cfg.endpoint, ": give a URL, http(s)://HOST[:PORT]"));
  }
  if (!opts.s3_credentials_file.empty()) {
    RETURN_IF_ERROR(ReadCredentials(opts.s3_credentials_file, &cfg.access_key, &cfg.secret_key));
  } else {
    const char* k = std::getenv("AWS_ACCESS_KEY_ID");
    const char* s = std::getenv("AWS_SECRET_ACCESS_KEY");
    if (k == nullptr || s == nullptr || !*k || !*s) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--storage ", url, ": no S3 credentials: give --s3-credentials FILE (root's, mode 0600) or set "
          "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"));
    }
    cfg.access_key = k;
    cfg.secret_key = s;
  }
  cfg.parallel = std::max(1, opts.parallel);
  cfg.part_bytes = std::max<uint64_t>(opts.part_bytes, 5ull << 20);  // S3's smallest part
  return std::unique_ptr<CheckpointStore>(new S3(std::move(cfg), std::move(prefix), opts.parallel));
}

}  // namespace cairn::daemon::storage
