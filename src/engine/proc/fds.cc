#include "engine/proc/fds.h"

#include <dirent.h>
#include <unistd.h>

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/file_util.h"
#include "common/status.h"

namespace cairn::proc {

absl::StatusOr<FdInfo> ParseFdInfo(absl::string_view text) {
  FdInfo info;
  bool have_pos = false, have_flags = false;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    size_t colon = line.find(':');
    if (colon == absl::string_view::npos) continue;
    absl::string_view key = line.substr(0, colon);
    absl::string_view val = absl::StripAsciiWhitespace(line.substr(colon + 1));
    if (key == "pos") {
      have_pos = absl::SimpleAtoi(val, &info.pos);
    } else if (key == "flags") {
      // Octal.
      int flags = 0;
      have_flags = !val.empty();
      for (char c : val) {
        if (c < '0' || c > '7') have_flags = false;
        flags = flags * 8 + (c - '0');
      }
      info.flags = flags;
    } else if (key == "mnt_id") {
      (void)absl::SimpleAtoi(val, &info.mnt_id);
    }
  }
  if (!have_pos || !have_flags) {
    return absl::DataLossError(absl::StrCat("malformed fdinfo: '", text.substr(0, 80), "'"));
  }
  return info;
}

absl::StatusOr<std::vector<FdInfo>> ReadFds(pid_t pid) {
  std::string dir_path = absl::StrCat("/proc/", pid, "/fd");
  DIR* dir = ::opendir(dir_path.c_str());
  if (dir == nullptr) return ErrnoStatus("opendir " + dir_path);
  std::vector<int> fds;
  while (dirent* de = ::readdir(dir)) {
    int fd = 0;
    if (absl::SimpleAtoi(de->d_name, &fd)) fds.push_back(fd);
  }
  ::closedir(dir);
  std::sort(fds.begin(), fds.end());
  std::vector<FdInfo> out;
  for (int fd : fds) {
    std::string link = absl::StrCat(dir_path, "/", fd);
    char buf[4096];
    ssize_t n = ::readlink(link.c_str(), buf, sizeof buf);
    if (n < 0) {
      if (errno == ENOENT) continue;  // closed meanwhile (the process is frozen, so only a race with exit)
      return ErrnoStatus("readlink " + link);
    }
    ASSIGN_OR_RETURN(std::string text, ReadFile(absl::StrCat("/proc/", pid, "/fdinfo/", fd)));
    ASSIGN_OR_RETURN(FdInfo info, ParseFdInfo(text));
    info.fd = fd;
    info.target.assign(buf, static_cast<size_t>(n));
    out.push_back(std::move(info));
  }
  return out;
}

absl::StatusOr<std::vector<TimerInfo>> ParseTimers(absl::string_view text) {
  std::vector<TimerInfo> out;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    size_t colon = line.find(':');
    if (colon == absl::string_view::npos) continue;
    absl::string_view key = line.substr(0, colon);
    absl::string_view val = absl::StripAsciiWhitespace(line.substr(colon + 1));
    auto bad = [&] { return absl::DataLossError(absl::StrCat("malformed timers line: '", line, "'")); };
    if (key == "ID") {
      TimerInfo t;
      if (!absl::SimpleAtoi(val, &t.id)) return bad();
      out.push_back(t);
      continue;
    }
    if (out.empty()) return bad();
    TimerInfo& t = out.back();
    if (key == "signal") {
      std::pair<absl::string_view, absl::string_view> sv = absl::StrSplit(val, absl::MaxSplits('/', 1));
      if (!absl::SimpleAtoi(sv.first, &t.signo) || !absl::SimpleHexAtoi(sv.second, &t.sigval)) return bad();
    } else if (key == "notify") {
      // "signal/pid.123", "signal/tid.123" (SIGEV_THREAD_ID), "none/pid.123"
      std::pair<absl::string_view, absl::string_view> nv = absl::StrSplit(val, absl::MaxSplits('/', 1));
      t.notify = std::string(nv.first);
      t.to_thread = absl::StartsWith(nv.second, "tid.");
      size_t dot = nv.second.find('.');
      if (dot == absl::string_view::npos || !absl::SimpleAtoi(nv.second.substr(dot + 1), &t.notify_tid)) {
        return bad();
      }
    } else if (key == "ClockID") {
      if (!absl::SimpleAtoi(val, &t.clock)) return bad();
    }
  }
  return out;
}

absl::StatusOr<std::vector<TimerInfo>> ReadTimers(pid_t pid) {
  ASSIGN_OR_RETURN(std::string text, ReadFile(absl::StrCat("/proc/", pid, "/timers")));
  return ParseTimers(text);
}

}  // namespace cairn::proc
