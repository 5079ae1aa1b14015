#include "engine/dump/namespaces.h"

#include <time.h>
#include <unistd.h>

#include <map>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "absl/strings/str_split.h"
#include "common/boot_id.h"
#include "common/clock.h"
#include "common/file_util.h"
#include "common/status.h"
#include "engine/proc/id_map.h"
#include "engine/proc/stat.h"

namespace cairn::dump {
absl::StatusOr<std::string> NamespaceLink(pid_t pid, const char* ns) {
  std::string link = absl::StrCat("/proc/", pid, "/ns/", ns);
  char buf[256];
  ssize_t n = ::readlink(link.c_str(), buf, sizeof buf);
  if (n < 0) return ErrnoStatus("readlink " + link);
  return std::string(buf, static_cast<size_t>(n));
}

absl::Status RecordTimeNamespace(pid_t root, image::Checkpoint* ckpt) {
  auto mine = NamespaceLink(::getpid(), "time");
  auto theirs = NamespaceLink(root, "time");
  if (!mine.ok() || !theirs.ok()) return absl::OkStatus();  // a kernel without time namespaces
  image::TimeNamespace* t = ckpt->mutable_time_ns();
  t->set_machine_clocks(*mine == *theirs);
  std::string path = absl::StrCat("/proc/", root, "/timens_offsets");
  ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    std::vector<absl::string_view> f = absl::StrSplit(line, ' ', absl::SkipEmpty());
    int64_t secs = 0, nsecs = 0;
    if (f.size() != 3 || !absl::SimpleAtoi(f[1], &secs) || !absl::SimpleAtoi(f[2], &nsecs)) {
      return absl::DataLossError(absl::StrCat(path, ": unexpected line '", line, "'"));
    }
    int64_t offset = secs * 1000000000 + nsecs;
    if (f[0] == "monotonic" || f[0] == "1") t->set_monotonic_offset_ns(offset);
    if (f[0] == "boottime" || f[0] == "7") t->set_boottime_offset_ns(offset);
  }
  t->set_monotonic_ns(ClockNs(CLOCK_MONOTONIC) + t->monotonic_offset_ns());
  t->set_boottime_ns(ClockNs(CLOCK_BOOTTIME) + t->boottime_offset_ns());
  t->set_realtime_ns(ClockNs(CLOCK_REALTIME));
  ASSIGN_OR_RETURN(std::string boot, BootId());
  t->set_boot_id(boot);
  return absl::OkStatus();
}

namespace {

// "cairn/NAME" when `pid` runs in a cgroup cairn made for a job, else "".
std::string JobCgroup(pid_t pid) {
  auto text = ReadFile(absl::StrCat("/proc/", pid, "/cgroup"));
  if (!text.ok()) return "";
  for (absl::string_view line : absl::StrSplit(*text, '\n', absl::SkipEmpty())) {
    std::vector<absl::string_view> f = absl::StrSplit(line, absl::MaxSplits(':', 2));
    if (f.size() == 3 && f[1] == "freezer" && absl::StartsWith(f[2], "/cairn/")) return std::string(f[2].substr(1));
  }
  return "";
}

}  // namespace

absl::Status CheckNamespaces(pid_t root, bool external_pid) {
  ASSIGN_OR_RETURN(proc::Status st, proc::ReadStatus(root));
  bool nested = st.nspids.size() > 1;
  if (nested && st.nspids.size() > 2) {
    return absl::UnimplementedError(absl::StrCat("pid ", root, " is in a nested PID namespace; not supported"));
  }
  if (external_pid && !nested) {
    return absl::InvalidArgumentError(absl::StrCat(
        "pid ", root, " is in the host's PID namespace, which the request names as an external one"));
  }
  if (nested && st.nspids.back() != 1 && !external_pid) {
    return absl::UnimplementedError(absl::StrCat(
        "pid ", root, " lives in a PID namespace (as pid ", st.nspids.back(),
        ") but is not its init; checkpoint the namespace's init with --tree (for a job: cairn dump --job NAME)"));
  }
  ASSIGN_OR_RETURN(std::string mine, NamespaceLink(::getpid(), "mnt"));
  ASSIGN_OR_RETURN(std::string theirs, NamespaceLink(root, "mnt"));
  // A user namespace of its own maps its ids and capabilities onto others of the machine's: a
  // container's is made again with its maps (image.proto UserNamespace); any other would come
  // back without one, its root the machine's.
  ASSIGN_OR_RETURN(bool own_user, proc::OwnUserNamespace(root));
  if (own_user) {
    ASSIGN_OR_RETURN(bool child, proc::UserNamespaceIsChild(root));
    if (!child) {
      return absl::UnimplementedError(absl::StrCat(
          "pid ", root, " runs in a user namespace nested in another: cairn makes again only a container's own user "
          "namespace, one level below the host's"));
    }
    if (external_pid) {
      return absl::UnimplementedError(absl::StrCat(
          "pid ", root, " runs in a user namespace of its own and in a PID namespace that is another's: cairn does "
          "not restore the two together (its processes could not choose their ids there)"));
    }
    if (!nested || mine == theirs) {
      return absl::UnimplementedError(absl::StrCat(
          "pid ", root, " runs in a user namespace of its own outside a container (no PID and mount namespace of "
          "its own): cairn makes a user namespace again only for a container; without one its ids and capabilities "
          "would be the machine's"));
    }
  }
  if (mine != theirs && !nested) {
    return absl::UnimplementedError(absl::StrCat(
        "pid ", root, " lives in another mount namespace; only jobs started with `cairn run` can be checkpointed "
        "with their namespaces"));
  }
  return absl::OkStatus();
}

absl::Status CheckSameNamespaces(pid_t root, pid_t pid) {
  for (const char* ns : {"user", "mnt", "net", "uts", "ipc", "cgroup", "pid", "time"}) {
    absl::StatusOr<std::string> theirs = NamespaceLink(pid, ns);
    if (!theirs.ok() && absl::IsNotFound(theirs.status())) continue;  // a kernel without it, or it exited
    RETURN_IF_ERROR(theirs.status());
    ASSIGN_OR_RETURN(std::string roots, NamespaceLink(root, ns));
    if (*theirs != roots) {
      return absl::UnimplementedError(absl::StrFormat(
          "pid %d of the tree is in a %s namespace other than its root's (pid %d; it unshared or joined one): cairn "
          "makes a tree again in its root's namespaces only — checkpoint that process on its own, or keep the tree "
          "in one set of namespaces",
          pid, ns, root));
    }
  }
  return absl::OkStatus();
}

absl::Status LocalizeIds(pid_t root, image::Checkpoint* ckpt) {
  ASSIGN_OR_RETURN(proc::Status rs, proc::ReadStatus(root));
  if (rs.nspids.size() < 2) return absl::OkStatus();
  ckpt->set_own_pid_ns(true);
  ASSIGN_OR_RETURN(std::string mine, NamespaceLink(::getpid(), "mnt"));
  ASSIGN_OR_RETURN(std::string theirs, NamespaceLink(root, "mnt"));
  ckpt->set_own_mount_ns(mine != theirs);
  ckpt->set_cgroup(JobCgroup(root));

  std::vector<image::Process*> procs = {ckpt->mutable_process()};
  for (auto& d : *ckpt->mutable_descendants()) procs.push_back(&d);
  std::map<pid_t, pid_t> local;  // host id -> id inside the namespace
  for (image::Process* p : procs) {
    if (p->zombie()) {
      // A zombie's status file still shows its ids.
      auto zs = proc::ReadStatus(p->pid());
      if (zs.ok() && !zs->nspids.empty()) local[p->pid()] = zs->nspids.back();
      continue;
    }
    for (const image::Thread& t : p->threads()) {
      ASSIGN_OR_RETURN(proc::Status ts, proc::ReadTaskStatus(p->pid(), t.tid()));
      if (ts.nspids.size() != 2) {
        return absl::FailedPreconditionError(absl::StrCat("thread ", t.tid(), " is not in the job's PID namespace"));
      }
      local[t.tid()] = ts.nspids.back();
    }
  }
  auto map = [&](int32_t host) -> int32_t {
    auto it = local.find(host);
    return it == local.end() ? 0 : it->second;  // outside the namespace: no id inside it
  };
  for (image::Process* p : procs) {
    p->set_pid(map(p->pid()));
    p->set_ppid(map(p->ppid()));
    p->set_pgid(map(p->pgid()));
    p->set_sid(map(p->sid()));
    if (p->ctty_foreground() != 0) p->set_ctty_foreground(map(p->ctty_foreground()));
    for (auto& t : *p->mutable_threads()) t.set_tid(map(t.tid()));
    for (auto& pt : *p->mutable_posix_timers()) {
      if (pt.notify_tid() != 0) pt.set_notify_tid(map(pt.notify_tid()));
    }
  }
  // The descriptors: the processes', and those only messages in flight hold.
  procs.push_back(ckpt->mutable_in_flight());
  for (image::Process* p : procs) {
    for (auto& fd : *p->mutable_fds()) {
      if (fd.dup_of_pid() != 0) fd.set_dup_of_pid(map(fd.dup_of_pid()));
      if (fd.owner().pid() != 0) fd.mutable_owner()->set_pid(map(fd.owner().pid()));
      if (fd.pidfd_pid() != 0) fd.set_pidfd_pid(map(fd.pidfd_pid()));
      for (auto& l : *fd.mutable_locks()) {
        if (l.pid() != 0) l.set_pid(map(l.pid()));
      }
      for (auto& f : *fd.mutable_in_flight()) {
        for (auto& ref : *f.mutable_files()) {
          if (ref.pid() == 0) continue;  // the holder's
          int32_t inside = map(ref.pid());
          if (inside == 0) {  // 0 would name the holder
            return absl::InternalError(absl::StrCat("a descriptor in flight names pid ", ref.pid(),
                                                    ", which is not in the job's PID namespace"));
          }
          ref.set_pid(inside);
        }
      }
    }
  }
  if (ckpt->in_flight().fds_size() == 0) ckpt->clear_in_flight();
  return absl::OkStatus();
}

}  // namespace cairn::dump
