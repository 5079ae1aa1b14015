#include "daemon/storage/manifest.h"

#include <fcntl.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <filesystem>
#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/status.h"
#include "common/unique_fd.h"

namespace cairn::daemon::storage {

namespace fs = std::filesystem;

std::string Manifest::Serialize() const {
  std::string out = absl::StrCat("cairn-checkpoint-manifest 1\njob ", job, "\nid ", id, "\n");
  for (const ManifestFile& f : files) absl::StrAppend(&out, absl::StrFormat("file %d %016x %s\n", f.size, f.xxh3, f.path));
  return out;
}

absl::StatusOr<Manifest> Manifest::Parse(const std::string& text, const std::string& what) {
  Manifest m;
  auto bad = [&](absl::string_view line) {
    return absl::DataLossError(absl::StrCat(what, ": not a cairn checkpoint manifest (line '", line, "')"));
  };
  bool header = false;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    std::vector<absl::string_view> w = absl::StrSplit(line, absl::MaxSplits(' ', 3));
    if (!header) {
      if (line != "cairn-checkpoint-manifest 1") return bad(line);
      header = true;
    } else if (w.size() == 2 && w[0] == "job") {
      m.job = std::string(w[1]);
    } else if (w.size() == 2 && w[0] == "id") {
      m.id = std::string(w[1]);
    } else if (w.size() == 4 && w[0] == "file") {
      ManifestFile f;
      f.path = std::string(w[3]);
      if (!absl::SimpleAtoi(w[1], &f.size) || !absl::SimpleHexAtoi(w[2], &f.xxh3) || f.path.empty() ||
          f.path[0] == '/' || f.path.find("..") != std::string::npos) {
        return bad(line);
      }
      m.files.push_back(std::move(f));
    } else {
      return bad(line);
    }
  }
  if (!header || m.job.empty() || m.id.empty()) return absl::DataLossError(absl::StrCat(what, ": an incomplete manifest"));
  return m;
}

absl::StatusOr<uint64_t> HashFile(const std::string& path, uint64_t* size) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return ErrnoStatus("open " + path);
  XXH3_state_t* st = XXH3_createState();
  XXH3_64bits_reset(st);
  std::string buf(1 << 20, '\0');
  uint64_t total = 0;
  while (true) {
    ssize_t n = ::read(fd.get(), buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      XXH3_freeState(st);
      return ErrnoStatus("read " + path);
    }
    if (n == 0) break;
    XXH3_64bits_update(st, buf.data(), static_cast<size_t>(n));
    total += static_cast<uint64_t>(n);
  }
  uint64_t h = XXH3_64bits_digest(st);
  XXH3_freeState(st);
  if (size) *size = total;
  return h;
}

absl::StatusOr<Manifest> ManifestOf(const std::string& dir, const std::string& job, const std::string& id) {
  Manifest m;
  m.job = job;
  m.id = id;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    if (!it->is_regular_file(ec)) continue;
    std::string rel = fs::relative(it->path(), dir, ec).string();
    if (rel == kManifestFile) continue;
    ManifestFile f;
    f.path = rel;
    ASSIGN_OR_RETURN(f.xxh3, HashFile(it->path().string(), &f.size));
    m.files.push_back(std::move(f));
  }
  if (ec) return absl::InternalError(absl::StrCat("list ", dir, ": ", ec.message()));
  if (m.files.empty()) return absl::FailedPreconditionError(absl::StrCat(dir, ": no checkpoint files"));
  std::sort(m.files.begin(), m.files.end(), [](auto& a, auto& b) { return a.path < b.path; });
  return m;
}

absl::Status VerifyDir(const std::string& dir, const Manifest& m) {
  std::set<std::string> expected;
  for (const ManifestFile& f : m.files) {
    expected.insert(f.path);
    uint64_t size = 0;
    ASSIGN_OR_RETURN(uint64_t h, HashFile(dir + "/" + f.path, &size));
    if (size != f.size || h != f.xxh3) {
      return absl::DataLossError(absl::StrFormat(
          "%s/%s: %d bytes with XXH3 %016x, but the manifest of checkpoint %s says %d bytes with XXH3 %016x "
          "(damaged in the store or on the way)", dir, f.path, size, h, m.id, f.size, f.xxh3));
    }
  }
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    if (!it->is_regular_file(ec)) continue;
    std::string rel = fs::relative(it->path(), dir, ec).string();
    if (rel != kManifestFile && !expected.count(rel)) {
      return absl::DataLossError(absl::StrCat(dir, "/", rel, ": not in the manifest of checkpoint ", m.id));
    }
  }
  return absl::OkStatus();
}

}  // namespace cairn::daemon::storage
