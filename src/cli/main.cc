// `cairn`: checkpoint a running process from the outside and bring it back.

#include <signal.h>
#include <sys/wait.h>
#include <sys/mount.h>

#include <filesystem>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <ctime>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <google/protobuf/util/json_util.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "integrations/criu/install.h"
#include "integrations/criu/service.h"
#include "absl/strings/str_join.h"
#include "cli/controller_commands.h"
#include "cli/daemon_commands.h"
#include "cli/exit_codes.h"
#include "cli/help_formats.h"
#include "cli/output.h"
#include "cli/slurm_commands.h"
#include "common/file_util.h"
#include "common/log.h"
#include "common/sockaddr.h"
#include "common/status.h"
#include "common/stop_points.h"
#include "engine/net/nft_netlink.h"
#include "engine/check/check.h"
#include "engine/net/claim.h"
#include "engine/net/netlock.h"
#include "engine/dump/devices.h"
#include "engine/dump/dump.h"
#include "engine/dump/guardian.h"
#include "engine/image/chain.h"
#include "engine/image/compact.h"
#include "engine/image/image.h"
#include "engine/job/job.h"
#include "engine/lazy/handler.h"
#include "engine/lazy/page_server.h"
#include "engine/machine/cpu.h"
#include "engine/restore/restore.h"

namespace cairn {
namespace {

using cli::Fail;
using cli::HumanBytes;

// What `inspect` shows of a kernel object's saved state ("" for files).
std::string KernelObjectDetail(const image::Fd& f) {
  switch (f.kind()) {
    case image::Fd::EVENTFD:
      return absl::StrFormat(" count %u%s", f.eventfd().count(), f.eventfd().semaphore() ? " semaphore" : "");
    case image::Fd::TIMERFD:
      return absl::StrFormat(" clock %d left %.3f s period %.3f s unread %u", f.timerfd().clock(),
                             static_cast<double>(f.timerfd().value_ns()) / 1e9,
                             static_cast<double>(f.timerfd().interval_ns()) / 1e9, f.timerfd().ticks());
    case image::Fd::SIGNALFD:
      return absl::StrFormat(" mask %#x", f.signalfd_mask());
    case image::Fd::EPOLL:
      return absl::StrFormat(" watching %d", f.epoll_size());
    case image::Fd::INOTIFY:
      return absl::StrFormat(" %d watch%s", f.inotify_size(), f.inotify_size() == 1 ? "" : "es");
    case image::Fd::UNIX_SOCKET:
    case image::Fd::INET_SOCKET: {
      if (!f.has_socket()) return absl::StrFormat(" pair with socket:[%u]", f.peer_ino());
      const image::SocketState& s = f.socket();
      if (s.reset()) return " reset (was " + s.reset_from() + ")";
      std::string out;
      if (!s.bound().empty()) out += " bound " + FormatSockaddr(s.bound());
      if (s.listening()) out += absl::StrFormat(" listening (backlog %d)", s.backlog());
      if (!s.peer().empty()) out += " connected to " + FormatSockaddr(s.peer());
      if (s.options_size() > 0) out += absl::StrFormat(" %d option%s", s.options_size(), s.options_size() == 1 ? "" : "s");
      return out.empty() ? " unused" : out;
    }
    default:
      return "";
  }
}

// The image key (image/seal.h) of `path` (default: the node's, made on first use); none with
// `trust_unsigned`, where the caller then neither checks seals nor needs a key.
absl::StatusOr<std::optional<image::ImageKey>> KeyFor(const std::string& path, bool trust_unsigned) {
  if (trust_unsigned) {
    std::fprintf(stderr, "cairn: warning: --trust-unsigned: the checkpoint's seal is not checked\n");
    return std::optional<image::ImageKey>();
  }
  auto k = image::ImageKey::LoadOrCreate(path.empty() ? image::DefaultImageKeyPath() : path);
  if (!k.ok()) return Annotate(k.status(), "--image-key");
  return std::optional<image::ImageKey>(std::move(*k));
}

int RunDump(int pid, std::string dir, bool leave_running, bool tree, bool tcp_close, bool tcp_established,
            const std::string& job_name,
            const std::string& parent, bool track, bool pre_copy, int max_rounds, int precopy_rate_mib, const std::string& compress,
            const std::string& image_key, const std::vector<std::string>& external_mounts, unsigned gpu_lock_timeout_ms) {
  dump::DumpOptions opts;
  opts.gpu_lock_timeout_ms = gpu_lock_timeout_ms;
  for (const std::string& e : external_mounts) {
    std::pair<std::string, std::string> kv = absl::StrSplit(e, absl::MaxSplits('=', 1));
    opts.container.external_mounts[kv.first] = kv.second.empty() ? kv.first : kv.second;
  }
  auto key = KeyFor(image_key, false);
  if (!key.ok()) return Fail(key.status());
  opts.seal_key = &**key;
  if (!job_name.empty()) {
    auto rec = job::Load(job_name);
    if (!rec.ok()) return Fail(rec.status());
    pid = rec->host_pid;
    tree = true;
    opts.job_name = job_name;
    if (dir.empty()) dir = absl::StrCat(rec->dir, "/checkpoint-", ::time(nullptr));
  }
  if (pid == 0) return Fail(absl::InvalidArgumentError("cairn dump: give --pid PID or --job NAME"));
  if (dir.empty()) return Fail(absl::InvalidArgumentError("cairn dump: give --dir DIR"));
  opts.pid = pid;
  opts.tree = tree;
  opts.dir = dir;
  opts.leave_running = leave_running;
  opts.tcp_close = tcp_close;
  opts.tcp_established = tcp_established;
  opts.parent = parent;
  opts.track = track;
  opts.pre_copy = pre_copy;
  if (!compress.empty()) {
    auto c = image::ParseCompression(compress);
    if (!c.ok()) return Fail(c.status());
    opts.compression = *c;
  }
  opts.precopy.max_rounds = max_rounds;
  opts.precopy.rate_bytes = static_cast<uint64_t>(precopy_rate_mib) << 20;
  if (track && !leave_running) {
    return Fail(absl::InvalidArgumentError("cairn dump: --track needs --leave-running (a killed process has no "
                                           "writes to track)"));
  }
  bool tty = ::isatty(STDERR_FILENO);
  if (tty) {
    opts.progress = [last = -1](uint64_t done, uint64_t total) mutable {
      if (total < (64u << 20)) return;
      int pct = static_cast<int>(done * 100 / total);
      if (pct == last) return;
      last = pct;
      int bar = pct / 4;
      std::fprintf(stderr, "\r[%-25s] %3d%% %s", std::string(bar, '#').c_str(), pct, HumanBytes(done).c_str());
      if (done == total) std::fprintf(stderr, "\n");
    };
  }
  // SIGTERM (timeout, systemd), SIGINT (^C) and SIGHUP end the dump cleanly: it stops at its
  // next stop point, puts the processes back as they were and removes what it wrote
  // (common/stop_points.h). Whatever kills it instead, its guardian does the same.
  struct sigaction cancel {};
  cancel.sa_handler = [](int sig) { RequestCancel(sig); };
  sigemptyset(&cancel.sa_mask);
  for (int sig : {SIGTERM, SIGINT, SIGHUP}) ::sigaction(sig, &cancel, nullptr);
  auto r = dump::Dump(opts);
  if (!r.ok()) return Fail(r.status());
  std::printf("dumped pid %d to %s: %d process%s, %d threads, %d areas, %llu pages (%s) in %.3f s (frozen %.3f s), %s\n",
              pid, dir.c_str(), r->processes, r->processes == 1 ? "" : "es", r->threads, r->areas, static_cast<unsigned long long>(r->pages),
              HumanBytes(static_cast<double>(r->bytes)).c_str(), r->total_seconds, r->frozen_seconds,
              leave_running ? "left running" : "killed");
  if (!r->gpu_processes.empty()) {
    std::printf("GPU: the device state of pid %s was saved through the NVIDIA driver (%s)\n",
                absl::StrJoin(r->gpu_processes, ", ").c_str(),
                leave_running ? "put back onto its GPUs after the dump" : "restored onto a GPU by cairn restore");
  }
  if (r->precopy_rounds > 0) {
    std::printf("pre-copy: %d round%s copied %s while the process ran; downtime %.3f s (frozen to copy the rest), "
                "plus %.3f s to start tracking writes; total %.3f s\n",
                r->precopy_rounds, r->precopy_rounds == 1 ? "" : "s", HumanBytes(static_cast<double>(r->precopy_bytes)).c_str(),
                r->frozen_seconds, r->start_freeze_seconds, r->total_seconds);
  }
  if (r->incremental) std::printf("incremental: only pages written since %s\n", parent.c_str());
  if (r->tracking) std::printf("tracking writes for a later dump --parent %s\n", dir.c_str());
  for (const std::string& n : r->notes) std::printf("note: %s\n", n.c_str());
  return 0;
}

int RunRestore(const std::string& dir, bool detach, bool lazy, bool verify, const std::string& page_server,
               const std::string& token_file, const std::string& image_key, bool trust_unsigned,
               const std::string& as_user, const restore::ContainerSetup& container, const std::map<int, int>& gpu_map) {
  restore::RestoreOptions opts;
  opts.container = container;
  opts.gpu_map = gpu_map;
  if (!as_user.empty()) {
    absl::StatusOr<restore::RestoreOptions::Owner> owner = job::OwnerOf(as_user);
    if (!owner.ok()) return Fail(Annotate(owner.status(), "restore --as-user"));
    opts.only_as = *owner;
  }
  // A page server checks the seal of what it serves (RunPageServer); a local one is checked here.
  absl::StatusOr<std::optional<image::ImageKey>> key = std::optional<image::ImageKey>();
  if (page_server.empty()) key = KeyFor(image_key, trust_unsigned);
  if (!key.ok()) return Fail(key.status());
  if (key->has_value()) opts.seal_key = &**key;
  opts.dir = dir;
  opts.lazy = lazy;
  opts.verify = verify;
  opts.page_server = page_server;
  opts.token_file = token_file;
  if (dir.empty() == page_server.empty()) {
    return Fail(absl::InvalidArgumentError(
        "restore needs exactly one of --dir DIR (a local checkpoint) or --page-server HOST:PORT (a checkpoint served "
        "by `cairn page-server`, metadata included)"));
  }
  const std::string where = page_server.empty() ? dir : "page server " + page_server;
  if (const char* t = std::getenv("CAIRN_FILL_THREADS")) opts.fill_threads = std::max(1, std::atoi(t));
  auto r = restore::Restore(opts);
  if (!r.ok()) return Fail(r.status());
  std::fprintf(detach ? stdout : stderr, "restored pid %d from %s: %d process%s, %s in %.3f s%s\n", r->pid,
               where.c_str(), r->processes, r->processes == 1 ? "" : "es",
               HumanBytes(static_cast<double>(r->bytes)).c_str(), r->seconds,
               verify ? absl::StrFormat(" (verified in %.3f s)", r->verify_seconds).c_str() : "");
  if (!r->job_name.empty()) {
    auto rec = job::Load(r->job_name);
    job::JobRecord updated = rec.ok() ? *rec : job::JobRecord{r->job_name, dir, 0, "", "cairn/" + r->job_name};
    updated.host_pid = r->pid;
    absl::Status saved = job::Save(updated);
    if (!saved.ok()) std::fprintf(stderr, "cairn: warning: job record not updated: %s\n", std::string(saved.message()).c_str());
  }
  std::fflush(nullptr);
  if (detach) return 0;
  int status = 0;
  while (::waitpid(r->pid, &status, 0) < 0) {
    if (errno != EINTR) return Fail(absl::InternalError(absl::StrCat("waitpid ", r->pid, ": ", std::strerror(errno))));
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL && lazy) {
    std::fprintf(stderr, "cairn: restored pid %d was killed (SIGKILL); with --lazy, its page handler says why above\n",
                 r->pid);
  }
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

int RunPageServer(lazy::PageServerOptions opts, uint64_t max_rate_kib, const std::string& image_key,
                  bool trust_unsigned) {
  opts.max_rate = max_rate_kib * 1024;
  // It serves only a checkpoint whose seals hold: its clients trust it (by its token) for that.
  auto key = KeyFor(image_key, trust_unsigned);
  if (!key.ok()) return Fail(key.status());
  if (key->has_value()) {
    auto img = image::OpenChain(opts.dir);
    if (!img.ok()) return Fail(Annotate(img.status(), "cannot serve " + opts.dir));
    for (const image::ImageReader* l = img->get(); l != nullptr; l = l->parent()) {
      if (absl::Status s = image::CheckSeal(l->dir(), **key); !s.ok()) return Fail(Annotate(s, "cannot serve " + opts.dir));
    }
  }
  opts.on_listening = [&](const std::string& where) {
    std::printf("page server: serving %s on %s\n", opts.dir.c_str(), where.c_str());
    std::fflush(stdout);
  };
  absl::Status s = lazy::RunPageServer(opts);
  if (!s.ok()) return Fail(s);
  std::printf("page server: the restore has every page; done\n");
  return 0;
}

// What `cairn inspect` says of a checkpoint's seal (image/seal.h), checked with this node's
// key when it has one (inspect makes none). A broken seal is an error, like a bad checksum.
absl::StatusOr<std::string> SealVerdict(const std::string& dir, const std::string& image_key) {
  std::string path = image_key.empty() ? image::DefaultImageKeyPath() : image_key;
  if (::access(path.c_str(), F_OK) != 0) {
    return std::string(::access((dir + "/" + image::kSealFile).c_str(), F_OK) == 0
                           ? "present, not checked (no image key here: " + path + ")"
                           : "none (a restore needs --trust-unsigned)");
  }
  auto key = image::ImageKey::Load(path);
  if (!key.ok()) return Annotate(key.status(), "--image-key");
  absl::Status s = image::CheckSeal(dir, *key);
  if (s.ok()) return absl::StrCat("valid (image key ", key->id(), ", this node's)");
  if (absl::IsFailedPrecondition(s)) return std::string("none (a restore needs --trust-unsigned)");
  if (absl::IsPermissionDenied(s)) return std::string(s.message());
  return s;
}

int RunInspect(const std::string& dir, bool json, const std::string& image_key) {
  auto img = image::OpenChain(dir);
  if (!img.ok()) return Fail(img.status());
  absl::Status verified;
  for (const image::ImageReader* l = img->get(); l != nullptr && verified.ok(); l = l->parent()) {
    verified = l->VerifyAll();
  }
  std::vector<std::pair<std::string, std::string>> seals;  // per link: dir, verdict
  for (const image::ImageReader* l = img->get(); l != nullptr && verified.ok(); l = l->parent()) {
    absl::StatusOr<std::string> v = SealVerdict(l->dir(), image_key);
    if (!v.ok()) {
      verified = v.status();
      break;
    }
    seals.emplace_back(l->dir(), *v);
  }
  const image::Checkpoint& c = (*img)->meta();
  if (json) {
    std::string out;
    google::protobuf::util::JsonPrintOptions jo;
    jo.add_whitespace = true;
    jo.preserve_proto_field_names = true;
    auto s = google::protobuf::util::MessageToJsonString(c, &out, jo);
    if (!s.ok()) return Fail(absl::InternalError("cannot encode metadata as JSON"));
    std::printf("%s", out.c_str());
  } else {
    const image::Process& p = c.process();
    std::printf("checkpoint %s\n  format version %u, written by cairn %s on %s (kernel %s)\n", dir.c_str(),
                c.format_version(), c.cairn_version().c_str(), c.hostname().c_str(), c.kernel().c_str());
    if (c.has_machine()) {
      const auto& m = c.machine();
      std::printf("machine: %s, %s%s; XSAVE %u bytes; kernel %s%s\n", m.cpu_model().c_str(),
                  machine::LevelName(static_cast<int>(m.cpu_level())).c_str(),
                  m.cpu_baseline() > 0
                      ? absl::StrCat(" (the job keeps to ", machine::LevelName(static_cast<int>(m.cpu_baseline())), ")").c_str()
                      : "",
                  m.xsave_size(), m.kernel_release().c_str(),
                  m.kernel_needs().empty() ? "" : absl::StrCat(", needing ", absl::StrJoin(m.kernel_needs(), ", ")).c_str());
    }
    std::printf("id %s%s\n", c.id().empty() ? "(none)" : c.id().c_str(),
                c.tracking() ? ", writes tracked since (can be a --parent)" : "");
    if (c.pages_only()) std::printf("pre-dump: memory only, the parent of checkpoints built on it (not restorable itself)\n");
    for (const auto& [link, verdict] : seals) {
      std::printf("seal%s: %s\n", seals.size() > 1 ? (" of " + link).c_str() : "", verdict.c_str());
    }
    if (c.downtime_seconds() > 0) {
      std::printf("pre-copy: %u rounds while running, frozen %.3f s\n", c.precopy_rounds(), c.downtime_seconds());
    }
    if (c.has_parent()) {
      std::printf("chain (newest first):\n");
      for (const image::ImageReader* l = img->get(); l != nullptr; l = l->parent()) {
        uint64_t data = 0;
        std::vector<const image::Process*> ps = {&l->meta().process()};
        for (const auto& d : l->meta().descendants()) ps.push_back(&d);
        for (const image::Process* q : ps) {
          for (const auto& v : q->vmas()) {
            for (const auto& b : v.blocks()) data += b.zero() ? 0 : b.length();
          }
        }
        std::printf("  %s  id %s  %s  page data %s\n", l->dir().c_str(), l->meta().id().c_str(),
                    l->meta().has_parent() ? "incremental" : "full", HumanBytes(static_cast<double>(data)).c_str());
      }
    }
    std::printf("process %d (%s), parent %d, group %d, session %d, cwd %s\n  exe %s\n", p.pid(), p.comm().c_str(),
                p.ppid(), p.pgid(), p.sid(), p.cwd().c_str(), p.mm().exe().c_str());
    std::printf("threads: %d\n", p.threads_size());
    for (const auto& t : p.threads()) {
      std::printf("  tid %d (%s) sigmask %#llx pending %d rseq %#llx\n", t.tid(), t.comm().c_str(),
                  static_cast<unsigned long long>(t.blocked_mask()), t.pending_size(),
                  static_cast<unsigned long long>(t.rseq().addr()));
    }
    uint64_t saved = 0;
    std::printf("memory areas: %d\n", p.vmas_size());
    for (const auto& v : p.vmas()) {
      uint64_t b = 0;
      for (const auto& blk : v.blocks()) b += blk.zero() ? 0 : blk.length();
      saved += b;
      std::printf("  %012llx-%012llx %c%c%c%c %10s saved %10s%s  %s\n", static_cast<unsigned long long>(v.start()),
                  static_cast<unsigned long long>(v.end()), v.prot() & 1 ? 'r' : '-', v.prot() & 2 ? 'w' : '-',
                  v.prot() & 4 ? 'x' : '-', v.shared() ? 's' : 'p', HumanBytes(static_cast<double>(v.end() - v.start())).c_str(),
                  HumanBytes(static_cast<double>(b)).c_str(), v.inherits() ? " +parent" : "", v.path().c_str());
    }
    std::printf("  page data: %s\n", HumanBytes(static_cast<double>(saved)).c_str());
    std::printf("files: %d\n", p.fds_size());
    for (const auto& f : p.fds()) {
      std::printf("  fd %d %s flags %#o pos %lld%s%s%s\n", f.fd(), f.path().c_str(), f.flags(),
                  static_cast<long long>(f.pos()), f.cloexec() ? " cloexec" : "", f.deleted() ? " (deleted, content saved)" : "",
                  KernelObjectDetail(f).c_str());
    }
    std::printf("signals: %d handlers, %d shared pending\n", p.sigactions_size(), p.shared_pending_size());
    std::printf("timers: %d interval, %d POSIX\n", p.itimers_size(), p.posix_timers_size());
    for (const auto& d : c.descendants()) {
      uint64_t b = 0;
      for (const auto& v : d.vmas()) {
        for (const auto& blk : v.blocks()) b += blk.zero() ? 0 : blk.length();
      }
      std::printf("descendant process %d (%s), parent %d, group %d, session %d: %s%d threads, %d areas (%s saved), "
                  "%d files\n",
                  d.pid(), d.comm().c_str(), d.ppid(), d.pgid(), d.sid(),
                  d.zombie() ? absl::StrFormat("zombie (wait status %#x), ", d.exit_code()).c_str() : "",
                  d.threads_size(), d.vmas_size(), HumanBytes(static_cast<double>(b)).c_str(), d.fds_size());
    }
    if (c.in_flight().fds_size() > 0) {
      std::printf("descriptors in flight that only their messages hold: %d\n", c.in_flight().fds_size());
      for (const auto& f : c.in_flight().fds()) std::printf("  %s%s\n", f.path().c_str(), KernelObjectDetail(f).c_str());
    }
    if (c.own_ipc_ns()) {
      uint64_t b = 0;
      for (const auto& shm : c.ipc().shm()) b += shm.size();
      std::printf("System V IPC (own namespace): %d segment%s (%s), %d semaphore set%s, %d message queue%s\n",
                  c.ipc().shm_size(), c.ipc().shm_size() == 1 ? "" : "s", HumanBytes(static_cast<double>(b)).c_str(),
                  c.ipc().sem_size(), c.ipc().sem_size() == 1 ? "" : "s", c.ipc().msg_size(),
                  c.ipc().msg_size() == 1 ? "" : "s");
    }
    if (c.has_container()) {
      const image::Container& k = c.container();
      std::printf("container: %d mounts over its root file system%s%s%s\n", k.mounts_size(),
                  k.own_uts_ns() ? absl::StrFormat(", host name %s", k.hostname()).c_str() : "",
                  k.own_net_ns() ? (k.external_net().empty() ? ", own network namespace (loopback)"
                                                             : absl::StrCat(", network namespace ", k.external_net()).c_str())
                                 : "",
                  c.own_ipc_ns() ? ", own IPC namespace" : "");
      if (k.has_user_ns()) {
        auto ranges = [](const google::protobuf::RepeatedPtrField<image::IdRange>& map) {
          std::vector<std::string> out;
          for (const image::IdRange& r : map) {
            out.push_back(absl::StrFormat("%u-%u -> %u-%u", r.inside(), r.inside() + r.count() - 1, r.outside(),
                                          r.outside() + r.count() - 1));
          }
          return absl::StrJoin(out, ", ");
        };
        std::printf("  user namespace of its own: uids %s; gids %s; setgroups %s\n",
                    ranges(k.user_ns().uid_map()).c_str(), ranges(k.user_ns().gid_map()).c_str(),
                    k.user_ns().setgroups_denied() ? "denied" : "allowed");
      }
      for (const image::Mount& m : k.mounts()) {
        std::string what = m.kind() == image::Mount::EXTERNAL ? "external " + m.external()
                           : m.kind() == image::Mount::BIND   ? absl::StrFormat("bind of %s", m.fs_root())
                                                              : m.fstype();
        std::printf("  %-24s %s%s%s\n", m.point().c_str(), what.c_str(), (m.flags() & MS_RDONLY) ? " ro" : "",
                    m.entries_size() > 0 ? absl::StrFormat(", %d files", m.entries_size()).c_str() : "");
      }
    }
    std::printf("checksums: %s\n", verified.ok() ? "all verified" : "FAILED");
  }
  if (!verified.ok()) return Fail(verified);
  return 0;
}

int RunCompact(const std::string& dir, const std::string& out, const std::string& image_key, bool trust_unsigned) {
  auto key = KeyFor(image_key, trust_unsigned);
  if (!key.ok()) return Fail(key.status());
  std::optional<image::ImageKey> seal_with = *key;
  if (!seal_with) {  // the input is trusted unchecked; the result is sealed all the same
    auto k = image::ImageKey::LoadOrCreate(image_key.empty() ? image::DefaultImageKeyPath() : image_key);
    if (!k.ok()) return Fail(Annotate(k.status(), "--image-key"));
    seal_with = *k;
  }
  auto r = image::Compact(dir, out, key->has_value() ? &**key : nullptr, &*seal_with);
  if (!r.ok()) return Fail(r.status());
  std::printf("compacted %s (a chain of %d checkpoint%s) into %s: %s of page data\n", dir.c_str(), r->links,
              r->links == 1 ? "" : "s", out.empty() ? dir.c_str() : out.c_str(),
              HumanBytes(static_cast<double>(r->bytes)).c_str());
  return 0;
}

int RunJob(const std::string& name, const std::string& dir, const std::vector<std::string>& argv,
           const std::string& user, const std::string& cpu_baseline, const std::string& env_file,
           const std::string& workdir) {
  job::RunOptions opts;
  opts.name = name;
  opts.dir = dir;
  opts.argv = argv;
  opts.workdir = workdir;
  if (!env_file.empty()) {
    absl::StatusOr<std::string> content = ReadFile(env_file);
    if (!content.ok()) return Fail(Annotate(content.status(), "run --env-file"));
    std::vector<std::string> env;
    for (absl::string_view e : absl::StrSplit(*content, '\0', absl::SkipEmpty())) env.emplace_back(e);
    opts.env = std::move(env);
  }
  if (!cpu_baseline.empty()) {
    absl::StatusOr<int> level = machine::ParseBaseline(cpu_baseline);
    if (!level.ok()) return Fail(Annotate(level.status(), "run --cpu-baseline"));
    if (*level > machine::ThisCpu().level) {
      return Fail(absl::FailedPreconditionError(absl::StrCat(
          "run --cpu-baseline ", machine::LevelName(*level), ": this machine's CPU (", machine::ThisCpu().model,
          ") is only ", machine::LevelName(machine::ThisCpu().level), "; choose that level or lower")));
    }
    opts.cpu_baseline = *level;
  }
  if (!user.empty()) {
    absl::StatusOr<job::UserIds> ids = job::LookupUser(user);
    if (!ids.ok()) return Fail(Annotate(ids.status(), "run --user"));
    opts.user = *ids;
  }
  auto rec = job::Run(opts);
  if (!rec.ok()) return Fail(rec.status());
  std::printf("job %s pid %d\nlogs %s/stdout.log %s/stderr.log\n", rec->name.c_str(), rec->host_pid, rec->dir.c_str(),
              rec->dir.c_str());
  return 0;
}

int RunCheck(bool fix) {
  bool all = true;
  for (const auto& f : check::ProbeFeatures()) {
    all = all && f.ok;
    std::printf("%-4s %-42s %s (%s)\n", f.ok ? "ok" : "MISSING", f.name.c_str(), f.detail.c_str(), f.needed_for.c_str());
  }
  std::printf(all ? "all features present\n" : "some features are missing; see above\n");
  // Dumps killed together with their guardians (dump/guardian.h, point 8).
  std::string journals = dump::JournalDir();
  if (fix) {
    absl::StatusOr<std::vector<std::string>> repaired = dump::RepairOrphanedDumps(journals);
    if (!repaired.ok()) return Fail(repaired.status());
    for (const std::string& line : *repaired) std::printf("%s\n", line.c_str());
  } else {
    absl::StatusOr<std::vector<std::string>> orphans = dump::FindOrphanedDumps(journals);
    if (!orphans.ok()) return Fail(orphans.status());
    for (const std::string& name : *orphans) {
      std::printf("dump journal %s/%s: a dump and its guardian were killed before they had put its processes back "
                  "(`cairn check --fix`, the next `cairn dump` or cairnd's start does it)\n",
                  journals.c_str(), name.c_str());
    }
    if (!orphans->empty()) {
      std::printf("%zu dump(s) left processes to put back: see above\n", orphans->size());
      all = false;
    }
    // GPU processes a failed put-back left locked or checkpointed by the driver (point 11).
    absl::StatusOr<std::vector<std::string>> held = dump::FailedDevicePutBacks(journals);
    if (!held.ok()) return Fail(held.status());
    for (const std::string& name : *held) {
      std::printf("dump journal %s/%s: its GPU processes are still locked or checkpointed by the NVIDIA driver (their "
                  "CUDA calls wait): `cairn check --fix` or the next `cairn dump` tries to put them back\n",
                  journals.c_str(), name.c_str());
      all = false;
    }
  }
  // Network locks (net/netlock.h): each holds the packets of the live TCP connections of a
  // checkpoint not restored here yet (or of a dump that was killed).
  if (!net::CheckNftables().ok()) {
    std::printf("nftables' nft is not installed: dump --tcp-established needs it (apt install nftables)\n");
    return all ? 0 : 1;
  }
  // A lock still needed is left alone: one a dump in progress names in its journal (its dumper
  // or its guardian lives), or one a live process claims (a restore, or cairnd for a job that
  // waits for its restore: net/claim.h).
  absl::StatusOr<std::vector<std::string>> dumping = dump::NetworkLocksOfRunningDumps(journals);
  if (!dumping.ok()) return Fail(dumping.status());
  // The host's namespace, then every other one (a container's dump locks its connections there).
  std::vector<net::NetworkNamespace> spaces = {{"", "the host's network namespace"}};
  absl::StatusOr<std::vector<net::NetworkNamespace>> others = net::OtherNetworkNamespaces();
  if (!others.ok()) return Fail(others.status());
  spaces.insert(spaces.end(), others->begin(), others->end());
  for (const net::NetworkNamespace& ns : spaces) {
    auto locks = net::ListNetworkLocks(ns.path);
    if (!locks.ok()) {
      if (ns.path.empty()) return Fail(locks.status());
      // A process that ended meanwhile took its namespace with it.
      CAIRN_LOG_DEBUG("event=netns_not_listed path={} error=\"{}\"", ns.path, locks.status().ToString());
      continue;
    }
    for (const std::string& table : *locks) {
      if (std::find(dumping->begin(), dumping->end(), table) != dumping->end()) {
        std::printf("network lock %s in %s: in use by a dump in progress (left alone)\n", table.c_str(),
                    ns.where.c_str());
        continue;
      }
      if (!fix) {
        std::printf("network lock %s in %s: holds the TCP packets of a checkpoint not restored on this host yet "
                    "(`cairn check --fix` removes it unless a restore or cairnd still needs it; its connections' "
                    "peers then see them reset)\n",
                    table.c_str(), ns.where.c_str());
        continue;
      }
      absl::StatusOr<std::string> claimer = net::RemoveUnclaimed(table, [&] {
        return ns.path.empty() ? net::RemoveNetworkLock(table) : net::RemoveNetworkLockIn(table, ns.path);
      });
      if (!claimer.ok() && ns.path.empty()) return Fail(claimer.status());
      if (!claimer.ok()) {  // (its namespace may have gone with its last process meanwhile)
        std::printf("network lock %s in %s not removed: %s\n", table.c_str(), ns.where.c_str(),
                    std::string(claimer.status().message()).c_str());
        all = false;
        continue;
      }
      if (!claimer->empty()) {
        std::printf("network lock %s in %s: in use by %s (left alone: a restore under way, or a cairnd job "
                    "waiting for its restore, which lifts it; `cairn job delete` lets it go)\n",
                    table.c_str(), ns.where.c_str(), claimer->c_str());
        continue;
      }
      std::printf("network lock %s in %s removed\n", table.c_str(), ns.where.c_str());
    }
  }
  return all ? 0 : 1;
}

}  // namespace
}  // namespace cairn

int main(int argc, char** argv) {
  // A command that deleted a network lock last would otherwise wait at its exit for the kernel
  // to free it (net/nft_netlink.h).
  std::atexit([] { cairn::net::LeaveChannelToChild(); });
  // Called as `criu` (cairn install --criu-shim) or `cairn criu-compat ...`: a container
  // runtime's checkpointer (integrations/criu/service.h), criu's command line.
  if (std::filesystem::path(argv[0]).filename() == "criu") {
    cairn::InitLogging(0);
    return cairn::criu_compat::CriuMain(argc, argv);
  }
  if (argc >= 2 && std::string(argv[1]) == "criu-compat" && !(argc == 3 && std::string(argv[2]) == "--help")) {
    cairn::InitLogging(0);
    return cairn::criu_compat::CriuMain(argc - 1, argv + 1);
  }
  CLI::App app{"cairn: checkpoint running Linux processes from the outside and restore them", "cairn"};
  app.set_version_flag("--version", std::string("cairn ") + CAIRN_VERSION);
  app.require_subcommand(1);
  int verbose = 0;
  app.add_flag("-v,--verbose", verbose, "More log output (repeat for debug)");

  int pid = 0;
  std::string dir;
  bool leave_running = false, detach = false, json = false, tree = false, tcp_close = false;
  std::string job_name;
  auto* dump = app.add_subcommand("dump", "Checkpoint a running process (or tree, or job) into a directory");
  auto* pid_opt = dump->add_option("--pid", pid, "Process to checkpoint");
  dump->add_option("--job", job_name, "Job (started by cairn run) to checkpoint, with its whole tree")->excludes(pid_opt);
  dump->add_option("--dir", dir, "Checkpoint directory to create (for a job: default JOBDIR/checkpoint-TIME)");
  std::vector<std::string> dump_external;
  dump->add_option("--external-mount", dump_external,
                   "A container: POINT[=KEY], a mount (as the container sees it) that the restore binds again from a "
                   "host path it is given under KEY (default: POINT) instead of saving or refusing it");
  dump->add_flag("--leave-running", leave_running, "Let the process carry on after the dump instead of killing it");
  dump->add_flag("--tree", tree, "Checkpoint the process and all its descendants");
  bool tcp_established = false;
  auto* tcp_close_opt = dump->add_flag("--tcp-close", tcp_close,
                                       "Save established TCP connections as reset (the program sees ECONNRESET and "
                                       "reconnects) instead of refusing them");
  dump->add_flag("--tcp-established", tcp_established,
                 "Save established TCP connections whole (sequence numbers, queues, options) under a network lock "
                 "(nftables) that the restore lifts: their peers notice only a pause")
      ->excludes(tcp_close_opt);
  std::string parent;
  bool track = false;
  dump->add_option("--parent", parent, "Incremental: save only the pages written since this checkpoint (a directory "
                                       "next to --dir, taken with --track or --parent)");
  bool pre_copy = false;
  int max_rounds = 8;
  dump->add_flag("--pre-copy", pre_copy, "Copy memory while the process runs; freeze it only to copy what was written "
                                          "meanwhile (downtime reported apart)");
  dump->add_option("--pre-copy-rounds", max_rounds, "Most copy rounds while the process runs (default 8)")
      ->check(CLI::Range(1, 100));
  int precopy_rate_mib = 0;
  dump->add_option("--pre-copy-rate", precopy_rate_mib,
                   "Copy at most this many MiB per second while the process runs (default: no limit)")
      ->check(CLI::Range(1, 1 << 20));
  std::string compress;
  dump->add_option("--compress", compress, "Compress page blocks: lz4, zstd or zstd:LEVEL (1-19), on every core");
  dump->add_flag("--track", track, "With --leave-running: track writes from now on, for a later dump --parent");
  unsigned gpu_lock_timeout_ms = 10000;
  dump->add_option("--gpu-lock-timeout", gpu_lock_timeout_ms,
                   "Processes holding CUDA state: how long the GPU driver may wait, in ms, for the work they submitted "
                   "before it locks them for the checkpoint (default 10000; 0: no limit)");
  std::string image_key;
  bool trust_unsigned = false;
  const char* key_help = "Image key file that seals checkpoints and checks their seals (default: $CAIRN_STATE_DIR/image.key "
                         "or /var/lib/cairn/image.key, made on first use; give every node of a cluster the same one)";
  const char* trust_help = "Restore a checkpoint whose seal is missing, made with another key, or broken (only one whose "
                           "origin you trust: its metadata decides what runs as root)";
  dump->add_option("--image-key", image_key, key_help);

  auto* restore = app.add_subcommand("restore", "Rebuild a checkpointed process with its PID and let it run");
  restore->add_option("--dir", dir, "Checkpoint directory");
  cairn::restore::ContainerSetup container;
  std::vector<std::string> restore_external;
  restore->add_option("--root", container.root,
                      "A container's checkpoint: the directory holding its root file system here; its mounts are made "
                      "again over it");
  restore->add_option("--external-mount", restore_external,
                      "A container's checkpoint: KEY=PATH, the host path of the mount the dump named external under KEY");
  std::string page_server, token_file;
  restore->add_option("--page-server", page_server,
                      "Take the checkpoint (metadata and pages) from `cairn page-server` at HOST:PORT instead of --dir");
  restore->add_option("--token-file", token_file, "With --page-server: file holding the server's token");
  restore->add_flag("--detach", detach, "Return once the process runs instead of waiting for it");
  std::vector<std::string> restore_gpu_map;
  restore->add_option("--gpu-map", restore_gpu_map,
                      "OLD=NEW (repeatable): restore the device state the dump took from its GPU OLD onto this "
                      "machine's GPU NEW (NVML indices; same model, enough free memory); default: the same index");
  bool lazy = false;
  restore->add_flag("--lazy", lazy,
                    "Let the process run before its memory is in: a page handler process serves each page on first "
                    "touch and copies the rest in the background, then exits");
  bool verify = false;
  restore->add_flag("--verify", verify,
                    "Before the processes run, read back what the kernel says about every object of the checkpoint "
                    "(memory layout, descriptors, credentials, limits, signals, timers...) and compare it with the "
                    "image; a difference fails the restore, naming the object and both values");
  restore->add_option("--image-key", image_key, key_help);
  restore->add_flag("--trust-unsigned", trust_unsigned, trust_help);
  std::string as_user;
  restore->add_option("--as-user", as_user,
                      "Restore only if every process of the checkpoint is this user's (name or uid: its uid and gid, "
                      "no capabilities unless root); otherwise refuse, restoring nothing");

  cairn::lazy::HandlerOptions lazy_opts;
  // A dump's guardian execs this when the GPU driver's side of the dump is left to undo
  // (engine/dump/guardian.h, point 11).
  std::string put_back_journal;
  int put_back_fd = -1;
  auto* gpu_put_back = app.add_subcommand("gpu-put-back", "Puts a killed dump's GPU processes back (run by its guardian)");
  gpu_put_back->group("");
  gpu_put_back->add_option("--journal", put_back_journal)->required();
  gpu_put_back->add_option("--journal-fd", put_back_fd)->required();
  auto* lazy_pages = app.add_subcommand("lazy-pages", "Page handler of restore --lazy (started by cairn itself)");
  lazy_pages->group("");
  lazy_pages->add_option("--dir", lazy_opts.dir);
  lazy_pages->add_option("--page-server", lazy_opts.page_server);
  lazy_pages->add_option("--token-file", lazy_opts.token_file);

  cairn::lazy::PageServerOptions ps_opts;
  uint64_t ps_rate_kib = 0;
  auto* page_server_cmd = app.add_subcommand(
      "page-server", "Serve a checkpoint to `cairn restore --lazy --page-server` on another machine, until it has every page");
  page_server_cmd->add_option("--dir", ps_opts.dir, "Checkpoint directory (the newest link of a chain)")->required();
  page_server_cmd->add_option("--listen", ps_opts.listen, "HOST:PORT to listen on (port 0: any free port)")->required();
  page_server_cmd->add_option("--token-file", ps_opts.token_file, "File holding the token clients must present (chmod 600)")
      ->required();
  page_server_cmd->add_option("--max-rate", ps_rate_kib, "Send at most this many KiB per second (default: no limit)");
  page_server_cmd->add_option("--image-key", image_key, key_help);
  page_server_cmd->add_flag("--trust-unsigned", trust_unsigned, trust_help);
  lazy_pages->add_option("--pid", lazy_opts.pid)->required();
  lazy_pages->add_option("--image-pid", lazy_opts.image_pid)->required();
  lazy_pages->add_option("--uffd", lazy_opts.uffd)->required();
  lazy_pages->add_option("--ready-fd", lazy_opts.ready_fd)->required();
  lazy_pages->add_option("--go-fd", lazy_opts.go_fd)->required();
  lazy_pages->add_option("--fuse-read-fd", lazy_opts.fuse_read);
  lazy_pages->add_option("--fuse-write-fd", lazy_opts.fuse_write);

  auto* inspect = app.add_subcommand("inspect", "Show what a checkpoint holds and verify every checksum");
  inspect->add_option("dir", dir, "Checkpoint directory")->required();
  inspect->add_flag("--json", json, "Print the metadata as JSON");
  inspect->add_option("--image-key", image_key, key_help);

  std::vector<std::string> command;
  std::string compact_out;
  auto* compact = app.add_subcommand("compact", "Fold a chain of incremental checkpoints into one standalone checkpoint");
  compact->add_option("dir", dir, "Checkpoint directory (the newest link of the chain)")->required();
  compact->add_option("--out", compact_out, "Write the result here instead of replacing DIR");
  compact->add_option("--image-key", image_key, key_help);
  compact->add_flag("--trust-unsigned", trust_unsigned, trust_help);

  auto* run = app.add_subcommand("run", "Start a job in its own PID and mount namespaces and cgroup, restorable anywhere");
  run->add_option("--name", job_name, "Job name (default: generated)");
  run->add_option("--dir", dir, "Job directory for logs and checkpoints (default: /var/lib/cairn/jobs/NAME)");
  std::string run_user;
  run->add_option("--user", run_user,
                  "Run the job (its init and command) as this user (name or uid): nothing of it runs as root");
  std::string cpu_baseline;
  run->add_option("--cpu-baseline", cpu_baseline,
                  "Use only the CPU features of this x86-64 level (x86-64-v2, v3 or v4; through glibc's tunables and "
                  "OpenSSL's mask), so that the job's checkpoints restore on any machine of that level");
  std::string env_file, workdir;
  run->add_option("--env-file", env_file,
                  "Start the command with exactly this environment: KEY=VALUE entries, each ended by a NUL byte (as "
                  "/proc/PID/environ)");
  run->add_option("--workdir", workdir, "Start the command in this directory (absolute; entered as --user)");
  run->add_option("command", command, "The command and its arguments, after --")->required();

  std::string shell;
  auto* completion = app.add_subcommand("completion", "Print a shell completion script (source it, or install it)");
  completion->add_option("shell", shell, "bash or zsh")->required()->check(CLI::IsMember({"bash", "zsh"}));
  auto* manpage = app.add_subcommand("manpage", "Print cairn's manual page (roff: man -l <(cairn manpage))");

  auto* criu_compat = app.add_subcommand(
      "criu-compat",
      "Answer container runtimes as criu does (swrk FD, --version, check): runc, Podman, containerd and CRI-O "
      "checkpoint and restore containers through cairn");
  criu_compat->allow_extras();
  auto* install = app.add_subcommand("install", "Install parts of cairn on this machine");
  bool criu_shim = false, replace_criu = false;
  std::string shim_dir = "/usr/local/sbin";
  install->add_flag("--criu-shim", criu_shim,
                    "Link `criu` to cairn where container runtimes look for it, so that they checkpoint through cairn");
  install->add_option("--dir", shim_dir, "With --criu-shim: the directory (on the runtimes' PATH; default /usr/local/sbin)");
  install->add_flag("--replace", replace_criu, "With --criu-shim: take the place of another criu the runtimes would use");

  auto* check = app.add_subcommand("check", "Say which kernel features cairn needs and whether this machine has them");
  bool fix = false;
  check->add_flag("--fix", fix, "Remove the network locks left by checkpoints with live TCP connections, and put back the processes of dumps killed together with their guardians");

  cairn::cli::ControllerCommands controller_commands(app);
  cairn::cli::DaemonCommands daemon_commands(app);  // after the controller's: shares its `job`
  cairn::cli::SlurmCommands slurm_commands(app);

  if (argc == 1) {  // bare `cairn`: what there is to run
    std::fputs(app.help().c_str(), stdout);
    return cairn::cli::kExitOk;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);  // says what is wrong with the command line
    return cairn::cli::kExitUsage;
  }
  cairn::InitLogging(verbose);
  if (dump->parsed()) return cairn::RunDump(pid, dir, leave_running, tree, tcp_close, tcp_established, job_name, parent, track, pre_copy, max_rounds, precopy_rate_mib, compress, image_key, dump_external, gpu_lock_timeout_ms);
  if (run->parsed()) return cairn::RunJob(job_name, dir, command, run_user, cpu_baseline, env_file, workdir);
  if (restore->parsed()) {
    for (const std::string& e : restore_external) {
      std::pair<std::string, std::string> kv = absl::StrSplit(e, absl::MaxSplits('=', 1));
      if (kv.second.empty()) {
        return cairn::Fail(absl::InvalidArgumentError("restore --external-mount " + e + ": give KEY=PATH"));
      }
      container.external_mounts[kv.first] = kv.second;
    }
    std::map<int, int> gpu_map;
    for (const std::string& e : restore_gpu_map) {
      std::pair<std::string, std::string> kv = absl::StrSplit(e, absl::MaxSplits('=', 1));
      int from = -1, to = -1;
      if (!absl::SimpleAtoi(kv.first, &from) || !absl::SimpleAtoi(kv.second, &to) || from < 0 || to < 0 ||
          !gpu_map.emplace(from, to).second) {
        return cairn::Fail(absl::InvalidArgumentError(
            "restore --gpu-map " + e + ": give OLD=NEW, the dump's GPU index and this machine's (each OLD once)"));
      }
    }
    return cairn::RunRestore(dir, detach, lazy, verify, page_server, token_file, image_key, trust_unsigned, as_user,
                             container, gpu_map);
  }
  if (page_server_cmd->parsed()) return cairn::RunPageServer(ps_opts, ps_rate_kib, image_key, trust_unsigned);
  if (gpu_put_back->parsed()) return cairn::dump::RunGpuPutBack(put_back_journal, put_back_fd);
  if (lazy_pages->parsed()) {
    return cairn::lazy::ServePages(lazy_opts).ok() ? 0 : 1;  // it wrote any error itself
  }
  if (inspect->parsed()) return cairn::RunInspect(dir, json, image_key);
  if (compact->parsed()) return cairn::RunCompact(dir, compact_out, image_key, trust_unsigned);
  if (check->parsed()) return cairn::RunCheck(fix);
  if (install->parsed()) {
    if (!criu_shim) return cairn::Fail(absl::InvalidArgumentError("cairn install: say what to install (--criu-shim)"));
    std::error_code ec;
    cairn::criu_compat::ShimInstall shim;
    shim.dir = shim_dir;
    shim.cairn = std::filesystem::canonical("/proc/self/exe", ec).string();
    shim.replace = replace_criu;
    shim.path_env = std::getenv("PATH") != nullptr ? std::getenv("PATH") : "";
    absl::StatusOr<std::string> done = cairn::criu_compat::InstallCriuShim(shim);
    if (!done.ok()) return cairn::Fail(done.status());
    std::printf("%s\n", done->c_str());
    return 0;
  }
  if (criu_compat->parsed()) return cairn::criu_compat::CriuMain(1, argv);  // `cairn criu-compat --help` lands here
  if (completion->parsed()) {
    std::fputs(cairn::cli::Completion(app, shell).c_str(), stdout);
    return 0;
  }
  if (manpage->parsed()) {
    std::fputs(cairn::cli::ManPage(app, "1", cairn::cli::kExitStatusRoff).c_str(), stdout);
    return 0;
  }
  if (controller_commands.Parsed()) return controller_commands.Run();
  if (daemon_commands.Parsed()) return daemon_commands.Run();
  if (slurm_commands.Parsed()) return slurm_commands.Run();
  std::fputs(app.help().c_str(), stdout);
  return cairn::cli::kExitUsage;
}
