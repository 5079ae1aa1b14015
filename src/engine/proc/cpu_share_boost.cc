#include "engine/proc/cpu_share_boost.h"

#include <fcntl.h>
#include <unistd.h>

#include <filesystem>
#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/file_util.h"
#include "common/log.h"
#include "engine/proc/mountinfo.h"

namespace cairn::proc {
namespace {

// A cgroup file set to `value` (one write, as the kernel takes it).
bool Put(const std::string& file, const std::string& value) {
  int fd = ::open(file.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  bool ok = ::write(fd, value.data(), value.size()) == static_cast<ssize_t>(value.size());
  ::close(fd);
  return ok;
}

// The share file of `pid`'s cpu cgroup and the most it takes: v1 cpu.shares under the
// hierarchy with the cpu controller, else v2 cpu.weight. Empty for the root cgroup.
std::pair<std::string, const char*> ShareFile(pid_t pid, const std::vector<MountEntry>& mounts) {
  absl::StatusOr<std::string> text = ReadFile(absl::StrCat("/proc/", pid, "/cgroup"));
  if (!text.ok()) return {};
  std::string v1, v2;
  for (absl::string_view line : absl::StrSplit(*text, '\n', absl::SkipEmpty())) {
    std::vector<absl::string_view> f = absl::StrSplit(line, absl::MaxSplits(':', 2));
    if (f.size() != 3) continue;
    if (f[1].empty()) v2 = std::string(f[2]);
    for (absl::string_view c : absl::StrSplit(f[1], ',')) {
      if (c == "cpu") v1 = std::string(f[2]);
    }
  }
  for (const MountEntry& m : mounts) {
    if (m.fs_root != "/") continue;  // a part of a hierarchy: its paths are not these
    if (!v1.empty() && v1 != "/" && m.fstype == "cgroup") {
      for (absl::string_view o : absl::StrSplit(m.super_options, ',')) {
        if (o == "cpu") return {m.point + v1 + "/cpu.shares", "262144"};
      }
    }
    if (v1.empty() && !v2.empty() && v2 != "/" && m.fstype == "cgroup2") return {m.point + v2 + "/cpu.weight", "10000"};
  }
  return {};
}

// Whether every process of the cgroup whose share file is `file` is among `pids`, and it has
// no child cgroups (whose processes its share covers too).
bool OnlyThese(const std::string& file, const std::set<pid_t>& pids) {
  std::string dir = file.substr(0, file.rfind('/'));
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    if (entry.is_directory(ec)) return false;
  }
  if (ec) return false;
  absl::StatusOr<std::string> procs = ReadFile(dir + "/cgroup.procs");
  if (!procs.ok()) return false;
  for (absl::string_view p : absl::StrSplit(*procs, '\n', absl::SkipEmpty())) {
    pid_t pid = 0;
    if (!absl::SimpleAtoi(p, &pid) || !pids.count(pid)) return false;
  }
  return true;
}

}  // namespace

CpuShareBoost::CpuShareBoost(const std::vector<pid_t>& pids, ShareJournal* journal) : journal_(journal) {
  absl::StatusOr<std::vector<MountEntry>> mounts = ReadMountTable(::getpid());
  if (!mounts.ok()) return;
  std::set<pid_t> given(pids.begin(), pids.end());
  std::set<std::string> seen;
  for (pid_t pid : pids) {
    auto [file, most] = ShareFile(pid, *mounts);
    if (file.empty() || !seen.insert(file).second || !OnlyThese(file, given)) continue;
    absl::StatusOr<std::string> before = ReadFile(file);
    if (!before.ok()) continue;
    std::string value(absl::StripTrailingAsciiWhitespace(*before));
    if (journal_ != nullptr && !journal_->Raising(file, value)) continue;
    if (!Put(file, most)) {
      if (journal_ != nullptr) journal_->Back(file);
      continue;
    }
    saved_.emplace_back(file, value);
    CAIRN_LOG_DEBUG("event=cpu_share_boost file={} before={}", file, value);
  }
}

CpuShareBoost::~CpuShareBoost() {
  for (const auto& [file, value] : saved_) {
    if (Put(file, value) && journal_ != nullptr) journal_->Back(file);
  }
}

}  // namespace cairn::proc
