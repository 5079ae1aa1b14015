#include "engine/proc/fds.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <climits>
#include <cstdint>
#include <functional>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/file_util.h"
#include "common/status.h"
#include "common/unique_fd.h"

namespace cairn::proc {

namespace {

// Octal digits only, as the kernel prints open and settime flags.
bool ParseOctal(absl::string_view text, int* out) {
  if (text.empty()) return false;
  int v = 0;
  for (char c : text) {
    if (c < '0' || c > '7') return false;
    v = v * 8 + (c - '0');
  }
  *out = v;
  return true;
}

// "(SEC, NSEC)", as timerfd's it_value and it_interval.
bool ParseSecNsec(absl::string_view text, int64_t* ns) {
  if (!absl::ConsumePrefix(&text, "(") || !absl::ConsumeSuffix(&text, ")")) return false;
  std::pair<absl::string_view, absl::string_view> parts = absl::StrSplit(text, absl::MaxSplits(',', 1));
  uint64_t sec = 0, nsec = 0;
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(parts.first), &sec) ||
      !absl::SimpleAtoi(absl::StripAsciiWhitespace(parts.second), &nsec) || nsec >= 1000000000 ||
      sec > static_cast<uint64_t>(INT64_MAX / 1000000000 - 1)) {
    return false;
  }
  *ns = static_cast<int64_t>(sec) * 1000000000 + static_cast<int64_t>(nsec);
  return true;
}

// The value of the first `key` line, or null.
const std::string* Find(const FdInfo& info, absl::string_view key) {
  for (const auto& [k, v] : info.extra) {
    if (k == key) return &v;
  }
  return nullptr;
}

absl::Status Malformed(const FdInfo& info, absl::string_view what, absl::string_view line) {
  return absl::DataLossError(absl::StrCat("malformed fdinfo of fd ", info.fd, " (", info.target, "): ", what, " '",
                                          line.substr(0, 120), "'"));
}

}  // namespace

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
      have_flags = ParseOctal(val, &info.flags);
    } else if (key == "mnt_id") {
      (void)absl::SimpleAtoi(val, &info.mnt_id);
    } else {
      info.extra.emplace_back(std::string(key), std::string(val));
    }
  }
  if (!have_pos || !have_flags) {
    return absl::DataLossError(absl::StrCat("malformed fdinfo: '", text.substr(0, 80), "'"));
  }
  return info;
}

absl::StatusOr<EventfdInfo> ParseEventfd(const FdInfo& info) {
  EventfdInfo out;
  const std::string* count = Find(info, "eventfd-count");
  if (count == nullptr || !absl::SimpleHexAtoi(*count, &out.count)) {
    return Malformed(info, "eventfd-count", count != nullptr ? *count : "(missing)");
  }
  if (const std::string* sem = Find(info, "eventfd-semaphore"); sem != nullptr) {
    if (*sem != "0" && *sem != "1") return Malformed(info, "eventfd-semaphore", *sem);
    out.semaphore = *sem == "1";
    out.semaphore_reported = true;
  }
  return out;
}

absl::StatusOr<TimerfdInfo> ParseTimerfd(const FdInfo& info) {
  TimerfdInfo out;
  struct Field {
    const char* key;
    std::function<bool(absl::string_view)> parse;
  };
  const Field fields[] = {
      {"clockid", [&](absl::string_view v) { return absl::SimpleAtoi(v, &out.clock); }},
      {"ticks", [&](absl::string_view v) { return absl::SimpleAtoi(v, &out.ticks); }},
      {"settime flags", [&](absl::string_view v) { return ParseOctal(v, &out.settime_flags); }},
      {"it_value", [&](absl::string_view v) { return ParseSecNsec(v, &out.value_ns); }},
      {"it_interval", [&](absl::string_view v) { return ParseSecNsec(v, &out.interval_ns); }},
  };
  for (const Field& f : fields) {
    const std::string* v = Find(info, f.key);
    if (v == nullptr || !f.parse(*v)) return Malformed(info, f.key, v != nullptr ? *v : "(missing)");
  }
  return out;
}

absl::StatusOr<uint64_t> ParseSignalfdMask(const FdInfo& info) {
  const std::string* mask = Find(info, "sigmask");
  uint64_t out = 0;
  if (mask == nullptr || !absl::SimpleHexAtoi(*mask, &out)) {
    return Malformed(info, "sigmask", mask != nullptr ? *mask : "(missing)");
  }
  return out;
}

absl::StatusOr<std::vector<LockInfo>> ParseLocks(const FdInfo& info) {
  std::vector<LockInfo> out;
  for (const auto& [key, value] : info.extra) {
    if (key != "lock") continue;
    std::vector<absl::string_view> f = absl::StrSplit(value, ' ', absl::SkipWhitespace());
    if (f.size() >= 2 && f[1] == "->") continue;
    LockInfo l;
    bool ok = f.size() >= 8 && absl::SimpleAtoi(f[4], &l.pid) && absl::SimpleAtoi(f[6], &l.start) &&
              (f[7] == "EOF" || absl::SimpleAtoi(f[7], &l.end));
    if (!ok) return absl::DataLossError(absl::StrCat("fd ", info.fd, ": malformed lock line '", value, "'"));
    l.kind = std::string(f[1]);
    l.mode = std::string(f[2]);
    l.write = f[3] == "WRITE";
    out.push_back(std::move(l));
  }
  return out;
}

absl::StatusOr<std::vector<EpollTarget>> ParseEpollTargets(const FdInfo& info) {
  // "tfd:        3 events:       19 data:                1  pos:0 ino:40f sdev:10"
  std::vector<EpollTarget> out;
  for (const auto& [key, val] : info.extra) {
    if (key != "tfd") continue;
    std::vector<absl::string_view> tok = absl::StrSplit(val, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    EpollTarget t;
    bool ok = !tok.empty() && absl::SimpleAtoi(tok[0], &t.tfd) && t.tfd >= 0;
    bool have_events = false, have_data = false;
    for (size_t i = 1; ok && i < tok.size(); ++i) {
      absl::string_view v = tok[i];
      if (v == "events:" && i + 1 < tok.size()) {
        have_events = absl::SimpleHexAtoi(tok[++i], &t.events);
      } else if (v == "data:" && i + 1 < tok.size()) {
        have_data = absl::SimpleHexAtoi(tok[++i], &t.data);
      } else if (absl::ConsumePrefix(&v, "ino:")) {
        ok = absl::SimpleHexAtoi(v, &t.ino);
      } else if (absl::ConsumePrefix(&v, "sdev:")) {
        ok = absl::SimpleHexAtoi(v, &t.sdev);
      }
    }
    if (!ok || !have_events || !have_data) return Malformed(info, "epoll target", absl::StrCat("tfd: ", val));
    out.push_back(t);
  }
  return out;
}

absl::StatusOr<std::vector<InotifyWatch>> ParseInotifyWatches(const FdInfo& info) {
  // "inotify wd:2 ino:2dd sdev:fe00000 mask:80000002 ignored_mask:0 fhandle-bytes:8
  //  fhandle-type:1 f_handle:dd02000000000000" (key "inotify wd", as split at the first ':')
  std::vector<InotifyWatch> out;
  for (const auto& [key, val] : info.extra) {
    if (key != "inotify wd") continue;
    std::vector<absl::string_view> tok = absl::StrSplit(val, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    InotifyWatch w;
    bool ok = !tok.empty() && absl::SimpleAtoi(tok[0], &w.wd) && w.wd > 0;
    bool have_mask = false, have_handle = false;
    size_t handle_bytes = 0;
    for (size_t i = 1; ok && i < tok.size(); ++i) {
      absl::string_view v = tok[i];
      if (absl::ConsumePrefix(&v, "ino:")) {
        ok = absl::SimpleHexAtoi(v, &w.ino);
      } else if (absl::ConsumePrefix(&v, "sdev:")) {
        ok = absl::SimpleHexAtoi(v, &w.sdev);
      } else if (absl::ConsumePrefix(&v, "ignored_mask:")) {
        ok = absl::SimpleHexAtoi(v, &w.ignored_mask);
      } else if (absl::ConsumePrefix(&v, "mask:")) {
        ok = have_mask = absl::SimpleHexAtoi(v, &w.mask);
      } else if (absl::ConsumePrefix(&v, "fhandle-bytes:")) {
        ok = absl::SimpleHexAtoi(v, &handle_bytes);
      } else if (absl::ConsumePrefix(&v, "fhandle-type:")) {
        ok = absl::SimpleHexAtoi(v, &w.handle_type);
      } else if (absl::ConsumePrefix(&v, "f_handle:")) {
        ok = have_handle = v.size() % 2 == 0;
        for (size_t j = 0; ok && j < v.size(); j += 2) {
          uint32_t byte = 0;
          ok = absl::SimpleHexAtoi(v.substr(j, 2), &byte);
          w.handle.push_back(static_cast<char>(byte));
        }
      }
    }
    if (!ok || !have_mask || !have_handle || w.handle.size() != handle_bytes) {
      return Malformed(info, "inotify watch", absl::StrCat("inotify wd: ", val));
    }
    out.push_back(std::move(w));
  }
  return out;
}

// Read relative to the open directory /proc/PID/fd: a lookup of the whole path per descriptor
// costs a third more.
absl::StatusOr<std::vector<std::pair<int, std::string>>> ListFdTargets(pid_t pid) {
  std::string dir_path = absl::StrCat("/proc/", pid, "/fd");
  DIR* dir = ::opendir(dir_path.c_str());
  if (dir == nullptr) return ErrnoStatus("opendir " + dir_path);
  std::vector<int> fds;
  while (dirent* de = ::readdir(dir)) {
    int fd = 0;
    if (absl::SimpleAtoi(de->d_name, &fd)) fds.push_back(fd);
  }
  std::sort(fds.begin(), fds.end());
  std::vector<std::pair<int, std::string>> out;
  out.reserve(fds.size());
  absl::Status status;
  for (int fd : fds) {
    char name[16];
    char buf[4096];
    *std::to_chars(name, name + sizeof name - 1, fd).ptr = '\0';
    ssize_t n = ::readlinkat(::dirfd(dir), name, buf, sizeof buf);
    if (n < 0) {
      if (errno == ENOENT) continue;  // closed meanwhile (the process is frozen, so only a race with exit)
      status = ErrnoStatus(absl::StrCat("readlink ", dir_path, "/", fd));
      break;
    }
    out.emplace_back(fd, std::string(buf, static_cast<size_t>(n)));
  }
  ::closedir(dir);
  RETURN_IF_ERROR(status);
  return out;
}

bool ProcessEntryPath(absl::string_view path) {
  return absl::ConsumePrefix(&path, "/proc/") && !path.empty() && absl::ascii_isdigit(path[0]);
}

std::optional<uint64_t> SocketInode(absl::string_view target) {
  uint64_t ino = 0;
  if (!absl::ConsumePrefix(&target, "socket:[") || !absl::ConsumeSuffix(&target, "]") ||
      !absl::SimpleAtoi(target, &ino)) {
    return std::nullopt;
  }
  return ino;
}

absl::StatusOr<std::vector<FdInfo>> ReadFds(pid_t pid, const std::function<bool(absl::string_view)>& info_for) {
  ASSIGN_OR_RETURN(auto targets, ListFdTargets(pid));
  std::string dir_path = absl::StrCat("/proc/", pid, "/fdinfo");
  UniqueFd dir(::open(dir_path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!dir.valid()) return ErrnoStatus("open " + dir_path);
  std::vector<FdInfo> out;
  out.reserve(targets.size());
  std::string text;
  for (auto& [fd, target] : targets) {
    if (info_for && !info_for(target)) {
      FdInfo bare;
      bare.fd = fd;
      bare.target = std::move(target);
      out.push_back(std::move(bare));
      continue;
    }
    char name[16];
    *std::to_chars(name, name + sizeof name - 1, fd).ptr = '\0';
    UniqueFd f(::openat(dir.get(), name, O_RDONLY | O_CLOEXEC));
    if (!f.valid() && errno == ENOENT) continue;  // closed since it was listed (a running process)
    if (!f.valid()) return ErrnoStatus(absl::StrCat("open ", dir_path, "/", fd));
    text.clear();
    char buf[16384];
    bool gone = false;
    for (;;) {
      ssize_t n = ::read(f.get(), buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && errno == ENOENT) gone = true;  // closed since it was opened
      if (n < 0 && !gone) return ErrnoStatus(absl::StrCat("read ", dir_path, "/", fd));
      if (n <= 0) break;
      text.append(buf, static_cast<size_t>(n));
    }
    if (gone) continue;
    ASSIGN_OR_RETURN(FdInfo info, ParseFdInfo(text));
    info.fd = fd;
    info.target = std::move(target);
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
