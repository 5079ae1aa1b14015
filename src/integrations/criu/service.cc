#include "integrations/criu/service.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <optional>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/file_util.h"
#include "common/log.h"
#include "common/pass_fd.h"
#include "common/status.h"
#include "integrations/criu/options.h"
#include "criu_rpc.pb.h"
#include "engine/check/check.h"
#include "engine/dump/dump.h"
#include "engine/dump/tracker.h"
#include "engine/restore/restore.h"

namespace cairn::criu_compat {
namespace {

// The version runtimes compare against their minimums (runc 3.0 and, for the features cairn
// serves, 3.11-3.16; Podman 3.11 or 3.16): reported as 4.0, the protocol level it answers.
constexpr int kMajor = 4;
constexpr int kMinor = 0;
constexpr char kName[] = "cairn criu-compat " CAIRN_VERSION;

// Largest message taken: runtimes send a few KiB.
constexpr size_t kMaxMessage = 1 << 20;

// What a runtime's user reads: the file marker for runtimes that look for CRIU's inventory
// (Podman checks that it exists) says where the checkpoint really is.
constexpr char kInventoryNote[] =
    "This directory holds a cairn checkpoint, in its subdirectory cairn/ (inspect it with `cairn inspect`).\n"
    "This file only marks the directory as a checkpoint for runtimes that look for CRIU's inventory.img;\n"
    "it is not a CRIU image.\n";

// A statistics file (criu_rpc.proto Stats) in the work directory: what the runtime shows its
// user about the dump or restore (Podman's --print-stats).
absl::Status WriteStats(const std::string& path, const criu_rpc::Stats& stats) {
  std::string payload = stats.SerializeAsString();
  uint32_t header[3] = {0x55105940, 0x57093306, static_cast<uint32_t>(payload.size())};
  return WriteFileSynced(path, std::string(reinterpret_cast<const char*>(header), sizeof header) + payload);
}

uint32_t Micros(double seconds) { return static_cast<uint32_t>(seconds * 1e6); }

class Session {
 public:
  explicit Session(int fd) : fd_(fd) {
    ucred cred{};
    socklen_t len = sizeof cred;
    if (::getsockopt(fd_, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0) peer_ = cred.pid;
  }

  // Serves until the peer hangs up; false if any request failed.
  bool Serve() {
    bool all_ok = true;
    for (;;) {
      absl::StatusOr<std::string> msg = Receive();
      if (!msg.ok()) {
        CAIRN_LOG_WARN("event=criu_compat_receive_failed error=\"{}\"", msg.status().ToString());
        return false;
      }
      if (msg->empty()) return all_ok;  // the runtime closed its end
      criu_rpc::Request req;
      if (!req.ParseFromString(*msg)) {
        all_ok = false;
        Reply(Failure(criu_rpc::EMPTY, absl::InvalidArgumentError(absl::StrFormat(
                                           "a %d-byte message that is not a request of the criu swrk protocol",
                                           msg->size()))));
        continue;
      }
      all_ok = Handle(req) && all_ok;
    }
  }

 private:
  absl::StatusOr<std::string> Receive() {
    std::string buf(kMaxMessage, '\0');
    ssize_t n;
    do {
      n = ::recv(fd_, buf.data(), buf.size(), MSG_TRUNC);
    } while (n < 0 && errno == EINTR);
    if (n < 0) return ErrnoStatus("recv on the swrk socket");
    if (static_cast<size_t>(n) > buf.size()) {
      return absl::ResourceExhaustedError(absl::StrFormat("a %d-byte message, more than the %d taken", n, kMaxMessage));
    }
    buf.resize(static_cast<size_t>(n));
    return buf;
  }

  // One message; `pass_fd` (if not -1) goes with it (SCM_RIGHTS).
  absl::Status Send(const criu_rpc::Response& resp, int pass_fd = -1) {
    std::string out;
    if (!resp.SerializeToString(&out)) return absl::InternalError("serialize a response");
    ssize_t n = SendWithFd(fd_, out.data(), out.size(), pass_fd);
    if (n != static_cast<ssize_t>(out.size())) return ErrnoStatus("send on the swrk socket");
    return absl::OkStatus();
  }

  void Reply(const criu_rpc::Response& resp) {
    absl::Status sent = Send(resp);
    if (!sent.ok()) CAIRN_LOG_WARN("event=criu_compat_reply_failed error=\"{}\"", sent.ToString());
  }

  static criu_rpc::Response Failure(criu_rpc::RequestType type, const absl::Status& why) {
    criu_rpc::Response r;
    r.set_type(type);
    r.set_success(false);
    r.set_cr_errno(absl::IsInvalidArgument(why) ? EINVAL : absl::IsUnimplemented(why) ? ENOTSUP : EIO);
    r.set_cr_errmsg(std::string(why.message()));
    return r;
  }

  // A notification the runtime acts on ("post-restore" with the pid), then its acknowledgement.
  // `pass_fd`: a descriptor that goes with it (orphan-pts-master: the terminal's new master).
  absl::Status Notify(const std::string& script, pid_t pid, int pass_fd = -1) {
    if (!notify_) return absl::OkStatus();
    criu_rpc::Response n;
    n.set_type(criu_rpc::NOTIFY);
    n.set_success(true);
    n.mutable_notify()->set_script(script);
    if (pid != 0) n.mutable_notify()->set_pid(pid);
    RETURN_IF_ERROR(Send(n, pass_fd));
    ASSIGN_OR_RETURN(std::string msg, Receive());
    criu_rpc::Request ack;
    if (msg.empty()) return absl::AbortedError("the runtime hung up at notification " + script);
    if (!ack.ParseFromString(msg) || ack.type() != criu_rpc::NOTIFY) {
      return absl::InvalidArgumentError("the runtime answered notification " + script + " with something else");
    }
    if (!ack.notify_success()) return absl::AbortedError("the runtime failed its part of notification " + script);
    return absl::OkStatus();
  }

  // log_file in the work directory: where runtimes send their users for what went wrong.
  void OpenLog(const criu_rpc::Options& o, const RequestDirs& dirs) {
    std::string name = o.has_log_file() ? o.log_file() : "";
    if (name.empty() || name.find('/') != std::string::npos || name == "." || name == "..") return;
    int verbosity = !o.has_log_level() ? 0 : o.log_level() >= 4 ? 2 : o.log_level() >= 2 ? 1 : 0;
    try {
      LogToFile(dirs.work + "/" + name, std::max(verbosity, 1));
    } catch (const std::exception& e) {  // spdlog throws when the file cannot be opened
      CAIRN_LOG_WARN("event=criu_compat_log_unavailable file={} error=\"{}\"", name, e.what());
    }
  }

  bool Handle(const criu_rpc::Request& req) {
    notify_ = req.has_opts() && req.opts().notify_scripts();
    criu_rpc::Response resp;
    resp.set_type(req.type());
    resp.set_success(true);
    absl::Status done = absl::OkStatus();
    switch (req.type()) {
      case criu_rpc::VERSION: {
        criu_rpc::Version* v = resp.mutable_version();
        v->set_major(kMajor);
        v->set_minor(kMinor);
        v->set_name(kName);
        break;
      }
      case criu_rpc::FEATURE_CHECK:
        // Pre-dumps track writes as cairn's incremental dumps do (dump/tracker.h); CRIU's lazy
        // pages are not served through this protocol (options.h says what to use instead).
        resp.mutable_features()->set_mem_track(dump::WriteTrackingAvailable());
        resp.mutable_features()->set_lazy_pages(false);
        break;
      case criu_rpc::CHECK:
        done = Check();
        break;
      case criu_rpc::DUMP:
        done = Dump(req, /*pre_dump=*/false);
        if (done.ok()) resp.mutable_dump()->set_restored(false);
        break;
      case criu_rpc::RESTORE: {
        absl::StatusOr<pid_t> pid = Restore(req);
        done = pid.status();
        if (pid.ok()) resp.mutable_restore()->set_pid(*pid);
        break;
      }
      case criu_rpc::PRE_DUMP:
        done = Dump(req, /*pre_dump=*/true);
        break;
      default:
        done = absl::UnimplementedError(absl::StrFormat(
            "request type %d (%s) is not served by cairn's criu-compat (it serves VERSION, FEATURE_CHECK, CHECK, DUMP "
            "and RESTORE)",
            static_cast<int>(req.type()), criu_rpc::RequestType_Name(req.type())));
    }
    if (!done.ok()) {
      CAIRN_LOG_WARN("event=criu_compat_failed request={} error=\"{}\"", criu_rpc::RequestType_Name(req.type()),
                     done.ToString());
      Reply(Failure(req.type(), done));
      return false;
    }
    Reply(resp);
    return true;
  }

  // CHECK and `criu check`: what cairn needs of this machine.
 public:
  static absl::Status Check() {
    std::vector<std::string> missing;
    for (const check::Feature& f : check::ProbeFeatures()) {
      if (!f.ok) missing.push_back(absl::StrCat(f.name, " (", f.detail, ")"));
    }
    if (missing.empty()) return absl::OkStatus();
    return absl::FailedPreconditionError("this machine lacks what cairn needs: " + absl::StrJoin(missing, "; "));
  }


 private:
  // DUMP, and PRE_DUMP: a checkpoint of the running container that tracks its writes from
  // then on, the parent (parent_img) of the next one (options.cc DumpFromRequest).
  absl::Status Dump(const criu_rpc::Request& req, bool pre_dump) {
    if (!req.has_opts()) return absl::InvalidArgumentError("DUMP without options");
    ASSIGN_OR_RETURN(RequestDirs dirs, OpenRequestDirs(req.opts(), peer_));
    OpenLog(req.opts(), dirs);
    ASSIGN_OR_RETURN(DumpRequest r, DumpFromRequest(req.opts(), pre_dump, dirs.images));
    ASSIGN_OR_RETURN(image::ImageKey key, image::ImageKey::LoadOrCreate(image::DefaultImageKeyPath()));
    r.dump.seal_key = &key;
    // CRIU runs no notifications around a pre-dump (runc would mark the container checkpointed).
    if (!pre_dump) RETURN_IF_ERROR(Notify("pre-dump", 0));
    CAIRN_LOG_INFO("event=criu_compat_dump pid={} dir={} leave_running={} pre_dump={} parent={}", r.dump.pid,
                   r.dump.dir, r.dump.leave_running, pre_dump, r.parent_target);
    // A checkpoint the runtime left in the directory (Podman keeps one with --keep) makes way
    // for the new one, and comes back if the new one fails; its link to its parent likewise.
    const std::string previous = r.dump.dir + ".previous";
    const std::string link = ParentLink(dirs.images), previous_link = link + ".previous";
    std::error_code ec;
    std::filesystem::remove_all(previous, ec);
    ::unlink(previous_link.c_str());
    const bool had_previous = std::filesystem::exists(r.dump.dir, ec);
    if (had_previous && ::rename(r.dump.dir.c_str(), previous.c_str()) != 0) {
      return ErrnoStatus("move the checkpoint already in the runtime's directory aside (" + r.dump.dir + ")");
    }
    const bool had_link = std::filesystem::is_symlink(link, ec);
    if (had_link && ::rename(link.c_str(), previous_link.c_str()) != 0) {
      absl::Status moved = ErrnoStatus("move the link to the previous checkpoint's parent aside (" + link + ")");
      if (had_previous) ::rename(previous.c_str(), r.dump.dir.c_str());
      return moved;
    }
    auto put_back = [&] {
      ::unlink(link.c_str());
      if (had_link) ::rename(previous_link.c_str(), link.c_str());
      if (had_previous) ::rename(previous.c_str(), r.dump.dir.c_str());
    };
    // The marker first: once the dump has killed the processes, nothing may fail but the dump.
    const std::string marker = dirs.images + "/inventory.img";
    absl::Status ready = WriteFileSynced(marker, kInventoryNote);
    // The parent, where the runtime keeps it (relative to this directory), named next to the
    // checkpoint as cairn's incremental dumps name theirs (image/chain.h).
    if (ready.ok() && !r.parent_target.empty() && ::symlink(r.parent_target.c_str(), link.c_str()) != 0) {
      ready = ErrnoStatus(absl::StrCat("link ", link, " to the parent checkpoint ", r.parent_target));
    }
    absl::StatusOr<dump::DumpResult> res = ready.ok() ? dump::Dump(r.dump) : absl::StatusOr<dump::DumpResult>(ready);
    if (!res.ok()) {
      if (!had_previous) ::unlink(marker.c_str());
      put_back();
      return res.status();
    }
    std::filesystem::remove_all(previous, ec);
    ::unlink(previous_link.c_str());
    CAIRN_LOG_INFO("event=criu_compat_dumped processes={} bytes={} frozen_seconds={:.3f} incremental={} tracking={}",
                   res->processes, res->bytes, res->frozen_seconds, res->incremental, res->tracking);
    criu_rpc::Stats stats;
    criu_rpc::DumpStats* d = stats.mutable_dump();
    d->set_freezing_time(0);  // cairn's freeze is inside frozen_time
    d->set_frozen_time(Micros(res->frozen_seconds));
    d->set_memdump_time(Micros(res->total_seconds));
    d->set_memwrite_time(0);  // written as it is read: inside memdump_time
    d->set_pages_scanned(res->pages);
    d->set_pages_skipped_parent(0);
    d->set_pages_written(res->bytes / 4096);
    d->set_pages_lazy(0);
    absl::Status written = WriteStats(dirs.work + "/stats-dump", stats);
    if (!written.ok()) CAIRN_LOG_WARN("event=criu_compat_stats_unwritten error=\"{}\"", written.ToString());
    return pre_dump ? absl::OkStatus() : Notify("post-dump", 0);
  }

  absl::StatusOr<pid_t> Restore(const criu_rpc::Request& req) {
    if (!req.has_opts()) return absl::InvalidArgumentError("RESTORE without options");
    ASSIGN_OR_RETURN(RequestDirs dirs, OpenRequestDirs(req.opts(), peer_));
    OpenLog(req.opts(), dirs);
    ASSIGN_OR_RETURN(restore::RestoreOptions opts, RestoreFromRequest(req.opts(), dirs.images));
    ASSIGN_OR_RETURN(image::ImageKey key, image::ImageKey::LoadOrCreate(image::DefaultImageKeyPath()));
    opts.seal_key = &key;
    RETURN_IF_ERROR(Notify("pre-restore", 0));
    opts.notify = [this](const std::string& stage, pid_t root) { return Notify(stage, root); };
    if (req.opts().orphan_pts_master() && notify_) {
      // The container's console: its new master goes to the runtime (in a notification, so
      // only to one that takes them), which passes it to whoever holds the console (runc: the
      // --console-socket). Without, a checkpoint with such a terminal is refused before
      // anything is made (restore/container.h).
      opts.container.take_terminal = [this](int master, const std::string&) {
        return Notify("orphan-pts-master", 0, master);
      };
    }
    CAIRN_LOG_INFO("event=criu_compat_restore dir={} root={}", opts.dir, opts.container.root);
    ASSIGN_OR_RETURN(restore::RestoreResult res, restore::Restore(opts));
    CAIRN_LOG_INFO("event=criu_compat_restored pid={} processes={} seconds={:.3f}", res.pid, res.processes,
                   res.seconds);
    criu_rpc::Stats stats;
    criu_rpc::RestoreStats* r = stats.mutable_restore();
    r->set_pages_compared(0);
    r->set_pages_skipped_cow(0);
    r->set_forking_time(0);  // inside restore_time
    r->set_restore_time(Micros(res.seconds));
    r->set_pages_restored(res.bytes / 4096);
    absl::Status written = WriteStats(dirs.work + "/stats-restore", stats);
    if (!written.ok()) CAIRN_LOG_WARN("event=criu_compat_stats_unwritten error=\"{}\"", written.ToString());
    // The container runs: a runtime that does not hear this still has its pid (post-restore).
    absl::Status post = Notify("post-resume", res.pid);
    if (!post.ok()) CAIRN_LOG_WARN("event=criu_compat_post_resume error=\"{}\"", post.ToString());
    return res.pid;
  }

  int fd_;
  pid_t peer_ = 0;
  bool notify_ = false;
};

int Usage() {
  std::fprintf(stderr,
               "this is cairn's criu-compat: it answers what container runtimes ask of criu.\n"
               "usage: criu swrk FD | criu --version | criu check\n");
  return 1;
}

}  // namespace

int ServeSwrk(int fd) { return Session(fd).Serve() ? 0 : 1; }

int CriuMain(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty()) return Usage();
  if (args[0] == "--version" || args[0] == "-V") {
    std::printf("Version: %d.%d\nGitID: %s\n", kMajor, kMinor, kName);
    return 0;
  }
  if (args[0] == "check") {
    absl::Status st = Session::Check();
    if (!st.ok()) {
      std::fprintf(stderr, "%s\n", std::string(st.message()).c_str());
      return 1;
    }
    std::printf("Looks good.\n");
    return 0;
  }
  if (args[0] == "swrk" && args.size() == 2) {
    int fd = -1;
    if (!absl::SimpleAtoi(args[1], &fd) || fd < 0 || ::fcntl(fd, F_GETFD) < 0) {
      std::fprintf(stderr, "criu swrk: '%s' is not an open descriptor\n", args[1].c_str());
      return 1;
    }
    return ServeSwrk(fd);
  }
  std::fprintf(stderr, "criu %s: not served by cairn's criu-compat\n", args[0].c_str());
  return Usage();
}

}  // namespace cairn::criu_compat
