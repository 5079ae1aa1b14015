#include "engine/proc/maps.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/ascii.h"
#include "absl/strings/strip.h"
#include "common/file_util.h"
#include "common/status.h"

namespace cairn::proc {
namespace {

bool ParseHex(absl::string_view s, uint64_t* out) {
  return absl::SimpleHexAtoi(s, out);
}

}  // namespace

bool MapEntry::HasFlag(absl::string_view f) const {
  return std::find(vm_flags.begin(), vm_flags.end(), f) != vm_flags.end();
}

absl::StatusOr<MapEntry> ParseMapsLine(absl::string_view line) {
  // start-end perms offset major:minor inode [path]; the path may contain spaces.
  auto bad = [&] { return absl::DataLossError(absl::StrCat("malformed maps line: '", line, "'")); };
  absl::string_view rest = line;
  absl::string_view tok[5];
  for (auto& t : tok) {
    rest = absl::StripLeadingAsciiWhitespace(rest);
    size_t sp = rest.find(' ');
    t = rest.substr(0, sp);
    rest = sp == absl::string_view::npos ? absl::string_view() : rest.substr(sp);
    if (t.empty()) return bad();
  }
  MapEntry e;
  size_t dash = tok[0].find('-');
  if (dash == absl::string_view::npos || !ParseHex(tok[0].substr(0, dash), &e.start) ||
      !ParseHex(tok[0].substr(dash + 1), &e.end)) {
    return bad();
  }
  if (tok[1].size() != 4) return bad();
  if (tok[1][0] == 'r') e.prot |= PROT_READ;
  if (tok[1][1] == 'w') e.prot |= PROT_WRITE;
  if (tok[1][2] == 'x') e.prot |= PROT_EXEC;
  e.shared = tok[1][3] == 's';
  if (!ParseHex(tok[2], &e.offset)) return bad();
  size_t colon = tok[3].find(':');
  uint64_t maj = 0, min = 0;
  if (colon == absl::string_view::npos || !ParseHex(tok[3].substr(0, colon), &maj) ||
      !ParseHex(tok[3].substr(colon + 1), &min)) {
    return bad();
  }
  e.dev_major = static_cast<uint32_t>(maj);
  e.dev_minor = static_cast<uint32_t>(min);
  if (!absl::SimpleAtoi(tok[4], &e.inode)) return bad();
  e.path = std::string(absl::StripLeadingAsciiWhitespace(rest));
  return e;
}

absl::StatusOr<std::vector<MapEntry>> ParseSmaps(absl::string_view text) {
  std::vector<MapEntry> out;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    if (absl::ConsumePrefix(&line, "VmFlags:")) {
      if (out.empty()) return absl::DataLossError("smaps: VmFlags before any area");
      for (absl::string_view fl : absl::StrSplit(line, ' ', absl::SkipEmpty())) {
        out.back().vm_flags.emplace_back(fl);
      }
      continue;
    }
    // Area header lines start with a hex digit and contain '-' in the first field;
    // smaps detail lines look like "Rss:   4 kB".
    size_t colon = line.find(':');
    size_t space = line.find(' ');
    if (colon != absl::string_view::npos && (space == absl::string_view::npos || colon < space)) continue;
    ASSIGN_OR_RETURN(MapEntry e, ParseMapsLine(line));
    out.push_back(std::move(e));
  }
  return out;
}

absl::StatusOr<std::vector<MapEntry>> ReadSmaps(pid_t pid) {
  ASSIGN_OR_RETURN(std::string text, ReadFile(absl::StrCat("/proc/", pid, "/smaps")));
  return ParseSmaps(text);
}

absl::StatusOr<std::vector<MapEntry>> ReadMaps(pid_t pid) {
  ASSIGN_OR_RETURN(std::string text, ReadFile(absl::StrCat("/proc/", pid, "/maps")));
  return ParseSmaps(text);
}

bool SameLayout(const std::vector<MapEntry>& a, const std::vector<MapEntry>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    const MapEntry& x = a[i];
    const MapEntry& y = b[i];
    if (x.start != y.start || x.end != y.end || x.prot != y.prot || x.shared != y.shared || x.offset != y.offset ||
        x.inode != y.inode || x.dev_major != y.dev_major || x.dev_minor != y.dev_minor || x.path != y.path) {
      return false;
    }
  }
  return true;
}

}  // namespace cairn::proc
