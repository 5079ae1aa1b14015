#include "engine/dump/precopy_tree.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/file_util.h"
#include "common/status.h"
#include "engine/proc/stat.h"

namespace cairn::dump {
namespace {

// Resident pages of `pid` (/proc/PID/statm, second field); 0 when unknown.
uint64_t ResidentPages(pid_t pid) {
  auto text = ReadFile(absl::StrCat("/proc/", pid, "/statm"));
  if (!text.ok()) return 0;
  std::vector<absl::string_view> f = absl::StrSplit(*text, ' ', absl::SkipEmpty());
  uint64_t n = 0;
  if (f.size() < 2 || !absl::SimpleAtoi(f[1], &n)) return 0;
  return n;
}

}  // namespace

absl::StatusOr<std::map<pid_t, PreCopied>> PreCopyTree(pid_t root, image::ImageWriter& writer,
                                                       const PreCopyOptions& opts, const ProgressFn& progress) {
  std::vector<pid_t> pids = {root};
  for (size_t i = 0; i < pids.size(); ++i) {
    auto children = proc::ListChildren(pids[i]);
    if (children.ok()) pids.insert(pids.end(), children->begin(), children->end());
  }
  std::vector<std::pair<uint64_t, pid_t>> order;
  for (pid_t pid : pids) {
    auto st = proc::ReadStat(pid);
    if (!st.ok() || st->state == 'Z' || st->state == 'X') continue;
    order.emplace_back(ResidentPages(pid), pid);
  }
  std::sort(order.begin(), order.end());
  std::map<pid_t, PreCopied> out;
  for (const auto& [pages, pid] : order) {
    auto pc = PreCopy(pid, writer, opts, progress);
    if (!pc.ok()) {
      if (pid != root && absl::IsNotFound(pc.status())) continue;  // exited meanwhile
      return Annotate(pc.status(), absl::StrCat("pre-copy of pid ", pid));
    }
    out.emplace(pid, std::move(*pc));
  }
  return out;
}

}  // namespace cairn::dump
