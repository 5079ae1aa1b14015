// Live migration between daemons: Daemon::Migrate (source) and Daemon::ReceiveJob
// (destination). The protocol is described in migrate.h; the user's view in docs/daemon.md.

#include "daemon/migrate.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <optional>
#include <filesystem>
#include <thread>

#include <grpcpp/grpcpp.h>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "common/boot_id.h"
#include "common/cpu_levels.h"
#include "common/file_util.h"
#include "common/log.h"
#include "common/status.h"
#include "common/stop_points.h"
#include "common/unique_fd.h"
#include "common/validate.h"
#include "daemon.grpc.pb.h"
#include "daemon/cgroup.h"
#include "daemon/daemon.h"
#include "daemon/job_spec_check.h"
#include "daemon/node_cpu.h"
#include "common/proc_identity.h"
#include "engine/dump/dump.h"
#include "engine/image/format.h"
#include "engine/job/job.h"
#include "engine/net/address.h"
#include "engine/net/netlock.h"
#include "engine/restore/restore.h"
#include "engine/restore/tcp.h"
#include "image.pb.h"

namespace cairn::daemon {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }
double UnixNow() { return absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch()); }
double MonoNow() { return std::chrono::duration<double>(Clock::now().time_since_epoch()).count(); }

constexpr size_t kChunk = 1 << 20;  // bytes per Data message (gRPC's default limit is 4 MiB)
constexpr const char* kImageFiles[] = {image::kPagesFile, image::kFilesFile};

bool IsLogFile(const std::string& f) { return f == kJobLogs[0] || f == kJobLogs[1]; }
bool IsImageFile(const std::string& f) { return f == image::kPagesFile || f == image::kFilesFile || f == image::kMetaFile; }

using SendFn = std::function<bool(const api::MigrationMessage&)>;

// This process's network stack: the host's boot id and its network namespace's inode.
std::string NetworkStack() {
  absl::StatusOr<std::string> boot = BootId();
  struct stat st {};
  if (!boot.ok() || ::stat("/proc/self/ns/net", &st) != 0) return "";
  return absl::StrCat(*boot, ":", st.st_ino);
}

// Sends `size` bytes of `fd` from `offset` as Data messages for `file`.
absl::Status SendRange(const SendFn& send, const std::string& file, int fd, int64_t offset, int64_t end,
                       int64_t* bytes) {
  std::string buf;
  while (offset < end) {
    size_t want = static_cast<size_t>(std::min<int64_t>(kChunk, end - offset));
    buf.resize(want);
    ssize_t n = ::pread(fd, buf.data(), want, offset);
    if (n < 0) return ErrnoStatus("read " + file + " (to send it)");
    if (n == 0) break;
    buf.resize(static_cast<size_t>(n));
    api::MigrationMessage m;
    auto* d = m.mutable_data();
    d->set_file(file);
    d->set_offset(offset);
    d->set_data(buf);
    if (!send(m)) return absl::UnavailableError("the destination closed the stream");
    offset += n;
    *bytes += n;
  }
  return absl::OkStatus();
}

// Follows the page and file data of an image as the dump appends to it (it writes each
// file front to back from one thread, so everything below a file's size is written) and
// sends what is new. The descriptors stay valid across the writer's rename of DIR.partial.
class ImageTail {
 public:
  ImageTail(std::string partial, SendFn send) : partial_(std::move(partial)), send_(std::move(send)) {}

  absl::Status Pass() {
    for (const char* name : kImageFiles) {
      Tail& t = tails_[name];
      if (!t.fd.valid()) {
        t.fd = UniqueFd(::open((partial_ + "/" + name).c_str(), O_RDONLY | O_CLOEXEC));
        if (!t.fd.valid()) continue;  // not created yet
      }
      struct stat st {};
      if (::fstat(t.fd.get(), &st) != 0) return ErrnoStatus(std::string("stat ") + name);
      RETURN_IF_ERROR(Send(name, t.fd.get(), t.sent, st.st_size));
      t.sent = std::max<int64_t>(t.sent, st.st_size);
    }
    return absl::OkStatus();
  }

  // After the commit: what is left, and each file's header (written at commit).
  absl::Status Finish(std::map<std::string, int64_t>* sizes) {
    RETURN_IF_ERROR(Pass());
    for (const char* name : kImageFiles) {
      Tail& t = tails_[name];
      if (!t.fd.valid()) return absl::InternalError(absl::StrCat("the image has no ", name));
      int64_t header = std::min<int64_t>(static_cast<int64_t>(image::kHeaderSize), t.sent);
      RETURN_IF_ERROR(Send(name, t.fd.get(), 0, header));
      (*sizes)[name] = t.sent;
    }
    return absl::OkStatus();
  }

  int64_t bytes() const { return bytes_.load(); }

 private:
  struct Tail {
    UniqueFd fd;
    int64_t sent = 0;
  };
  std::string partial_;
  SendFn send_;
  std::map<std::string, Tail> tails_;
  std::atomic<int64_t> bytes_{0};

  absl::Status Send(const std::string& file, int fd, int64_t off, int64_t end) {
    int64_t n = 0;
    absl::Status s = SendRange(send_, file, fd, off, end, &n);
    bytes_ += n;
    return s;
  }
};

// Sends a whole file (the metadata, a log) and records its size.
absl::Status SendWhole(const SendFn& send, const std::string& file, const std::string& path,
                       std::map<std::string, int64_t>* sizes, int64_t* bytes) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) {
    if (errno == ENOENT && IsLogFile(file)) return absl::OkStatus();
    return ErrnoStatus("open " + path + " (to send it)");
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return ErrnoStatus("stat " + path);
  RETURN_IF_ERROR(SendRange(send, file, fd.get(), 0, st.st_size, bytes));
  (*sizes)[file] = st.st_size;
  return absl::OkStatus();
}

std::string GrpcMessage(const grpc::Status& s) {
  switch (s.error_code()) {
    case grpc::StatusCode::UNAVAILABLE:
      return absl::StrCat("it does not answer (", s.error_message(), ")");
    case grpc::StatusCode::UNAUTHENTICATED:
      return absl::StrCat("it refused our token (", s.error_message(),
                          "): give the destination's token (cairnd --peer-token-file, or cairn job migrate --token-file)");
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return "it did not answer in time";
    default:
      return s.error_message();
  }
}

absl::Status FromGrpc(const grpc::Status& s) {
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()), GrpcMessage(s));
}

}  // namespace

void ClearMigration(api::Job& job) {
  job.clear_migrating_to();
  job.clear_migrating_address();
  job.clear_migration();
}

absl::StatusOr<std::string> AskMigrationOutcome(const std::string& address, const std::string& token,
                                                const std::string& name, const std::string& migration, api::Job* job) {
  if (token.empty()) return absl::FailedPreconditionError("no token for the destination (--peer-token-file)");
  auto stub = api::Daemon::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  grpc::ClientContext c;
  c.AddMetadata("authorization", "Bearer " + token);
  c.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
  api::MigrationOutcomeRequest q;
  q.set_name(name);
  q.set_migration(migration);
  api::MigrationOutcomeResponse r;
  grpc::Status st = stub->MigrationOutcome(&c, q, &r);
  if (!st.ok()) return FromGrpc(st);
  if (job != nullptr) *job = r.job();
  return r.outcome();
}

absl::Status AddPeer(const std::string& spec, std::map<std::string, std::string>* peers) {
  std::vector<std::string> kv = absl::StrSplit(spec, absl::MaxSplits('=', 1));
  if (kv.size() != 2 || kv[0].empty() || kv[1].find(':') == std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat("--peer ", spec, ": write NAME=HOST:PORT"));
  }
  RETURN_IF_ERROR(Annotate(job::CheckName(kv[0]), "--peer " + spec));
  (*peers)[kv[0]] = kv[1];
  return absl::OkStatus();
}

absl::StatusOr<Peer> ResolvePeer(const std::string& to, const std::map<std::string, std::string>& peers,
                                 const std::string& self) {
  if (to.empty()) return absl::InvalidArgumentError("migrate: no destination (--to NODE or --to HOST:PORT)");
  if (to == self) return absl::InvalidArgumentError(absl::StrCat("migrate: node ", to, " is this node"));
  if (auto it = peers.find(to); it != peers.end()) return Peer{it->second, to};
  if (to.find(':') != std::string::npos) return Peer{to, ""};
  std::vector<std::string> known;
  for (const auto& [name, addr] : peers) known.push_back(name);
  return absl::NotFoundError(absl::StrCat(
      "migrate: unknown node '", to, "': not a peer of node ", self,
      known.empty() ? " (it has none)" : absl::StrCat(" (peers: ", absl::StrJoin(known, ", "), ")"),
      "; start cairnd with --peer ", to, "=HOST:PORT, or give --to HOST:PORT"));
}

absl::Status RewriteForNode(const std::string& image_dir, const std::string& from_dir, const std::string& to_dir,
                            const std::string& cgroup, const std::string& engine_name, image::Checkpoint* rewritten) {
  std::string path = image_dir + "/" + image::kMetaFile;
  ASSIGN_OR_RETURN(std::string raw, ReadFile(path));
  if (raw.size() < sizeof(image::FileHeader)) return absl::DataLossError(path + ": truncated");
  image::FileHeader h;
  std::memcpy(&h, raw.data(), sizeof h);
  RETURN_IF_ERROR(image::CheckHeader(h, image::kMetaMagic, path));
  std::string payload = raw.substr(sizeof h);
  if (payload.size() != h.payload_len || image::Checksum(payload.data(), payload.size()) != h.payload_xxh3) {
    return absl::DataLossError(path + ": the metadata does not match its checksum (damaged in transfer)");
  }
  image::Checkpoint meta;
  if (!meta.ParseFromString(payload)) return absl::DataLossError(path + ": cannot decode the metadata");
  const std::string prefix = from_dir + "/";
  auto fix = [&](image::Process* p) -> absl::Status {
    for (image::Fd& fd : *p->mutable_fds()) {
      if (!absl::StartsWith(fd.path(), prefix)) continue;
      std::string moved = to_dir + "/" + fd.path().substr(prefix.size());
      struct stat st {};
      if (::stat(moved.c_str(), &st) != 0) return ErrnoStatus("stat " + moved + " (a file of the job moved here)");
      fd.set_path(moved);
      fd.mutable_file()->set_dev(st.st_dev);
      fd.mutable_file()->set_ino(st.st_ino);
      fd.mutable_file()->set_size(static_cast<uint64_t>(st.st_size));
    }
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(fix(meta.mutable_process()));
  for (image::Process& p : *meta.mutable_descendants()) RETURN_IF_ERROR(fix(&p));
  if (meta.has_in_flight()) RETURN_IF_ERROR(fix(meta.mutable_in_flight()));  // files only messages hold
  meta.set_cgroup(cgroup);
  meta.set_job_name(engine_name);
  if (!meta.SerializeToString(&payload)) return absl::InternalError("cannot encode checkpoint metadata");
  h = image::MakeHeader(image::kMetaMagic, payload.size(), image::Checksum(payload.data(), payload.size()));
  std::string tmp = path + ".tmp";
  UniqueFd f(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
  if (!f.valid()) return ErrnoStatus("create " + tmp);
  RETURN_IF_ERROR(WriteAll(f.get(), absl::string_view(reinterpret_cast<const char*>(&h), sizeof h), tmp));
  RETURN_IF_ERROR(WriteAll(f.get(), payload, tmp));
  if (::rename(tmp.c_str(), path.c_str()) != 0) return ErrnoStatus("rename " + tmp);
  if (rewritten != nullptr) *rewritten = std::move(meta);
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------------
// Source

void Daemon::SetProgress(const std::string& name, const std::string& phase, bool frozen) {
  std::lock_guard<std::mutex> l(progress_mu_);
  auto it = progress_.find(name);
  if (it == progress_.end()) return;
  it->second.phase = phase;
  it->second.frozen = frozen;
}

void Daemon::SetProgressBytes(const std::string& name, int64_t bytes) {
  std::lock_guard<std::mutex> l(progress_mu_);
  auto it = progress_.find(name);
  if (it != progress_.end()) it->second.bytes = bytes;
}

api::MigrationProgressResponse Daemon::MigrationProgress(const std::string& name) {
  api::MigrationProgressResponse r;
  std::lock_guard<std::mutex> l(progress_mu_);
  auto it = progress_.find(name);
  if (it == progress_.end()) return r;
  r.set_phase(it->second.phase);
  r.set_bytes(it->second.bytes);
  r.set_expected_bytes(it->second.expected_bytes);
  r.set_seconds(MonoNow() - it->second.started);
  r.set_frozen(it->second.frozen);
  return r;
}

absl::StatusOr<api::MigrateJobResponse> Daemon::Migrate(const api::MigrateJobRequest& req) {
  auto t0 = Clock::now();
  const std::string& name = req.name();
  ASSIGN_OR_RETURN(Peer peer, ResolvePeer(req.to(), opts_.peers, opts_.node));
  std::string token = req.token().empty() ? opts_.peer_token : req.token();
  if (token.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "migrate: no token for ", req.to(), " (daemons reach each other over TCP, which needs the destination's "
        "token): start cairnd with --peer-token-file FILE, or pass cairn job migrate --token-file FILE"));
  }
  pid_t pid = 0;
  api::Job job;
  {
    std::unique_lock<std::mutex> l(mu_);
    ASSIGN_OR_RETURN(JobState * found, IdleJobLocked(l, name));
    JobState& s = *found;
    if (s.job.state() == "starting") {
      return absl::NotFoundError(absl::StrCat("no job '", name, "' on node ", opts_.node, " (cairn job list)"));
    }
    ReapLocked(s);
    if (s.job.state() != "running") {
      return absl::FailedPreconditionError(
          absl::StrCat("job ", name, " does not run (", s.job.state(), "): only a running job can be migrated"));
    }
    s.busy = true;
    pid = s.job.host_pid();
    job = s.job;
  }
  {
    std::lock_guard<std::mutex> l(progress_mu_);
    progress_[name] = {"connecting to " + req.to(), 0, job.health().memory_bytes(), MonoNow(), false};
  }
  absl::Cleanup progress_done = [this, &name] {
    std::lock_guard<std::mutex> l(progress_mu_);
    progress_.erase(name);
  };
  // Until the destination commits, the record of the migration (Job.migration) is what a
  // restarted daemon goes by: cleared when the migration is called off.
  auto release = [&] {
    std::lock_guard<std::mutex> l(mu_);
    JobState& s = jobs_[name];
    s.busy = false;
    if (!s.job.migration().empty()) {
      ClearMigration(s.job);
      if (absl::Status st = Persist(s); !st.ok()) CAIRN_LOG_WARN("job={} not saved: {}", name, st.ToString());
    }
  };
  const std::string where = peer.node.empty() ? peer.address : absl::StrCat(peer.node, " (", peer.address, ")");
  auto refuse = [&](const absl::Status& st) {
    release();
    Event(name, "migrate-failed", absl::StrCat("to ", where, ": ", st.message(), "; the job keeps running here"));
    // UNAVAILABLE would read as "this daemon does not answer" to the CLI.
    absl::StatusCode code = absl::IsUnavailable(st) ? absl::StatusCode::kAborted : st.code();
    return absl::Status(code, absl::StrCat("migrate job ", name, " from node ", opts_.node, " to ", where, ": ",
                                                st.message(), "; the job keeps running on node ", opts_.node));
  };

  auto channel = grpc::CreateChannel(peer.address, grpc::InsecureChannelCredentials());
  auto stub = api::Daemon::NewStub(channel);
  auto authorize = [&](grpc::ClientContext& c, double seconds) {
    c.AddMetadata("authorization", "Bearer " + token);
    if (seconds > 0) {
      c.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(static_cast<int64_t>(seconds * 1e3)));
    }
  };
  api::NodeInfoResponse info;
  {
    grpc::ClientContext c;
    authorize(c, 10);
    grpc::Status st = stub->NodeInfo(&c, api::NodeInfoRequest(), &info);
    if (!st.ok()) return refuse(FromGrpc(st));
  }
  if (!peer.node.empty() && info.node() != peer.node) {
    return refuse(absl::FailedPreconditionError(
        absl::StrCat("the daemon there is node ", info.node(), ", not ", peer.node, " (check --peer)")));
  }
  if (info.node() == opts_.node) {
    return refuse(absl::InvalidArgumentError(absl::StrCat("the daemon there is this node (", opts_.node, ")")));
  }
  const std::string to_node = info.node();
  // The CPU there must have what the job may use: found out now, before the job is frozen
  // (the destination's restore would refuse it, after the pause and the copy).
  {
    absl::StatusOr<int> baseline = job.spec().cpu_baseline().empty() ? 0 : ParseBaseline(job.spec().cpu_baseline());
    std::set<std::string> there(info.cpu_features().begin(), info.cpu_features().end());
    if (std::string why = CpuMismatch(baseline.ok() ? *baseline : 0, NodeCpuFeatures(), there, to_node); !why.empty()) {
      return refuse(absl::FailedPreconditionError(why));
    }
  }

  absl::Time now = absl::Now();
  std::string ckid = absl::StrCat(name, "-", CheckpointStamp(now), "-from-", opts_.node);
  // Recorded before anything is sent: a daemon that restarts in the middle finds out from
  // the destination how it ended (ResolveMigrations), with the credential it was given for
  // the destination (kept beside the job, root's alone: the catalog's record is served to
  // callers, the token must not be).
  if (!req.token().empty()) {
    if (absl::Status st = WriteFileSynced(MigrationTokenPath(name), req.token()); !st.ok()) {
      return refuse(Annotate(st, "keep the migration's credential"));
    }
  }
  {
    std::lock_guard<std::mutex> l(mu_);
    JobState& s = jobs_[name];
    s.job.set_migrating_to(to_node);
    s.job.set_migrating_address(peer.address);
    s.job.set_migration(ckid);
    if (absl::Status st = Persist(s); !st.ok()) {
      ClearMigration(s.job);
      ClaimNetwork(s);
      ForgetMigrationTokenLocked(name);
      return refuse(Annotate(st, "record the migration in the catalog"));
    }
    if (!req.token().empty()) doubt_tokens_[name] = req.token();
  }

  grpc::ClientContext ctx;
  authorize(ctx, 0);
  auto stream = stub->ReceiveJob(&ctx);
  // The stream's end: the destination's reason when it ended the stream with an error.
  auto stream_error = [&](const std::string& when) {
    grpc::Status st = stream->Finish();
    if (st.ok() || st.error_code() == grpc::StatusCode::CANCELLED) {
      return absl::UnavailableError(absl::StrCat("the destination closed the stream ", when));
    }
    return FromGrpc(st);
  };

  {
    api::MigrationMessage m;
    auto* b = m.mutable_begin();
    *b->mutable_spec() = job.spec();
    b->set_from_node(opts_.node);
    b->set_from_job_dir(JobDir(name));
    b->set_checkpoint(ckid);
    b->set_created(job.created());
    b->set_network_stack(NetworkStack());
    api::MigrationReply r;
    if (!stream->Write(m) || !stream->Read(&r)) return refuse(stream_error("at the start"));
    if (r.state() != "accepted") return refuse(absl::InternalError("unexpected reply " + r.state()));
  }
  Event(name, "migrating", absl::StrCat("to ", where, ": copying memory while the job runs"));

  // The spool holds the job's memory: root only.
  std::error_code ec;
  fs::create_directories(opts_.spool_dir, ec);
  if (ec || ::chmod(opts_.spool_dir.c_str(), 0700) != 0) {
    return refuse(absl::InternalError(absl::StrCat("create --spool-dir ", opts_.spool_dir, " (0700): ",
                                                   ec ? ec.message() : std::strerror(errno))));
  }
  const std::string dir = absl::StrCat(opts_.spool_dir, "/", opts_.node, ".", ckid);
  // What an earlier migration of this job left when the daemon died in it (none runs now: busy).
  // Its names are NODE.JOB-YYYYMMDDTHHMMSSmmm-from-NODE[.partial] (job names may contain '-').
  const std::string prefix = absl::StrCat(opts_.node, ".", name, "-");
  auto stale = [&](const std::string& f) {
    if (!absl::StartsWith(f, prefix) || f.size() < prefix.size() + 9 || f[prefix.size() + 8] != 'T') return false;
    for (size_t k = 0; k < 8; ++k) {
      if (!absl::ascii_isdigit(static_cast<unsigned char>(f[prefix.size() + k]))) return false;
    }
    return true;
  };
  for (auto it = fs::directory_iterator(opts_.spool_dir, ec); !ec && it != fs::directory_iterator(); it.increment(ec)) {
    if (stale(it->path().filename().string())) {
      std::error_code rm;
      fs::remove_all(it->path(), rm);
    }
  }
  auto cleanup = [&] {
    fs::remove_all(dir, ec);
    fs::remove_all(dir + ".partial", ec);
  };

  SendFn send = [&](const api::MigrationMessage& m) { return stream->Write(m); };
  ImageTail tail(dir + ".partial", send);
  std::mutex tail_mu;
  std::condition_variable tail_cv;
  bool stop = false;    // GUARDED_BY(tail_mu)
  uint64_t passes = 0;  // GUARDED_BY(tail_mu): complete passes so far
  absl::Status tail_status;
  std::thread tailer([&] {
    for (;;) {
      absl::Status st = tail.Pass();
      SetProgressBytes(name, tail.bytes());
      std::unique_lock<std::mutex> l(tail_mu);
      tail_status = st;
      ++passes;
      tail_cv.notify_all();
      if (!st.ok()) return;
      if (tail_cv.wait_for(l, std::chrono::milliseconds(5), [&] { return stop; })) return;
    }
  });
  auto stop_tailer = [&] {
    if (tailer.joinable()) {
      {
        std::lock_guard<std::mutex> l(tail_mu);
        stop = true;
      }
      tail_cv.notify_all();
      tailer.join();
    }
  };

  absl::Status failure;  // why the job stays here
  int64_t precopy_bytes = 0, other_bytes = 0;
  double downtime = 0, restore_s = 0;
  int dest_pid = 0;
  bool ambiguous = false;
  dump::DumpOptions d;
  // Not sealed here: its commit happens while the job is frozen, and sealing would add the
  // MAC of the whole image to the downtime. The stream to the peer is the cluster's (its
  // token); the destination seals what it keeps once the job runs there.
  d.pid = pid;
  d.dir = dir;
  d.tree = true;
  d.leave_running = true;
  d.pre_copy = true;
  d.job_name = EngineName(name);
  // Established connections go with the job (its addresses too, below), as in its checkpoints.
  const api::CheckpointPolicy::Tcp tcp_mode = job.spec().checkpoint().tcp();
  d.tcp_established = tcp_mode == api::CheckpointPolicy::TCP_ESTABLISHED;
  d.tcp_close = tcp_mode == api::CheckpointPolicy::TCP_CLOSE;
  d.hand_off_moves_connections = true;
  // Named after the migration, so that a restart that finds it held can remove it (SettleLocked).
  d.network_lock_table = net::LockTableName(ckid);
  d.freezer_cgroup = "/sys/fs/cgroup/freezer/" + CgroupOf(name);
  // Pre-copy writes the image faster than a network may carry it: before the freeze, let the
  // stream catch up with everything written so far (a pass that started after now), so that
  // the freeze only has to send what the frozen phase adds.
  d.before_freeze = [&]() -> absl::Status {
    SetProgress(name, "catching up before the freeze", false);
    auto t = Clock::now();
    std::unique_lock<std::mutex> l(tail_mu);
    uint64_t target = passes + 2;
    tail_cv.wait(l, [&] { return passes >= target || !tail_status.ok() || stop; });
    CAIRN_LOG_DEBUG("event=migrate_stage job={} stage=caught_up ms={:.1f} sent={}", name, Since(t) * 1e3, tail.bytes());
    return absl::OkStatus();
  };
  d.hand_off = [&](const dump::DumpResult& r, const dump::HandOffControl& control) {
    auto t_hand = Clock::now();
    CAIRN_LOG_DEBUG("event=migrate_stage job={} stage=committed frozen_ms={:.1f}", name, r.frozen_seconds * 1e3);
    SetProgress(name, "frozen: sending what changed", true);
    stop_tailer();
    if (!tail_status.ok()) {
      failure = tail_status;
      return dump::HandOff::kThaw;
    }
    precopy_bytes = tail.bytes();
    std::map<std::string, int64_t> sizes;
    absl::Status st = tail.Finish(&sizes);
    if (st.ok()) st = SendWhole(send, image::kMetaFile, dir + "/" + image::kMetaFile, &sizes, &other_bytes);
    for (const char* log : kJobLogs) {
      if (st.ok()) st = SendWhole(send, log, JobDir(name) + "/" + log, &sizes, &other_bytes);
    }
    if (!st.ok()) {
      failure = absl::IsUnavailable(st) ? stream_error("while the image was sent") : st;
      return dump::HandOff::kThaw;
    }
    // The job's addresses leave this node now, while its connections are held (in repair mode,
    // behind the dump's lock): the destination puts them on before it rebuilds them. From here
    // every way back to running here puts them back first.
    bool addresses_away = false;
    if (!job.spec().addresses().empty()) {
      DropAddresses(name, job.spec(), absl::StrCat("moving with the job to ", where));
      addresses_away = true;
    }
    auto stay = [&](absl::Status why) {
      failure = std::move(why);
      if (addresses_away) {
        if (absl::Status back = BringAddresses(name, job.spec()); !back.ok()) {
          CAIRN_LOG_WARN("migrate job={}: its addresses did not come back: {}", name, back.ToString());
        }
      }
      return dump::HandOff::kThaw;
    };
    CAIRN_LOG_DEBUG("event=migrate_stage job={} stage=sent ms={:.1f} bytes_while_frozen={}", name, Since(t_hand) * 1e3,
                    tail.bytes() - precopy_bytes + other_bytes);
    SetProgressBytes(name, tail.bytes() + other_bytes);
    SetProgress(name, "frozen: the destination restores the job", true);
    api::MigrationMessage fin;
    for (const auto& [f, n] : sizes) (*fin.mutable_finish()->mutable_sizes())[f] = n;
    api::MigrationReply reply;
    // The job stands frozen while the destination restores it: not longer than the timeout.
    // By default it scales with what the destination may have to bring in before the job runs
    // (all of it, with --eager-migrations there): 60 s plus 10 s per GiB of the job's memory.
    double limit = req.restore_timeout_s() > 0
                       ? req.restore_timeout_s()
                       : 60 + 10 * static_cast<double>(job.health().memory_bytes()) / static_cast<double>(1 << 30);
    std::mutex wd_mu;
    std::condition_variable wd_cv;
    bool answered = false, timed_out = false;
    std::thread watchdog([&] {
      std::unique_lock<std::mutex> l(wd_mu);
      if (!wd_cv.wait_for(l, std::chrono::duration<double>(limit), [&] { return answered; })) {
        timed_out = true;
        ctx.TryCancel();
      }
    });
    bool ok = stream->Write(fin) && stream->Read(&reply);
    {
      std::lock_guard<std::mutex> l(wd_mu);
      answered = true;
    }
    wd_cv.notify_all();
    watchdog.join();
    if (timed_out) {
      return stay(absl::DeadlineExceededError(absl::StrFormat(
          "the destination did not run the job within %.0f s of receiving it (--restore-timeout)", limit)));
    }
    if (!ok) return stay(stream_error("before the job ran there"));
    if (reply.state() != "running") return stay(absl::InternalError("unexpected reply " + reply.state()));
    downtime = r.frozen_seconds + Since(t_hand);
    CAIRN_LOG_DEBUG("event=migrate_stage job={} stage=running_there ms={:.1f}", name, Since(t_hand) * 1e3);
    restore_s = reply.restore_s();
    dest_pid = reply.host_pid();
    // The commit (docs/daemon.md, "Never lost, never twice"). The destination decides: it
    // takes the job over when Commit reaches it, in one durable record. From the moment
    // Commit may reach it until this side knows, the job must neither run here nor die
    // here, even if this daemon dies: it is held in its freezer cgroup (which outlives us)
    // and the dump is told so (hold: its guardian then leaves it there).
    auto t_hold = Clock::now();
    if (!FreezeJob(name)) return stay(absl::InternalError("could not hold the job in its freezer cgroup for the commit"));
    control.hold();
    CAIRN_LOG_DEBUG("event=migrate_stage job={} stage=held ms={:.1f}", name, Since(t_hold) * 1e3);
    FaultPoint("migrate-held");
    api::MigrationMessage commit;
    commit.mutable_commit();
    bool sent = stream->Write(commit);
    FaultPoint("migrate-commit-sent");
    std::string outcome;
    if (sent && stream->Read(&reply) && reply.state() == "committed") {
      outcome = "committed";
    } else {
      // Commit may or may not have reached it: ask how it ended.
      ambiguous = true;
      for (int i = 0; i < 20 && outcome.empty(); ++i) {
        absl::StatusOr<std::string> o = AskMigrationOutcome(peer.address, token, name, ckid, nullptr);
        if (o.ok() && (*o == "committed" || *o == "aborted")) {
          outcome = *o;
        } else {
          std::this_thread::sleep_for(std::chrono::milliseconds(500));
        }
      }
    }
    CAIRN_LOG_DEBUG("event=migrate_stage job={} stage=outcome ms={:.1f} outcome={}", name, Since(t_hold) * 1e3, outcome);
    if (outcome == "committed") {
      control.accepted();
      ThawFreezer(CgroupOf(name));  // still stopped by the dump, which kills them next
      return dump::HandOff::kKill;
    }
    if (outcome == "aborted") {
      dump::HandOff h = stay(absl::AbortedError("the destination did not take the job over"));
      ThawFreezer(CgroupOf(name));  // still stopped by the dump, which lets them go once out of repair
      return h;
    }
    return dump::HandOff::kHeld;
  };
  SetProgress(name, "copying memory while the job runs", false);
  absl::StatusOr<dump::DumpResult> r = dump::Dump(d);
  stop_tailer();
  cleanup();
  if (r.ok() && r->handed_off && !r->network_lock.empty()) {
    // Its sockets died in repair mode, saying nothing; the destination holds its connections now.
    absl::Status removed = net::RemoveNetworkLock(r->network_lock);
    if (!removed.ok()) CAIRN_LOG_WARN("migrate job={}: network lock not removed: {}", name, removed.ToString());
  }
  if (!r.ok()) {
    ctx.TryCancel();
    return refuse(r.status());
  }
  if (r->held) {
    ctx.TryCancel();
    {
      std::lock_guard<std::mutex> l(mu_);
      JobState& s = jobs_[name];
      s.busy = false;
      s.job.set_state("migrating");
      if (absl::Status st = Persist(s); !st.ok()) CAIRN_LOG_WARN("job={} not saved: {}", name, st.ToString());
    }
    Event(name, "migrate-in-doubt",
          absl::StrCat("to ", where, ": the destination did not say whether it took the job over; the job stands "
                       "frozen here until it does (asked every 2 s)"));
    return absl::AbortedError(absl::StrCat(
        "migrate job ", name, " from node ", opts_.node, " to ", where,
        ": in doubt: the destination did not say whether it took the job over after it was asked to; the job "
        "stands frozen on node ", opts_.node, " until it answers (never on both nodes); cairn job show ", name,
        " tells how it ended"));
  }
  if (!r->handed_off) {
    ctx.TryCancel();
    if (ambiguous) CAIRN_LOG_WARN("migrate job={} to={}: the destination did not take the job over; thawed here", name, where);
    return refuse(failure.ok() ? absl::InternalError("the hand-off failed") : failure);
  }
  (void)stream->WritesDone();
  (void)stream->Finish();

  api::MigrateJobResponse resp;
  int64_t bytes = precopy_bytes + (tail.bytes() - precopy_bytes) + other_bytes;
  resp.set_from_node(opts_.node);
  resp.set_to_node(to_node);
  resp.set_downtime_s(downtime);
  resp.set_bytes(bytes);
  resp.set_precopy_bytes(precopy_bytes);
  resp.set_restore_s(restore_s);
  resp.set_checkpoint(ckid);
  {
    std::lock_guard<std::mutex> l(mu_);
    JobState& s = jobs_[name];
    s.busy = false;
    s.child = false;
    s.job.set_state("migrated");
    ClearMigration(s.job);
    ForgetMigrationTokenLocked(name);
    s.job.set_ended(UnixNow());
    s.job.mutable_health()->set_state("migrated");
    s.job.mutable_health()->set_detail(absl::StrCat("migrated to node ", to_node));
    if (absl::Status st = Persist(s); !st.ok()) CAIRN_LOG_WARN("job={} not saved: {}", name, st.ToString());
  }
  Event(name, "migrated",
        absl::StrFormat("to node %s (%s): downtime %.3f s, %d bytes moved (%d while it ran), restored there as pid "
                        "%d in %.3f s",
                        to_node, peer.address, downtime, bytes, precopy_bytes, dest_pid, restore_s));
  // The job as the destination runs it.
  {
    grpc::ClientContext c;
    authorize(c, 10);
    api::GetJobRequest q;
    q.set_name(name);
    api::GetJobResponse g;
    if (stub->GetJob(&c, q, &g).ok()) *resp.mutable_job() = g.job();
  }
  resp.set_total_s(Since(t0));
  return resp;
}

// A migration this daemon does not know the end of: the daemon restarted in the middle of
// one, or the destination did not answer after Commit. The destination's record decides.
void Daemon::ResolveMigrations() {
  struct Doubt {
    std::string name, to, address, migration, token;
  };
  std::vector<Doubt> doubts;
  {
    std::lock_guard<std::mutex> l(mu_);
    double now = MonoNow();
    for (auto& [name, s] : jobs_) {
      if (s.job.state() != "migrating" || s.busy || now < s.next_resolve) continue;
      s.next_resolve = now + 2;
      // The migration's own credential: in memory, or (the daemon restarted) kept beside the job.
      auto t = doubt_tokens_.find(name);
      std::string token = t != doubt_tokens_.end() ? t->second : "";
      if (token.empty()) {
        absl::StatusOr<std::string> kept = ReadFile(MigrationTokenPath(name));
        if (kept.ok()) token = *kept;
      }
      if (token.empty() && !s.warned_no_token) {
        s.warned_no_token = true;
        if (opts_.peer_token.empty()) {
          CAIRN_LOG_WARN("migration={} job={}: no credential to ask node {} how it ended (none was kept and there is "
                         "no --peer-token-file); the job stays held until it can be asked",
                         s.job.migration(), name, s.job.migrating_to());
        }
      }
      doubts.push_back({name, s.job.migrating_to(), s.job.migrating_address(), s.job.migration(),
                        token.empty() ? opts_.peer_token : token});
    }
  }
  for (const Doubt& d : doubts) {
    api::Job there;
    absl::StatusOr<std::string> o = AskMigrationOutcome(d.address, d.token, d.name, d.migration, &there);
    if (!o.ok() || (*o != "committed" && *o != "aborted")) {
      CAIRN_LOG_DEBUG("migration={} job={} still in doubt: {}", d.migration, d.name, o.ok() ? *o : o.status().ToString());
      continue;
    }
    std::lock_guard<std::mutex> l(mu_);
    JobState& s = jobs_[d.name];
    if (s.job.state() != "migrating" || s.job.migration() != d.migration) continue;
    SettleLocked(d.name, s, *o == "committed", absl::StrCat("(runs there as pid ", there.host_pid(), ")"),
                 "the destination");
  }
}

std::string Daemon::MigrationTokenPath(const std::string& name) const { return JobDir(name) + "/migration.token"; }

void Daemon::ForgetMigrationTokenLocked(const std::string& name) {
  doubt_tokens_.erase(name);
  ::unlink(MigrationTokenPath(name).c_str());
}

namespace {

// The network lock a migration's dump kept over the job's connections when it left the job held
// (dump.h, kHeld), its table named after the migration; none without connections.
void ReleaseHeldLock(const std::string& name, const std::string& migration) {
  absl::Status removed = net::RemoveNetworkLock(net::LockTableName(migration));
  if (!removed.ok()) CAIRN_LOG_WARN("job={} network lock of migration {} not removed: {}", name, migration, removed.ToString());
}

}  // namespace

void Daemon::SettleLocked(const std::string& name, JobState& s, bool committed, const std::string& there,
                          const std::string& who) {
  std::string cgroup = CgroupOf(name);
  std::string to = s.job.migrating_to();
  bool alive = SameProcess(s.job.host_pid(), s.job.start_time());
  if (committed) {
    // Its copy here dies (a frozen task once thawed), its connections silent: they run there now.
    KillCgroupSilently(cgroup);
    ThawFreezer(cgroup);
    ReleaseHeldLock(name, s.job.migration());
    s.job.set_state("migrated");
    s.job.set_ended(UnixNow());
    s.job.mutable_health()->set_state("migrated");
    s.job.mutable_health()->set_detail(absl::StrCat("migrated to node ", to));
  } else {
    if (alive) {
      if (absl::Status back = BringAddresses(name, s.job.spec()); !back.ok()) {
        CAIRN_LOG_WARN("job={} runs on without its addresses: {}", name, back.ToString());
      }
    }
    ReleaseHeldLock(name, s.job.migration());  // their packets flow again before they run
    ThawFreezer(cgroup);
    if (alive) {
      s.job.set_state("running");
      // It runs on here: its owner is watched again (a restart in doubt did not: it was not running).
      if (s.job.has_owner()) WatchOwnerAgain(name, s.job.owner());
    } else {
      KillCgroup(cgroup);
      s.job.set_state("exited");
      s.job.set_ended(UnixNow());
      *s.job.mutable_health() = HealthTracker::Exited(false, 0, 0);
    }
  }
  ClearMigration(s.job);
  ForgetMigrationTokenLocked(name);
  if (absl::Status st = Persist(s); !st.ok()) CAIRN_LOG_WARN("job={} not saved: {}", name, st.ToString());
  if (committed) {
    Event(name, "migrated",
          absl::StrCat("to node ", to, ": ", who, " says it took the job over ", there,
                       "; the copy here was held frozen until then, and is gone"));
  } else {
    Event(name, "migrate-failed",
          absl::StrCat("to node ", to, ": ", who, " says it did not take the job over; ",
                       alive ? "the job runs on here" : "the job is gone here (status unknown)"));
  }
}

absl::StatusOr<api::Job> Daemon::SettleMigration(const std::string& name, bool here) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = jobs_.find(name);
  if (it == jobs_.end()) return absl::NotFoundError(absl::StrCat("no job '", name, "' on node ", opts_.node));
  JobState& s = it->second;
  if (s.job.state() != "migrating" || s.busy) {
    return absl::FailedPreconditionError(absl::StrCat(
        "job ", name, " is not held in a migration whose outcome is unknown (it is ", s.busy ? "busy" : s.job.state(),
        "); only such a job is settled by hand"));
  }
  SettleLocked(name, s, !here, "", "the operator");
  return s.job;
}

absl::StatusOr<api::MigrationOutcomeResponse> Daemon::MigrationOutcome(const std::string& name,
                                                                       const std::string& migration) {
  api::MigrationOutcomeResponse r;
  std::lock_guard<std::mutex> l(mu_);
  auto it = jobs_.find(name);
  if (it != jobs_.end() && !migration.empty() && it->second.job.arrived_with() == migration) {
    r.set_outcome("committed");
    *r.mutable_job() = it->second.job;
  } else if (receiving_.count(migration) != 0) {
    r.set_outcome("in-progress");
  } else {
    r.set_outcome("aborted");
  }
  return r;
}

// ---------------------------------------------------------------------------------------
// Destination

std::string Daemon::ArrivalPath(const std::string& name) const { return JobDir(name) + "/arrival"; }

void Daemon::RecoverArrivals() {
  std::error_code ec;
  for (auto it = fs::directory_iterator(opts_.state_dir + "/jobs", ec); !ec && it != fs::directory_iterator();
       it.increment(ec)) {
    std::string name = it->path().filename().string();
    std::string path = ArrivalPath(name);
    absl::StatusOr<std::string> kept = ReadFile(path);
    if (!kept.ok()) continue;
    auto job = jobs_.find(name);
    if (job == jobs_.end() || job->second.job.state() != "running") {
      // The migration that brought them never committed: the job runs on its source, which
      // has its addresses back and its connections.
      // The addresses go first: while the lock stands, a client's packet that still finds this
      // node is dropped, not answered with a reset by a node that has no socket for it.
      std::vector<std::string> addresses, locks;
      for (absl::string_view line : absl::StrSplit(*kept, '\n', absl::SkipEmpty())) {
        if (absl::ConsumePrefix(&line, "address ")) addresses.emplace_back(line);
        if (absl::ConsumePrefix(&line, "lock ") && !line.empty()) locks.emplace_back(line);
      }
      absl::Status st = net::RemoveServiceAddresses(addresses);
      if (!st.ok()) CAIRN_LOG_WARN("job={} addresses of an uncommitted migration not all removed: {}", name, st.ToString());
      for (const std::string& lock : locks) RemoveJobNetworkLock(name, lock);
      CAIRN_LOG_INFO("event=stray_arrival job={} addresses=\"{}\": put here with its network lock for a migration "
                     "the restart found uncommitted; taken off",
                     name, absl::StrJoin(addresses, ", "));
    }
    ::unlink(path.c_str());
  }
}

struct Daemon::Received {
  api::MigrationMessage::Begin begin;
  std::string name, dir, partial, job_dir;
  std::map<std::string, UniqueFd> files;
  restore::RestoreResult restored;
  bool running = false;
  std::string early_lock;  // the restore's lock, taken before the job's addresses came
  net::LockClaim early_claim;  // its claim (net/claim.h), until the restore's replaces it
  bool arrival = false;    // ArrivalPath written: the lock and the addresses may be on this node
  std::optional<api::Job> previous;  // the job's record here from before it migrated away
};

void Daemon::AbandonReceived(Received& in, const absl::Status& why) {
  if (in.running) {
    // Its connections stay the source's: they close without a word.
    KillCgroupSilently(CgroupOf(in.name));
    ::kill(in.restored.pid, SIGKILL);
    while (::waitpid(in.restored.pid, nullptr, 0) < 0 && errno == EINTR) {
    }
  }
  if (in.arrival) {
    DropAddresses(in.name, in.begin.spec(), "the migration to here did not commit");
    if (!in.early_lock.empty()) RemoveJobNetworkLock(in.name, in.early_lock);
    ::unlink(ArrivalPath(in.name).c_str());
  }
  in.files.clear();
  std::error_code ec;
  fs::remove_all(in.dir, ec);
  fs::remove_all(in.partial, ec);
  if (!in.previous) fs::remove_all(in.job_dir, ec);
  RemoveCgroup(CgroupOf(in.name));
  {
    std::lock_guard<std::mutex> l(mu_);
    receiving_.erase(in.begin.checkpoint());
    if (in.previous) {
      JobState& s = jobs_[in.name];
      s.job = *in.previous;
      s.busy = false;
    } else {
      jobs_.erase(in.name);
    }
  }
  Event(in.name, "migrate-in-failed",
        absl::StrCat("from node ", in.begin.from_node(), ": ", why.message(), in.running ? " (its copy here was killed)" : ""));
}

absl::Status Daemon::RestoreReceived(Received& in, const std::function<bool()>& cancelled) {
  auto t0 = Clock::now();
  in.files.clear();
  if (opts_.pause_before_migration_restore_s > 0) {
    std::this_thread::sleep_for(std::chrono::duration<double>(opts_.pause_before_migration_restore_s));
  }
  image::Checkpoint meta;
  RETURN_IF_ERROR(
      RewriteForNode(in.partial, in.begin.from_job_dir(), in.job_dir, CgroupOf(in.name), EngineName(in.name), &meta));
  if (::rename(in.partial.c_str(), in.dir.c_str()) != 0) return ErrnoStatus("rename " + in.partial);
  const api::JobSpec& spec = in.begin.spec();
  CAIRN_LOG_DEBUG("event=migrate_stage job={} stage=image_rewritten ms={:.1f}", in.name, Since(t0) * 1e3);
  RETURN_IF_ERROR(SetLimits(CgroupOf(in.name), spec.limits().cpus(), spec.limits().memory_bytes()));
  // Its connections' packets are held here before its addresses arrive (the source took them
  // off): one reaching no socket yet would be answered with a reset. The restore takes the same
  // lock over (restore/tcp.h) and keeps it until the commit (hold_network).
  in.early_lock = restore::RestoreLockTableFor(meta);
  if (!in.early_lock.empty() || !spec.addresses().empty()) {
    std::string record = absl::StrCat("lock ", in.early_lock, "\n");
    for (const std::string& a : spec.addresses()) absl::StrAppend(&record, "address ", a, "\n");
    RETURN_IF_ERROR(WriteFileSynced(ArrivalPath(in.name), record));
    in.arrival = true;
    ASSIGN_OR_RETURN(in.early_claim, restore::TakeRestoreLockEarly(meta));
    RETURN_IF_ERROR(BringAddresses(in.name, spec));
  }
  restore::RestoreOptions ro;
  ro.dir = in.dir;
  // Unsealed: written here from the source's stream (a peer of this cluster, by its token);
  // sealed once the job runs (ReceiveJob), off the downtime.
  ro.cgroup = CgroupOf(in.name);
  ro.verify = true;  // a restore that differs from its image fails instead of running
  ro.lazy = opts_.lazy_migrations;
  ro.lazy_min_bytes = 16 << 20;  // a job's init, a small job: copied at once, no page handler to start
  // Its connections flow once the source has let go of them (Commit), not before: an aborted
  // migration leaves them to the source's copy, whose peers must not have heard from this one.
  ro.hold_network = true;
  if (!spec.user().empty()) {
    ASSIGN_OR_RETURN(ro.only_as, job::OwnerOf(spec.user()));  // its owner's credentials only
  }
  // The source may have given up meanwhile (--restore-timeout) and thawed the job there.
  if (cancelled()) return absl::CancelledError("the source called the migration off before the restore");
  if (opts_.fail_migration_restore) return absl::InternalError("test hook: CAIRND_TEST_FAIL_MIGRATION_RESTORE");
  ASSIGN_OR_RETURN(in.restored, restore::Restore(ro));
  in.running = true;
  return absl::OkStatus();
}

absl::Status Daemon::ReceiveJob(const std::function<bool(api::MigrationMessage*)>& read,
                                const std::function<bool(const api::MigrationReply&)>& write,
                                const std::function<bool()>& cancelled) {
  api::MigrationMessage m;
  if (!read(&m) || !m.has_begin()) return absl::InvalidArgumentError("migration stream: expected begin");
  Received in;
  in.begin = m.begin();
  in.name = in.begin.spec().name();
  RETURN_IF_ERROR(CheckJobName(in.name));
  if (!in.begin.spec().addresses().empty() && !in.begin.network_stack().empty() &&
      in.begin.network_stack() == NetworkStack()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "migration of job ", in.name, ": node ", in.begin.from_node(), " and node ", opts_.node,
        " share one network stack (one host, one network namespace), so the job's addresses (",
        absl::StrJoin(in.begin.spec().addresses(), ", "),
        ") and its connections cannot move between them; move it to a node on another host or network namespace"));
  }
  RETURN_IF_ERROR(Annotate(CheckJobSpec(in.begin.spec()), "migration of job " + in.name));
  RETURN_IF_ERROR(CheckEngineName(in.name));
  RETURN_IF_ERROR(Annotate(job::CheckName(in.begin.checkpoint()), "checkpoint id"));
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = jobs_.find(in.name);
    // A job that ran here before and no longer runs here (it migrated away, or ended with its
    // node, e.g. one restarted after a crash) may come back: it takes its old record over.
    if (it != jobs_.end()) ReapLocked(it->second);
    if (it != jobs_.end() && (it->second.busy || it->second.job.state() == "running")) {
      return absl::AlreadyExistsError(absl::StrCat("job '", in.name, "' already runs on node ", opts_.node,
                                                   " (cairn job kill ", in.name, " there first)"));
    }
    if (receiving_.count(in.begin.checkpoint()) != 0) {
      return absl::AlreadyExistsError("migration " + in.begin.checkpoint() + " is already being received");
    }
    receiving_.insert(in.begin.checkpoint());
    if (it != jobs_.end()) {
      in.previous = it->second.job;
      it->second.busy = true;
    } else {
      JobState placeholder;
      placeholder.busy = true;
      placeholder.job.set_name(in.name);
      placeholder.job.set_state("starting");
      jobs_.emplace(in.name, std::move(placeholder));
    }
  }
  in.dir = CheckpointDir(in.name) + "/" + in.begin.checkpoint();
  in.partial = in.dir + ".partial";
  in.job_dir = JobDir(in.name);
  auto fail = [&](const absl::Status& st) {
    AbandonReceived(in, st);
    return st;
  };
  std::error_code ec;
  fs::create_directories(in.partial, ec);
  if (ec) return fail(absl::InternalError(absl::StrCat("create ", in.partial, ": ", ec.message())));
  // Root's alone whatever the umask (the image decides what runs as root; its seal check
  // refuses a directory others could write).
  for (const std::string& d : {CheckpointDir(in.name), in.partial}) {
    if (::chmod(d.c_str(), 0700) != 0) return fail(ErrnoStatus("chmod 0700 " + d));
  }
  if (absl::Status st = PrepareJobDir(in.name); !st.ok()) return fail(st);
  api::MigrationReply reply;
  reply.set_node(opts_.node);
  reply.set_state("accepted");
  if (!write(reply)) return fail(absl::CancelledError("the source went away"));

  // A file of the image (in the partial directory) or a log (in the job's directory).
  auto open_file = [&](const std::string& f) -> absl::StatusOr<int> {
    UniqueFd& fd = in.files[f];
    if (!fd.valid()) {
      std::string path = (IsLogFile(f) ? in.job_dir : in.partial) + "/" + f;
      fd = UniqueFd(::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, IsLogFile(f) ? kJobLogMode : 0600));
      if (!fd.valid()) return ErrnoStatus("create " + path);
    }
    return fd.get();
  };
  auto t_finish = Clock::now();
  for (;;) {
    if (!read(&m)) return fail(absl::CancelledError("the source ended the stream before the job was sent"));
    if (m.has_data()) {
      const auto& d = m.data();
      if (!IsImageFile(d.file()) && !IsLogFile(d.file())) {
        return fail(absl::InvalidArgumentError("migration stream: no file '" + d.file() + "' is expected"));
      }
      if (d.offset() < 0 || d.offset() > (int64_t{1} << 44)) return fail(absl::InvalidArgumentError("bad offset"));
      absl::StatusOr<int> fd = open_file(d.file());
      if (!fd.ok()) return fail(fd.status());
      if (::pwrite(*fd, d.data().data(), d.data().size(), d.offset()) != static_cast<ssize_t>(d.data().size())) {
        return fail(ErrnoStatus("write " + d.file()));
      }
      continue;
    }
    if (!m.has_finish()) return fail(absl::InvalidArgumentError("migration stream: expected data or finish"));
    t_finish = Clock::now();
    for (const char* f : {image::kMetaFile, image::kPagesFile, image::kFilesFile}) {
      if (!m.finish().sizes().contains(f)) return fail(absl::DataLossError(absl::StrCat("migration stream: no ", f)));
    }

    for (const auto& [f, size] : m.finish().sizes()) {
      if (!IsImageFile(f) && !IsLogFile(f)) return fail(absl::InvalidArgumentError("migration stream: file " + f));
      if (!in.files.count(f) && !IsLogFile(f)) {
        return fail(absl::DataLossError("migration stream: " + f + " was announced but not sent"));
      }
      absl::StatusOr<int> fd = open_file(f);
      if (!fd.ok()) return fail(fd.status());
      if (::ftruncate(*fd, size) != 0) return fail(ErrnoStatus("truncate " + f));
    }
    break;
  }
  FaultPoint("migrate-received");
  if (absl::Status st = RestoreReceived(in, cancelled); !st.ok()) {
    return fail(Annotate(st, absl::StrCat("restore job ", in.name, " on node ", opts_.node)));
  }
  double restore_s = Since(t_finish);
  FaultPoint("migrate-running");
  reply.set_state("running");
  reply.set_host_pid(in.restored.pid);
  reply.set_restore_s(restore_s);
  if (!write(reply)) return fail(absl::CancelledError("the source went away before it committed"));
  if (!read(&m) || !m.has_commit()) {
    return fail(absl::CancelledError("the source did not commit the migration (it keeps the job)"));
  }
  FaultPoint("migrate-commit-received");

  // Committed: the job is ours. The received image becomes a checkpoint of it here.
  api::Job j;
  j.set_name(in.name);
  *j.mutable_spec() = in.begin.spec();
  j.set_state("running");
  j.set_host_pid(in.restored.pid);
  j.set_start_time(ProcessStartTime(in.restored.pid).value_or(0));
  j.set_created(in.begin.created());
  if (in.previous) j.set_restores(in.previous->restores());
  j.set_dir(in.job_dir);
  j.set_node(opts_.node);
  j.set_arrived_with(in.begin.checkpoint());
  j.set_network_hold(in.restored.network_hold);  // lifted just below (or by Recover after a crash)
  j.mutable_health()->set_state("running");
  // The commit: this one record (state running, arrived_with the migration's id) is what
  // the source's question (MigrationOutcome) and a restart of this daemon go by.
  if (absl::Status st = Persist(j); !st.ok()) {
    return fail(Annotate(st, "record the job in the catalog (the migration was not committed)"));
  }
  FaultPoint("migrate-adopted");
  ::unlink(ArrivalPath(in.name).c_str());  // its addresses are this node's now, its lock its record's
  if (!j.network_hold().empty()) {
    absl::Status lifted = net::RemoveNetworkLock(j.network_hold());
    if (lifted.ok()) {
      j.clear_network_hold();
      if (absl::Status st = Persist(j); !st.ok()) CAIRN_LOG_WARN("job={} not saved: {}", in.name, st.ToString());
    } else {
      CAIRN_LOG_WARN("job={} network lock not lifted (the next restart lifts it): {}", in.name, lifted.ToString());
    }
  }
  {
    std::lock_guard<std::mutex> l(mu_);
    receiving_.erase(in.begin.checkpoint());
    JobState& s = jobs_[in.name];
    s.job = j;
    ClaimNetwork(s);  // a lock not lifted above (the next restart lifts it)
    s.tracker = std::make_unique<HealthTracker>(j.spec().health());
    s.child = true;
    s.busy = false;
    if (j.spec().checkpoint().interval_s() > 0) {
      s.next_checkpoint = std::chrono::duration<double>(Clock::now().time_since_epoch()).count() +
                          j.spec().checkpoint().interval_s();
    }
  }
  api::Checkpoint c;
  c.set_id(in.begin.checkpoint());
  c.set_job(in.name);
  c.set_location(in.dir);
  c.set_reason("migration");
  c.set_created(UnixNow());
  c.set_state("writing");
  (void)catalog_->PutCheckpoint(c);
  Event(in.name, "migrated-in",
        absl::StrFormat("from node %s: runs as pid %d, restored in %.3f s%s", in.begin.from_node(), in.restored.pid,
                        restore_s, opts_.lazy_migrations ? " (memory filled lazily)" : ""));
  reply.set_state("committed");
  (void)write(reply);
  // Sealed and made durable after the job runs: neither the MAC nor the fsyncs are downtime.
  if (opts_.image_key) {
    if (absl::Status st = image::SealImage(in.dir, *opts_.image_key); !st.ok()) {
      CAIRN_LOG_WARN("checkpoint={} job={}: not sealed ({}); a restore from it will be refused", c.id(), in.name,
                     st.ToString());
    }
  }
  for (const char* f : {image::kMetaFile, image::kPagesFile, image::kFilesFile, image::kSealFile}) {
    UniqueFd fd(::open((in.dir + "/" + f).c_str(), O_RDONLY | O_CLOEXEC));
    if (fd.valid()) (void)::fsync(fd.get());
  }
  (void)SyncDir(in.dir);
  (void)SyncDir(CheckpointDir(in.name));
  int64_t size = 0;
  for (auto it = fs::recursive_directory_iterator(in.dir, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    if (it->is_regular_file(ec)) size += static_cast<int64_t>(it->file_size(ec));
  }
  c.set_size_bytes(size);
  if (auto meta = ReadFile(in.dir + "/" + image::kMetaFile); meta.ok()) {
    c.set_checksum(absl::StrFormat("xxh3:%016x", image::Checksum(meta->data(), meta->size())));
  }
  // With a remote --storage it goes there like any checkpoint (the page handler of a lazy
  // restore keeps its own descriptors of the files); if that fails it stays here.
  if (absl::Status st = StoreCheckpoint(c, in.begin.spec()); !st.ok()) {
    CAIRN_LOG_WARN("checkpoint={} job={}: not stored ({}); kept on this node", c.id(), in.name, st.ToString());
  }
  c.set_state("complete");
  (void)catalog_->CompleteCheckpoint(c, 0);
  return absl::OkStatus();
}

}  // namespace cairn::daemon
