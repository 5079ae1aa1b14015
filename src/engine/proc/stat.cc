#include "engine/proc/stat.h"

#include <dirent.h>
#include <sys/sysmacros.h>

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/file_util.h"
#include "common/status.h"

namespace cairn::proc {

absl::StatusOr<Stat> ParseStat(absl::string_view text) {
  auto bad = [&](absl::string_view why) {
    return absl::DataLossError(absl::StrCat("malformed /proc stat (", why, "): '", text.substr(0, 80), "'"));
  };
  size_t open = text.find('(');
  size_t close = text.rfind(')');
  if (open == absl::string_view::npos || close == absl::string_view::npos || close < open) {
    return bad("no comm");
  }
  Stat st;
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(text.substr(0, open)), &st.pid)) return bad("pid");
  st.comm = std::string(text.substr(open + 1, close - open - 1));
  std::vector<absl::string_view> f =
      absl::StrSplit(text.substr(close + 1), ' ', absl::SkipWhitespace());
  // f[0] is field 3 (state); field N is f[N - 3].
  if (f.size() < 50) return bad("too few fields");
  auto u64 = [&](int field, uint64_t* out) { return absl::SimpleAtoi(f[field - 3], out); };
  st.state = f[0].empty() ? '?' : f[0][0];
  int64_t v = 0;
  if (!absl::SimpleAtoi(f[1], &v)) return bad("ppid");
  st.ppid = static_cast<pid_t>(v);
  if (!absl::SimpleAtoi(f[2], &v)) return bad("pgrp");
  st.pgrp = static_cast<pid_t>(v);
  if (!absl::SimpleAtoi(f[3], &v)) return bad("session");
  st.session = static_cast<pid_t>(v);
  if (!u64(9, &st.flags) || !absl::SimpleAtoi(f[20 - 3], &st.num_threads) || !u64(22, &st.start_time) ||
      !u64(26, &st.start_code) || !u64(27, &st.end_code) || !u64(28, &st.start_stack) ||
      !u64(45, &st.start_data) || !u64(46, &st.end_data) || !u64(47, &st.start_brk) ||
      !u64(48, &st.arg_start) || !u64(49, &st.arg_end) || !u64(50, &st.env_start) ||
      !u64(51, &st.env_end)) {
    return bad("numeric field");
  }
  if (f.size() >= 52 - 2) (void)absl::SimpleAtoi(f[52 - 3], &st.exit_code);
  if (!u64(7, &st.tty_nr) || !absl::SimpleAtoi(f[8 - 3], &st.tpgid)) return bad("tty_nr/tpgid");
  return st;
}

uint64_t TtyDevice(uint64_t tty_nr) {
  // The kernel's "new" encoding: minor's low 8 bits, then 12 bits of major, then the rest of
  // minor.
  uint64_t major = (tty_nr >> 8) & 0xfff;
  uint64_t minor = (tty_nr & 0xff) | ((tty_nr >> 12) & 0xfff00);
  return makedev(major, minor);
}

absl::StatusOr<Stat> ReadStat(pid_t pid) {
  ASSIGN_OR_RETURN(std::string text, ReadFile(absl::StrCat("/proc/", pid, "/stat")));
  return ParseStat(text);
}

absl::StatusOr<Status> ParseStatus(absl::string_view text) {
  Status st;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    size_t colon = line.find(':');
    if (colon == absl::string_view::npos) continue;
    absl::string_view key = line.substr(0, colon);
    absl::string_view val = absl::StripAsciiWhitespace(line.substr(colon + 1));
    auto ids = [&](uint32_t* out) {
      int i = 0;
      for (absl::string_view t : absl::StrSplit(val, absl::ByAnyChar(" \t"), absl::SkipEmpty())) {
        if (i < 4 && !absl::SimpleAtoi(t, &out[i])) return false;
        ++i;
      }
      return i == 4;
    };
    auto cap = [&](uint64_t* out) { return absl::SimpleHexAtoi(val, out); };
    bool ok = true;
    if (key == "Uid") ok = ids(st.uid);
    else if (key == "Gid") ok = ids(st.gid);
    else if (key == "Groups") {
      for (absl::string_view t : absl::StrSplit(val, ' ', absl::SkipEmpty())) {
        uint32_t g = 0;
        if (!absl::SimpleAtoi(t, &g)) ok = false;
        st.groups.push_back(g);
      }
    } else if (key == "CapInh") ok = cap(&st.cap_inh);
    else if (key == "CapPrm") ok = cap(&st.cap_prm);
    else if (key == "CapEff") ok = cap(&st.cap_eff);
    else if (key == "CapBnd") ok = cap(&st.cap_bnd);
    else if (key == "CapAmb") ok = cap(&st.cap_amb);
    else if (key == "SigIgn") ok = cap(&st.sig_ignored);
    else if (key == "SigCgt") ok = cap(&st.sig_caught);
    else if (key == "NoNewPrivs") st.no_new_privs = val == "1";
    else if (key == "Seccomp") ok = absl::SimpleAtoi(val, &st.seccomp);
    else if (key == "Tgid") ok = absl::SimpleAtoi(val, &st.tgid);
    else if (key == "THP_enabled") ok = absl::SimpleAtoi(val, &st.thp_enabled);
    else if (key == "Umask") {
      st.umask = 0;
      ok = !val.empty() && val.size() <= 4;
      for (char c : val) {
        if (c < '0' || c > '7') ok = false;
        st.umask = st.umask * 8 + (c - '0');
      }
    }
    else if (key == "NSpid") {
      for (absl::string_view t : absl::StrSplit(val, absl::ByAnyChar(" \t"), absl::SkipEmpty())) {
        pid_t id = 0;
        if (!absl::SimpleAtoi(t, &id)) ok = false;
        st.nspids.push_back(id);
      }
    }
    if (!ok) return absl::DataLossError(absl::StrCat("malformed /proc status line: '", line, "'"));
  }
  return st;
}

absl::StatusOr<Status> ReadStatus(pid_t pid) {
  ASSIGN_OR_RETURN(std::string text, ReadFile(absl::StrCat("/proc/", pid, "/status")));
  return ParseStatus(text);
}

absl::StatusOr<Status> ReadTaskStatus(pid_t pid, pid_t tid) {
  ASSIGN_OR_RETURN(std::string text, ReadFile(absl::StrCat("/proc/", pid, "/task/", tid, "/status")));
  return ParseStatus(text);
}

absl::StatusOr<std::vector<Limit>> ParseLimits(absl::string_view text) {
  // "Limit  Soft Limit  Hard Limit  Units" then one line per limit, in RLIMIT_* order: a
  // 25-column name, then the soft and hard values (numbers or "unlimited").
  std::vector<Limit> out;
  std::vector<absl::string_view> lines = absl::StrSplit(text, '\n', absl::SkipEmpty());
  for (size_t i = 1; i < lines.size(); ++i) {
    absl::string_view line = lines[i];
    if (line.size() <= 25) return absl::DataLossError(absl::StrCat("limits: short line '", line, "'"));
    std::vector<absl::string_view> f = absl::StrSplit(line.substr(25), ' ', absl::SkipEmpty());
    if (f.size() < 2) return absl::DataLossError(absl::StrCat("limits: no soft and hard value in '", line, "'"));
    Limit l;
    for (auto [field, value] : {std::pair{f[0], &l.cur}, std::pair{f[1], &l.max}}) {
      if (field == "unlimited") {
        *value = ~0ULL;
      } else if (!absl::SimpleAtoi(field, value)) {
        return absl::DataLossError(absl::StrCat("limits: '", field, "' is not a number in '", line, "'"));
      }
    }
    out.push_back(l);
  }
  return out;
}

absl::StatusOr<std::vector<Limit>> ReadLimits(pid_t pid) {
  std::string path = absl::StrCat("/proc/", pid, "/limits");
  ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  auto parsed = ParseLimits(text);
  if (!parsed.ok()) return Annotate(parsed.status(), path);
  return parsed;
}

absl::StatusOr<std::vector<pid_t>> ListTasks(pid_t pid) {
  std::string path = absl::StrCat("/proc/", pid, "/task");
  DIR* dir = ::opendir(path.c_str());
  if (dir == nullptr) return ErrnoStatus("opendir " + path);
  std::vector<pid_t> tids;
  while (dirent* de = ::readdir(dir)) {
    pid_t tid = 0;
    if (absl::SimpleAtoi(de->d_name, &tid)) tids.push_back(tid);
  }
  ::closedir(dir);
  std::sort(tids.begin(), tids.end());
  return tids;
}

absl::StatusOr<std::vector<pid_t>> ListChildren(pid_t pid) {
  ASSIGN_OR_RETURN(std::vector<pid_t> tids, ListTasks(pid));
  std::vector<pid_t> out;
  for (pid_t tid : tids) {
    auto text = ReadFile(absl::StrCat("/proc/", pid, "/task/", tid, "/children"));
    if (!text.ok()) {
      if (absl::IsNotFound(text.status())) continue;  // the thread exited
      return text.status();
    }
    for (absl::string_view t : absl::StrSplit(*text, ' ', absl::SkipWhitespace())) {
      pid_t child = 0;
      if (absl::SimpleAtoi(t, &child)) out.push_back(child);
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace cairn::proc
