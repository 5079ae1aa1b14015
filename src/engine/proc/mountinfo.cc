#include "engine/proc/mountinfo.h"

#include <fcntl.h>
#include <sys/sysmacros.h>

#include <cstring>

#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/file_util.h"
#include "common/status.h"

namespace cairn::proc {

namespace {

// A mountinfo field with its octal escapes ("\040" for a space, "\134" for a backslash...) undone.
std::string Unescape(absl::string_view field) {
  std::string out;
  for (size_t i = 0; i < field.size(); ++i) {
    bool escape = field[i] == '\\' && i + 3 < field.size() && absl::ascii_isdigit(field[i + 1]) &&
                  absl::ascii_isdigit(field[i + 2]) && absl::ascii_isdigit(field[i + 3]);
    if (escape) {
      out.push_back(static_cast<char>((field[i + 1] - '0') * 64 + (field[i + 2] - '0') * 8 + (field[i + 3] - '0')));
      i += 3;
    } else {
      out.push_back(field[i]);
    }
  }
  return out;
}

}  // namespace

absl::StatusOr<std::vector<MountEntry>> ReadMountTable(pid_t pid) {
  std::string path = absl::StrCat("/proc/", pid, "/mountinfo");
  ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  absl::StatusOr<std::vector<MountEntry>> table = ParseMountTable(text);
  if (!table.ok()) return Annotate(table.status(), path);
  return table;
}

absl::StatusOr<std::vector<MountEntry>> ParseMountTable(const std::string& text) {
  std::vector<MountEntry> out;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    std::vector<absl::string_view> f = absl::StrSplit(line, ' ');
    // Optional fields ("shared:1 master:2") run up to the "-" separator.
    size_t sep = 6;
    while (sep < f.size() && f[sep] != "-") ++sep;
    std::vector<absl::string_view> dev = absl::StrSplit(f.size() > 2 ? f[2] : "", ':');
    MountEntry e;
    unsigned maj = 0, min = 0;
    if (f.size() < 6 || sep + 2 >= f.size() || dev.size() != 2 || !absl::SimpleAtoi(f[0], &e.id) ||
        !absl::SimpleAtoi(f[1], &e.parent_id) || !absl::SimpleAtoi(dev[0], &maj) || !absl::SimpleAtoi(dev[1], &min)) {
      return absl::DataLossError(absl::StrCat("unexpected mount table line '", line, "'"));
    }
    e.dev = makedev(maj, min);
    e.fs_root = Unescape(f[3]);
    e.point = Unescape(f[4]);
    e.mount_options = std::string(f[5]);
    e.fstype = Unescape(f[sep + 1]);
    e.source = Unescape(f[sep + 2]);
    e.super_options = sep + 3 < f.size() ? std::string(f[sep + 3]) : "";
    out.push_back(std::move(e));
  }
  return out;
}

absl::StatusOr<std::string> MountPointOf(pid_t pid, dev_t dev) {
  std::string path = absl::StrCat("/proc/", pid, "/mountinfo");
  ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  std::string want = absl::StrCat(major(dev), ":", minor(dev));
  std::string found;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    // "36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw"
    std::vector<absl::string_view> f = absl::StrSplit(line, ' ');
    if (f.size() < 5 || f[2] != want) continue;
    if (f[3] == "/") return Unescape(f[4]);
    if (found.empty()) found = Unescape(f[4]);
  }
  if (found.empty()) return absl::NotFoundError(absl::StrFormat("no mount of device %s in %s", want, path));
  return found;
}

absl::StatusOr<UniqueFd> OpenFileHandle(const std::string& mount_path, int type, absl::string_view handle, int flags,
                                        const std::string& what) {
  // Not O_PATH: open_by_handle_at does not take an O_PATH descriptor for the mount.
  UniqueFd mount(::open(mount_path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!mount.valid()) return ErrnoStatus(absl::StrCat("open ", mount_path, ", the mount of ", what));
  std::vector<char> buf(sizeof(file_handle) + handle.size());
  auto* fh = reinterpret_cast<file_handle*>(buf.data());
  fh->handle_bytes = static_cast<unsigned>(handle.size());
  fh->handle_type = type;
  std::memcpy(fh->f_handle, handle.data(), handle.size());
  UniqueFd f(::open_by_handle_at(mount.get(), fh, flags));
  if (!f.valid()) return ErrnoStatus(absl::StrCat("open_by_handle_at for ", what));
  return f;
}

}  // namespace cairn::proc
