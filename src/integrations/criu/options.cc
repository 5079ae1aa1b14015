#include "integrations/criu/options.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/stat.h>
#include <unistd.h>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/file_util.h"
#include "common/status.h"
#include "engine/dump/freezer_hold.h"

namespace cairn::criu_compat {
namespace {

constexpr char kImageSubdir[] = "cairn";
constexpr char kParentLinkName[] = "cairn.parent";

// Fields of Options that a newer protocol has and this file does not know.
absl::Status RefuseUnknown(const criu_rpc::Options& opts) {
  const google::protobuf::UnknownFieldSet& unknown = opts.GetReflection()->GetUnknownFields(opts);
  if (unknown.empty()) return absl::OkStatus();
  std::vector<int> numbers;
  for (int i = 0; i < unknown.field_count(); ++i) numbers.push_back(unknown.field(i).number());
  return absl::UnimplementedError(absl::StrFormat(
      "the request sets option field%s %s, which cairn's criu-compat does not know: refused rather than ignored",
      numbers.size() == 1 ? "" : "s", absl::StrJoin(numbers, ", ")));
}

absl::Status Refuse(absl::string_view option, absl::string_view why) {
  return absl::UnimplementedError(absl::StrCat("option ", option, ": ", why));
}

// Options that mean the same for dump and restore, refused when set.
absl::Status RefuseCommon(const criu_rpc::Options& o) {
  RETURN_IF_ERROR(RefuseUnknown(o));
  if (o.has_page_server()) {
    return Refuse("page server (ps)", "cairn serves pages with its own `cairn page-server`, not CRIU's");
  }
  if (o.lazy_pages()) {
    return Refuse("lazy_pages", "not through criu-compat yet; cairn's own lazy restore is `cairn restore --lazy`");
  }
  if (o.veths_size() > 0) return Refuse("veths", "cairn does not move veth pairs; hand the network namespace over");
  if (o.exec_cmd_size() > 0) return Refuse("exec_cmd", "cairn does not run a command after restore");
  if (o.auto_ext_mnt() || o.ext_sharing() || o.ext_masters()) {
    return Refuse("auto_ext_mnt/ext_sharing/ext_masters", "name each external mount with ext_mnt");
  }
  if (o.skip_mnt_size() > 0) return Refuse("skip_mnt", "every mount of a container is saved or named external");
  if (o.enable_fs_size() > 0) return Refuse("enable_fs", "cairn mounts again only proc, sysfs, tmpfs, devpts and mqueue");
  if (o.unix_sk_ino_size() > 0) return Refuse("unix_sk_ino", "cairn does not take external unix sockets by inode");
  if (o.join_ns_size() > 0) return Refuse("join_ns", "cairn does not join namespaces other than a handed-over network one");
  if (o.has_cgroup_props() || o.has_cgroup_props_file() || o.cgroup_dump_controller_size() > 0) {
    return Refuse("cgroup_props", "cairn leaves cgroup properties to the runtime, which sets them");
  }
  if (o.has_lsm_profile()) {
    return Refuse("lsm_profile", "cairn does not change a restored process's LSM profile");
  }
  if (o.has_manage_cgroups_mode() && o.manage_cgroups_mode() != criu_rpc::CG_IGNORE &&
      o.manage_cgroups_mode() != criu_rpc::CG_SOFT && o.manage_cgroups_mode() != criu_rpc::CG_DEFAULT &&
      o.manage_cgroups_mode() != criu_rpc::CG_NONE) {
    return Refuse("manage_cgroups_mode full/strict/props",
                  "cairn saves no cgroup properties: the runtime places the processes and sets the properties "
                  "(use soft or ignore)");
  }
  if (o.has_config_file()) {
    struct stat st {};
    if (::stat(o.config_file().c_str(), &st) == 0 && st.st_size > 0) {
      return Refuse("config_file " + o.config_file(),
                    "cairn does not read CRIU configuration files: move its options into the runtime's request");
    }
  }
  if (o.empty_ns() & ~static_cast<uint32_t>(CLONE_NEWNET)) {
    return Refuse(absl::StrFormat("empty_ns %#x", o.empty_ns()), "only the network namespace can be left empty");
  }
  return absl::OkStatus();
}

// The runtime's descriptor `fd`, a directory, as a copy of ours.
absl::StatusOr<UniqueFd> OpenedDir(pid_t peer, int fd, const char* what) {
  std::string path = absl::StrCat("/proc/", peer, "/fd/", fd);
  UniqueFd mine(::open(path.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!mine.valid()) return ErrnoStatus(absl::StrFormat("open the runtime's %s (its fd %d, %s)", what, fd, path));
  return mine;
}

}  // namespace

absl::StatusOr<RequestDirs> OpenRequestDirs(const criu_rpc::Options& opts, pid_t peer) {
  RequestDirs dirs;
  ASSIGN_OR_RETURN(UniqueFd images, OpenedDir(peer, opts.images_dir_fd(), "images directory"));
  dirs.images = absl::StrCat("/proc/self/fd/", images.get());
  dirs.work = dirs.images;
  dirs.held.push_back(std::move(images));
  if (opts.has_work_dir_fd()) {
    ASSIGN_OR_RETURN(UniqueFd work, OpenedDir(peer, opts.work_dir_fd(), "work directory"));
    dirs.work = absl::StrCat("/proc/self/fd/", work.get());
    dirs.held.push_back(std::move(work));
  }
  return dirs;
}

std::string ImageDir(const std::string& images) { return absl::StrCat(images, "/", kImageSubdir); }

std::string ParentLink(const std::string& images) { return absl::StrCat(images, "/", kParentLinkName); }

absl::StatusOr<DumpRequest> DumpFromRequest(const criu_rpc::Options& o, bool pre_dump, const std::string& images) {
  RETURN_IF_ERROR(RefuseCommon(o));
  if (o.inherit_fd_size() > 0 || o.rst_sibling()) return Refuse("inherit_fd/rst_sibling", "these are restore options");
  DumpRequest r;
  dump::DumpOptions& d = r.dump;
  d.pid = o.has_pid() ? o.pid() : 0;
  if (d.pid <= 0) return absl::InvalidArgumentError("dump request without the pid of the container's init");
  d.tree = true;
  d.dir = ImageDir(images);
  d.leave_running = o.leave_running() || pre_dump;
  if (o.has_parent_img()) {
    const std::string& p = o.parent_img();
    if (p.empty() || p.find('\0') != std::string::npos) {
      return absl::InvalidArgumentError("parent_img is empty: name the previous pre-dump's images directory");
    }
    r.parent_target = absl::StrCat(p, p.back() == '/' ? "" : "/", kImageSubdir);
    d.parent = ParentLink(images);
  }
  // Writes are tracked after a pre-dump (for the next one or the dump) and after a dump that
  // leaves the container running with track_mem. A first pre-dump copies memory while the
  // container runs and freezes it only for what was written meanwhile.
  d.track = d.leave_running && (pre_dump || o.track_mem());
  d.pre_copy = pre_dump && d.parent.empty();
  // As CRIU's, a pre-dump is memory only (runc sends it no mounts, devices or descriptors to
  // name): the dump built on it saves everything else.
  d.pages_only = pre_dump;
  if (o.tcp_established() && o.tcp_close()) return Refuse("tcp_established with tcp_close", "choose one");
  d.tcp_established = o.tcp_established();
  d.tcp_close = o.tcp_close();
  if (pre_dump) d.tcp_established = d.tcp_close = false;  // its sockets are the dump's to save
  if (o.has_freeze_cgroup()) {
    // Only a v1 freezer cgroup is used the way cairn uses one (dump/freezer_hold.h).
    if (absl::StrContains(o.freeze_cgroup(), "/freezer")) d.freezer_cgroup = o.freeze_cgroup();
  }
  // A container its runtime paused cannot be copied while it runs (it does not run): its
  // pre-dump is taken frozen, as any dump of it (the dump thaws it only to stop it).
  if (d.pre_copy && !d.freezer_cgroup.empty() && dump::FreezerState(d.freezer_cgroup) == "FROZEN") d.pre_copy = false;
  for (const criu_rpc::KeyValue& m : o.ext_mnt()) d.container.external_mounts[m.key()] = m.value();
  for (const std::string& e : o.external()) {
    // "net[INODE]:KEY", "pid[INODE]:KEY": the container's network or PID namespace is the
    // runtime's (a pod's), handed over again at restore.
    const char* kind = absl::StartsWith(e, "net[") ? "net" : absl::StartsWith(e, "pid[") ? "pid" : nullptr;
    if (kind == nullptr) {
      return Refuse("external " + e,
                    "cairn takes only the network and PID namespaces (net[INODE]:KEY, pid[INODE]:KEY) as external");
    }
    size_t close = e.find("]:");
    uint64_t inode = 0;
    if (close == std::string::npos || !absl::SimpleAtoi(e.substr(4, close - 4), &inode)) {
      return absl::InvalidArgumentError(absl::StrFormat("external '%s': expected %s[INODE]:KEY", e, kind));
    }
    struct stat st {};
    std::string ns = absl::StrCat("/proc/", d.pid, "/ns/", kind);
    if (::stat(ns.c_str(), &st) != 0) return ErrnoStatus("stat " + ns);
    if (st.st_ino != inode) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "external '%s' names %s namespace %d, but the container's is %d", e, kind, inode, st.st_ino));
    }
    (kind[0] == 'n' ? d.container.external_net : d.container.external_pid) = e.substr(close + 2);
  }
  d.container.empty_net = (o.empty_ns() & CLONE_NEWNET) != 0;
  // The runtime's own ends of the container's stdio (runc writes descriptors.json, the links of
  // the init's fds 0-2 as it made them, before it asks for the dump, and hands the pipes among
  // them over again at restore).
  if (absl::StatusOr<std::string> json = ReadFile(images + "/descriptors.json"); json.ok()) {
    for (size_t at = json->find("pipe:["); at != std::string::npos; at = json->find("pipe:[", at + 1)) {
      size_t end = json->find(']', at);
      if (end != std::string::npos) d.container.handed_over.insert(json->substr(at, end - at + 1));
    }
  }
  return r;
}

absl::StatusOr<restore::RestoreOptions> RestoreFromRequest(const criu_rpc::Options& o, const std::string& images) {
  RETURN_IF_ERROR(RefuseCommon(o));
  if (o.leave_running() || o.track_mem() || o.has_parent_img()) {
    return Refuse("leave_running/track_mem/parent_img", "these are dump options");
  }
  if (!o.has_root() || o.root().empty()) {
    return absl::InvalidArgumentError("restore request without `root`, the container's root file system");
  }
  restore::RestoreOptions r;
  r.dir = ImageDir(images);
  r.container.root = o.root();
  for (const criu_rpc::KeyValue& m : o.ext_mnt()) r.container.external_mounts[m.key()] = m.value();
  for (const criu_rpc::InheritedFd& f : o.inherit_fd()) {
    if (::fcntl(f.fd(), F_GETFD) < 0) {
      return absl::InvalidArgumentError(absl::StrFormat("inherit_fd %s: descriptor %d was not passed", f.key(), f.fd()));
    }
    r.inherited[f.key()] = f.fd();
  }
  return r;
}

}  // namespace cairn::criu_compat
