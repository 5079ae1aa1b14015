#include "integrations/criu/install.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <algorithm>
#include <filesystem>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/status.h"

namespace cairn::criu_compat {
namespace {

// Whether `path` is (a link to) the cairn executable `cairn`.
bool IsCairn(const std::string& path, const std::string& cairn) {
  std::error_code ec;
  return std::filesystem::equivalent(path, cairn, ec) && !ec;
}

}  // namespace

absl::StatusOr<std::string> InstallCriuShim(const ShimInstall& opts) {
  if (opts.cairn.empty() || ::access(opts.cairn.c_str(), X_OK) != 0) {
    return absl::NotFoundError(absl::StrFormat("the cairn executable %s is not there to link to", opts.cairn));
  }
  std::string link = opts.dir + "/criu";
  // Another criu the runtimes would find: in this directory, shadowed by it further on PATH, or
  // found before it.
  std::vector<std::string> path = absl::StrSplit(opts.path_env, ':', absl::SkipEmpty());
  if (std::find(path.begin(), path.end(), opts.dir) == path.end()) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s is not on PATH (%s): runtimes would not find a criu there; give --dir a directory on their PATH", opts.dir,
        opts.path_env));
  }
  bool before = true;  // on PATH before opts.dir
  for (const std::string& d : path) {
    std::string candidate = d + "/criu";
    struct stat st {};
    bool other = ::stat(candidate.c_str(), &st) == 0 && !IsCairn(candidate, opts.cairn);
    if (other && before && d != opts.dir) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "a criu that is not cairn's is at %s, on PATH before %s: runtimes would go on using it; give --dir a "
          "directory that comes before %s on PATH",
          candidate, opts.dir, d));
    }
    if (d == opts.dir) before = false;
    if (!other) continue;
    if (!opts.replace) {
      return absl::AlreadyExistsError(absl::StrFormat(
          "a criu that is not cairn's is at %s; container runtimes would %s it. Give --replace to put cairn's in its "
          "place for them (the other %s), or leave it",
          candidate, d == opts.dir ? "lose" : "no longer use",
          d == opts.dir ? "is kept as criu.cairn-replaced" : "stays where it is, shadowed by " + link));
    }
    if (d == opts.dir) {
      std::string kept = candidate + ".cairn-replaced";
      if (::rename(candidate.c_str(), kept.c_str()) != 0) return ErrnoStatus("rename " + candidate + " to " + kept);
    }
  }
  std::error_code ec;
  std::filesystem::create_directories(opts.dir, ec);
  if (ec) return absl::InternalError(absl::StrCat("create ", opts.dir, ": ", ec.message()));
  std::string tmp = link + ".cairn-new";
  ::unlink(tmp.c_str());
  if (::symlink(opts.cairn.c_str(), tmp.c_str()) != 0) return ErrnoStatus("symlink " + tmp);
  if (::rename(tmp.c_str(), link.c_str()) != 0) {
    absl::Status st = ErrnoStatus("rename " + tmp + " to " + link);
    ::unlink(tmp.c_str());
    return st;
  }
  return absl::StrFormat("%s -> %s: runc, Podman, containerd and CRI-O now checkpoint through cairn "
                         "(`criu --version` says so)",
                         link, opts.cairn);
}

}  // namespace cairn::criu_compat
