#include "cli/daemon_commands.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <limits>
#include <sstream>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <google/protobuf/util/json_util.h>
#include <grpcpp/grpcpp.h>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "cli/output.h"
#include "common/grpc_server.h"
#include "common/proc_identity.h"
#include "common/status.h"
#include "daemon/job_spec_check.h"
#include "daemon.grpc.pb.h"

namespace cairn::cli {

namespace dapi = cairn::daemon::api;

namespace {

// Polls MigrationProgress until `done` and draws it on stderr: on a terminal one line redrawn in
// place ("[#####.....] 120.0 MiB of ~250.0 MiB, 310.2 MiB/s, 0.4 s: copying memory while the job
// runs"), elsewhere a line each time the phase changes.
void ShowMigrationProgress(dapi::Daemon::Stub& stub, const std::string& job, const std::string& token,
                           const std::string& address, const std::atomic<bool>& done) {
  bool tty = ::isatty(STDERR_FILENO) == 1;
  std::string last_phase;
  size_t drawn = 0;
  while (!done) {
    std::this_thread::sleep_for(std::chrono::milliseconds(tty ? 200 : 500));
    if (done) break;
    grpc::ClientContext c;
    c.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
    if (!address.empty() && !token.empty()) c.AddMetadata("authorization", "Bearer " + token);
    dapi::MigrationProgressRequest req;
    req.set_name(job);
    dapi::MigrationProgressResponse p;
    if (!stub.MigrationProgress(&c, req, &p).ok() || p.phase().empty()) continue;
    double rate = p.seconds() > 0 ? static_cast<double>(p.bytes()) / p.seconds() : 0;
    std::string amount = HumanBytes(static_cast<double>(p.bytes()));
    if (p.expected_bytes() > 0) amount += " of ~" + HumanBytes(static_cast<double>(p.expected_bytes()));
    if (tty) {
      int width = 20, filled = 0;
      if (p.expected_bytes() > 0) {
        filled = static_cast<int>(std::min<double>(width, width * static_cast<double>(p.bytes()) /
                                                              static_cast<double>(p.expected_bytes())));
      }
      std::string line = absl::StrFormat("[%s%s] %s, %s/s, %.1f s: %s", std::string(filled, '#'),
                                         std::string(width - filled, '.'), amount, HumanBytes(rate), p.seconds(),
                                         p.phase());
      std::fprintf(stderr, "\r%s%s", line.c_str(), std::string(drawn > line.size() ? drawn - line.size() : 0, ' ').c_str());
      drawn = line.size();
    } else if (p.phase() != last_phase) {
      std::fprintf(stderr, "cairn: job %s: %s (%s sent, %.1f s)\n", job.c_str(), p.phase().c_str(), amount.c_str(),
                   p.seconds());
    }
    last_phase = p.phase();
    std::fflush(stderr);
  }
  if (tty && drawn > 0) std::fprintf(stderr, "\r%s\r", std::string(drawn, ' ').c_str());
}

// `--owner PID` as the daemon takes it: the pid and its start time (a pid reused later is not it).
absl::Status SetOwner(pid_t pid, dapi::Owner* owner) {
  std::optional<uint64_t> start = ProcessStartTime(pid);
  if (!start) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--owner %d: no such process runs; give the pid of a running process", pid));
  }
  owner->set_pid(pid);
  owner->set_start_time(*start);
  return absl::OkStatus();
}

}  // namespace

struct DaemonCommands::Options {
  std::string socket;      // unix socket of the daemon
  std::string address;     // or TCP HOST:PORT
  std::string token_file;
  std::string tls_ca;
  bool json = false;
  double timeout_s = 120;

  std::vector<CLI::App*> all;
  CLI::App *run = nullptr, *list = nullptr, *show = nullptr, *logs = nullptr, *kill = nullptr, *checkpoint = nullptr,
           *restore = nullptr, *del = nullptr, *watch = nullptr, *attach = nullptr, *migrate = nullptr,
           *settle = nullptr, *release_network = nullptr;
  bool here = false, there = false;
  std::string to, to_token_file;
  double restore_timeout = 0;  // the daemon's: 60 s plus 10 s per GiB of the job's memory
  CLI::App *ck_list = nullptr, *ck_show = nullptr, *ck_delete = nullptr, *ck_pin = nullptr;
  CLI::App* node_info = nullptr;
  CLI::App* gc = nullptr;
  bool dry_run = false, cancel = false;

  std::string job, id, memory, from, user, group, cpu_baseline;
  int rank = 0;
  int gpus = 0;  // job run --gpus
  std::vector<std::string> command, addresses, env;
  std::string workdir;
  pid_t owner = 0;  // job run|restore --owner
  double cpus = 0, every = 0, hang_after = 0, pressure = 0, oom_horizon = 0;
  unsigned keep = 0;
  bool no_shutdown_checkpoint = false;
  bool no_signal_checkpoint = false;
  bool newest_stored = false;    // job restore --newest-stored
  double taken_before = 0;
  std::string heartbeat_file;
  bool err = false;
  int64_t tail = 0, tail_bytes = 0;
  double attach_s = 0;
  int signal = 0;
  bool pin = false, stop = false, incremental = false, pre_copy = false, unpin = false, bound = false;
  unsigned count = 0;
  uint32_t full_every = 0;
  std::string tcp = "established";
  uint64_t after = 0;
  CLI::Option* watch_after = nullptr;
};

namespace {

std::string HealthLine(const dapi::Health& h) {
  if (h.state().empty()) return "-";
  return absl::StrCat(h.state(), h.detail().empty() ? "" : ": " + h.detail());
}

void PrintCheckpointRow(const dapi::Checkpoint& c) {
  std::printf("%-40s %-16s %-9s %10s %8.3f %8.3f %-9s %s%s\n", c.id().c_str(), c.job().c_str(), c.state().c_str(),
              HumanBytes(static_cast<double>(c.size_bytes())).c_str(), c.frozen_s(), c.total_s(), c.reason().c_str(),
              TimeString(c.created()).c_str(), c.pinned() ? " pinned" : "");
}

void PrintEvent(const dapi::Event& e) {
  std::printf("%6llu %s %-20s %-18s %s\n", static_cast<unsigned long long>(e.seq()), TimeString(e.time()).c_str(),
              e.job().c_str(), e.kind().c_str(), e.detail().c_str());
}

}  // namespace

DaemonCommands::DaemonCommands(CLI::App& app) : o_(std::make_unique<Options>()) {
  Options& o = *o_;
  const char* env = std::getenv("CAIRND_SOCKET");
  o.socket = env != nullptr ? env : "/run/cairn/cairnd.sock";
  auto common = [&o](CLI::App* c) {
    c->add_option("--socket", o.socket, "The daemon's unix socket (default $CAIRND_SOCKET or /run/cairn/cairnd.sock)");
    c->add_option("--daemon", o.address, "Reach the daemon over TCP at HOST:PORT instead (needs the token)");
    c->add_option("--token-file", o.token_file, "File with the daemon's TCP token (default $CAIRN_TOKEN)");
    c->add_option("--tls-ca", o.tls_ca, "Reach the daemon's TCP port in TLS, trusting these PEM CA certificates "
                                        "(default $CAIRN_TLS_CA)");
    c->add_flag("--json", o.json, "Print the daemon's reply as JSON");
    c->add_option("--timeout", o.timeout_s, "Seconds to wait for the daemon (job migrate: until it ends, unless given)")
        ->capture_default_str()
        ->check(CLI::Range(0.001, 1e7));
    o.all.push_back(c);
  };

  // `job` may already exist (the controller's `job explain`): share it.
  CLI::App* job = nullptr;
  try {
    job = app.get_subcommand("job");
    job->description("Jobs: on this node's daemon (run, list, show, ...) and in the controller (explain)");
  } catch (const CLI::OptionNotFound&) {
    job = app.add_subcommand("job", "Jobs on this node's daemon");
    job->require_subcommand(1);
  }
  o.run = job->add_subcommand("run", "Start a managed job on the daemon (own namespaces and cgroup, checkpointable)");
  common(o.run);
  o.run->add_option("--name", o.job, "Job name (default: generated)");
  o.run->add_option("--cpus", o.cpus, "CPU limit, in CPUs (cgroup cpu quota)");
  o.run->add_option("--memory", o.memory, "Memory limit, e.g. 512M, 2G (cgroup memory.limit_in_bytes)");
  o.run->add_option("--checkpoint-every", o.every, "Checkpoint every this many seconds (0: only on demand)");
  o.run->add_option("--keep", o.keep, "Keep the last N complete checkpoints, plus pinned ones (0: all)");
  o.run->add_flag("--pre-copy", o.pre_copy, "Take the periodic checkpoints with pre-copy (a short freeze)");
  o.run->add_flag("--incremental", o.incremental,
                  "Make the periodic checkpoints incremental: only the pages written since the previous one");
  o.run->add_option("--full-every", o.full_every, "With --incremental: every Nth periodic checkpoint is a full one (default 8)");
  o.run->add_option("--tcp", o.tcp,
                    "The job's established TCP connections in its checkpoints: established (saved whole, the "
                    "default), close (restored as reset by their peer) or refuse (the checkpoint fails)")
      ->check(CLI::IsMember({"established", "close", "refuse"}));
  o.run->add_flag("--no-signal-checkpoint", o.no_signal_checkpoint,
                  "Do not checkpoint this job when cairnd receives SIGUSR1 (a preemption hook)");
  o.run->add_flag("--no-shutdown-checkpoint", o.no_shutdown_checkpoint,
                  "Do not checkpoint this job when the daemon is stopped (SIGTERM)");
  o.run->add_option("--hang-after", o.hang_after, "Report the job hung after this many seconds without progress");
  o.run->add_option("--heartbeat-file", o.heartbeat_file, "A file the job touches to show progress");
  o.run->add_option("--memory-pressure", o.pressure, "Report memory pressure at this usage/limit ratio (default 0.9)");
  o.run->add_option("--oom-horizon", o.oom_horizon,
                    "Also report memory pressure when the limit is predicted to be reached within this many "
                    "seconds at the present growth rate (default 120; negative: never)");
  o.run->add_option("--user", o.user,
                    "Run the job as this user of the node (name or uid): nothing of it runs as root, and its "
                    "checkpoints are restored only with this user's credentials");
  o.run->add_option("--cpu-baseline", o.cpu_baseline,
                    "Use only the CPU features of this level (x86-64-v2, v3 or v4), so that the job can be restored "
                    "on any node of that level; default: every feature of this node's CPU");
  o.run->add_option("--gpus", o.gpus,
                    "GPUs the job gets, of the node's free ones (CUDA_VISIBLE_DEVICES is set for it); its checkpoints "
                    "then hold their device state (docs/gpu.md)")
      ->check(CLI::Range(0, 64));
  o.run->add_option("--env", o.env,
                    "KEY=VALUE (repeatable): the job's command starts with exactly these variables; default: the "
                    "daemon's environment");
  o.run->add_option("--workdir", o.workdir,
                    "The directory the job's command starts in (absolute; entered as --user); default: the daemon's");
  o.run->add_option("--owner", o.owner,
                    "A process (pid) the job lives no longer than: when it exits while the job runs, the daemon "
                    "kills the job (once a checkpoint in progress has ended); a SLURM task's agent owns its job so");
  o.run->add_option("--group", o.group,
                    "A rank of this job group: processes on several nodes checkpointed together as one "
                    "consistent cut, and restored together (cairn group checkpoint|restore, through the controller)");
  o.run->add_option("--rank", o.rank, "The job's rank in its --group (0 to 65535)");
  o.run->add_option("--address", o.addresses,
                    "A service address of the job, ADDR/PREFIX or ADDR/PREFIX@DEVICE (repeatable): on the node "
                    "where the job runs and only there; a live migration moves it, and the job's established "
                    "connections to it, with the job")
      ->allow_extra_args(false);  // one per --address: a list would swallow the "--" before the command
  o.run->add_option("command", o.command, "The command and its arguments, after --")->required();

  o.list = job->add_subcommand("list", "Jobs on the daemon");
  common(o.list);
  o.show = job->add_subcommand("show", "A job: state, health, checkpoints, recent events");
  common(o.show);
  o.show->add_option("job", o.job, "Job name")->required();
  o.logs = job->add_subcommand("logs", "A job's output");
  common(o.logs);
  o.logs->add_option("job", o.job, "Job name")->required();
  o.logs->add_flag("--stderr", o.err, "stderr instead of stdout");
  o.logs->add_option("--tail", o.tail, "Only the last N lines")->check(CLI::Range(int64_t{0}, int64_t{1} << 40));
  o.logs->add_option("--tail-bytes", o.tail_bytes, "Only about the last N bytes, from the start of a line")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40));
  o.attach = job->add_subcommand("attach", "Follow a job's stdout and stderr as it writes them, until it ends "
                                           "(Ctrl-C detaches; the job keeps running)");
  common(o.attach);
  o.attach->add_option("job", o.job, "Job name")->required();
  o.attach->add_option("--tail", o.tail, "First show the last N lines already written to each log")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40));
  o.attach->add_option("--tail-bytes", o.tail_bytes, "Or about the last N bytes of each, from the start of a line")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40));
  o.attach->add_option("--for", o.attach_s, "Detach after this many seconds (0: when the job ends)");
  o.attach->add_flag("--bound", o.bound,
                     "The job lives only as long as this attach: if it is cut off (this command killed, "
                     "its connection lost) while the job runs, cairnd kills the job");
  o.settle = job->add_subcommand("settle", "End a migration whose destination cannot say how it ended (the job "
                                           "stands frozen here, state migrating): --here runs it on here, --there "
                                           "ends the copy here");
  common(o.settle);
  o.settle->add_option("job", o.job, "Job name")->required();
  auto* here_opt = o.settle->add_flag("--here", o.here, "It did not move: thaw it and run it on here");
  auto* there_opt = o.settle->add_flag("--there", o.there, "It runs on the destination: end the copy here");
  here_opt->excludes(there_opt);
  o.kill = job->add_subcommand("kill", "Send a job a signal (default SIGKILL, which waits until it is gone)");
  common(o.kill);
  o.kill->add_option("job", o.job, "Job name")->required();
  auto* signal_opt = o.kill->add_option("--signal", o.signal, "Signal number");
  o.kill->add_flag("--cancel", o.cancel,
                   "The job is not wanted any more: SIGKILL (also to a job that has ended), and its unpinned "
                   "checkpoints on this node removed; its logs stay")
      ->excludes(signal_opt);
  o.checkpoint = job->add_subcommand("checkpoint", "Checkpoint a running job now (it keeps running)");
  common(o.checkpoint);
  o.checkpoint->add_option("job", o.job, "Job name")->required();
  o.checkpoint->add_flag("--pin", o.pin, "Keep this checkpoint whatever the retention says");
  o.checkpoint->add_flag("--kill", o.stop, "Stop the job once the checkpoint is complete");
  o.checkpoint->add_flag("--incremental", o.incremental,
                         "Only the pages written since the job's newest checkpoint (a full one when it cannot)");
  o.checkpoint->add_flag("--pre-copy", o.pre_copy, "Copy memory while the job runs; freeze it only for the rest");
  o.restore = job->add_subcommand("restore", "Restore a job that does not run from a checkpoint");
  common(o.restore);
  o.restore->add_option("job", o.job, "Job name")->required();
  o.restore->add_option("--checkpoint", o.id, "Checkpoint id (default: the newest complete one)");
  o.restore->add_option("--from", o.from, "A checkpoint location in a shared store (s3://… or a dir: store's directory), e.g. another node's");
  o.restore->add_flag("--newest-stored", o.newest_stored,
                      "The job's newest complete checkpoint in the shared store, whichever node took it (e.g. a lost node's)");
  o.restore->add_option("--taken-before", o.taken_before, "With --newest-stored: taken at or before this time (unix seconds)");
  o.restore->add_option("--owner", o.owner,
                        "A process (pid) the restored job lives no longer than, as job run --owner (default: none, "
                        "whatever owner it had)");
  o.migrate = job->add_subcommand("migrate", "Move a running job to another node's daemon (it keeps running here if that fails)");
  common(o.migrate);
  o.migrate->add_option("job", o.job, "Job name")->required();
  o.migrate->add_option("--to", o.to, "The destination: a peer's node name (cairnd --peer) or HOST:PORT")->required();
  o.migrate->add_option("--to-token-file", o.to_token_file,
                        "File with the destination's TCP token (default: the daemon's --peer-token-file)");
  o.migrate->add_option("--restore-timeout", o.restore_timeout,
                        "Seconds the job may stand frozen while the destination restores it; then it is thawed here "
                        "(default: 60 s plus 10 s per GiB of the job's memory)");
  o.del = job->add_subcommand("delete", "Remove a job that does not run, with its checkpoints and logs");
  common(o.del);
  o.del->add_option("job", o.job, "Job name")->required();
  o.release_network = job->add_subcommand(
      "release-network", "Lift the network lock a job restored with its network held still keeps (a group restore "
                         "whose controller never lifted it): its connections' packets flow again");
  common(o.release_network);
  o.release_network->add_option("job", o.job, "Job name")->required();
  o.watch = job->add_subcommand("watch", "Follow health changes and other events as they happen");
  common(o.watch);
  o.watch->add_option("job", o.job, "Only this job's events");
  o.watch->add_option("--count", o.count, "Stop after N events");
  o.watch_after = o.watch->add_option("--after", o.after, "Replay stored events after this sequence number first (0: all)");

  CLI::App* ck = app.add_subcommand("checkpoint", "Checkpoints kept by the node daemon");
  ck->require_subcommand(1);
  o.ck_list = ck->add_subcommand("list", "Checkpoints, oldest first");
  common(o.ck_list);
  o.ck_list->add_option("--job", o.job, "Only this job's");
  o.ck_show = ck->add_subcommand("show", "One checkpoint");
  common(o.ck_show);
  o.ck_show->add_option("id", o.id, "Checkpoint id")->required();
  o.ck_delete = ck->add_subcommand("delete", "Remove a checkpoint and its files");
  common(o.ck_delete);
  o.ck_delete->add_option("id", o.id, "Checkpoint id")->required();
  o.ck_pin = ck->add_subcommand("pin", "Pin a checkpoint (kept whatever the retention says)");
  common(o.ck_pin);
  o.ck_pin->add_option("id", o.id, "Checkpoint id")->required();
  o.ck_pin->add_flag("--unpin", o.unpin, "Unpin instead");

  CLI::App* node = app.add_subcommand("node", "This node's daemon");
  node->require_subcommand(1);
  o.node_info = node->add_subcommand("info", "The daemon, its watchers (spot notices, GPU events, controller) and notices");
  common(o.node_info);

  o.gc = app.add_subcommand("gc",
                            "Remove what nothing on this node needs any more: checkpoints of jobs that migrated away "
                            "(stored ones once the store holds a newer one) or were cancelled, cgroups of ended jobs; "
                            "pinned checkpoints stay (cairnd also does it every --gc-every seconds)");
  common(o.gc);
  o.gc->add_flag("--dry-run", o.dry_run, "Only list what would be removed");
}

DaemonCommands::~DaemonCommands() = default;

bool DaemonCommands::Parsed() const {
  for (CLI::App* c : o_->all) {
    if (c->parsed()) return true;
  }
  return false;
}

int DaemonCommands::Run() {
  Options& o = *o_;
  std::string token;
  if (!o.token_file.empty()) {
    std::ifstream in(o.token_file);
    if (!in) return Fail(absl::StatusCode::kInvalidArgument, absl::StrCat("--token-file ", o.token_file, ": cannot read it"));
    std::stringstream ss;
    ss << in.rdbuf();
    token = std::string(absl::StripAsciiWhitespace(ss.str()));
  } else if (const char* t = std::getenv("CAIRN_TOKEN")) {
    token = t;
  }
  std::string target = o.address.empty() ? "unix:" + o.socket : o.address;
  if (o.tls_ca.empty() && std::getenv("CAIRN_TLS_CA") != nullptr) o.tls_ca = std::getenv("CAIRN_TLS_CA");
  auto creds = ClientCredentials(target, o.tls_ca);
  if (!creds.ok()) return Fail(creds.status());
  auto channel = grpc::CreateChannel(target, *creds);
  auto stub = dapi::Daemon::NewStub(channel);
  // A migration takes as long as the job's memory takes to move: it is waited for until its
  // outcome unless --timeout was given (the daemon bounds its own steps).
  bool wait_for_outcome = o.migrate->parsed() && o.migrate->get_option("--timeout")->count() == 0;
  // When our own --timeout runs out (steady: a clock step must not make it look like the daemon's).
  std::chrono::steady_clock::time_point our_deadline = std::chrono::steady_clock::time_point::max();
  auto ctx = [&](grpc::ClientContext& c) {
    if (!wait_for_outcome) {
      auto timeout = std::chrono::milliseconds(static_cast<int64_t>(o.timeout_s * 1000));
      our_deadline = std::chrono::steady_clock::now() + timeout;
      c.set_deadline(std::chrono::system_clock::now() + timeout);
    }
    if (!o.address.empty() && !token.empty()) c.AddMetadata("authorization", "Bearer " + token);
  };
  auto failed = [&](const grpc::Status& s) {
    if (s.error_code() == grpc::StatusCode::UNAVAILABLE) {
      return Fail(absl::StatusCode::kUnavailable, absl::StrCat("cairnd at ", target, " does not answer (", s.error_message(),
                               "); is it running? (--socket PATH or CAIRND_SOCKET)",
                               o.address.empty() || !o.tls_ca.empty() ? ""
                                                                      : "; if its TCP port is in TLS, give --tls-ca"));
    }
    // Our own --timeout ran out (not the daemon's answer that something of its own took too long).
    if (s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED && std::chrono::steady_clock::now() + std::chrono::milliseconds(100) >= our_deadline) {
      return Fail(absl::StatusCode::kDeadlineExceeded,
                  absl::StrCat("cairnd at ", target, " did not answer within --timeout ", o.timeout_s,
                               " s: what was asked may still be going on there; follow it with `cairn job watch",
                               o.job.empty() ? "" : " " + o.job, "` or `cairn job show`"));
    }
    return Fail(static_cast<absl::StatusCode>(s.error_code()), absl::StrCat("cairnd at ", target, ": ", s.error_message()));
  };
  // One unary call: 0, or the exit status of its failure (already reported).
  auto call = [&](auto method, const auto& req, auto* resp) -> int {
    grpc::ClientContext c;
    ctx(c);
    grpc::Status st = (stub.get()->*method)(&c, req, resp);
    return st.ok() ? 0 : failed(st);
  };

  if (o.run->parsed()) {
    dapi::RunJobRequest req;
    if (absl::Status bad = o.owner != 0 ? SetOwner(o.owner, req.mutable_owner()) : absl::OkStatus(); !bad.ok()) {
      return Fail(bad);
    }
    dapi::JobSpec* s = req.mutable_spec();
    s->set_name(o.job);
    s->set_user(o.user);
    s->set_cpu_baseline(o.cpu_baseline);
    s->set_group(o.group);
    s->set_rank(o.rank);
    s->set_gpus(o.gpus);
    for (const auto& a : o.addresses) s->add_addresses(a);
    for (const auto& a : o.command) s->add_command(a);
    for (const auto& e : o.env) s->add_env(e);
    s->set_workdir(o.workdir);
    s->mutable_limits()->set_cpus(o.cpus);
    if (!o.memory.empty()) {
      int64_t m = ParseSize(o.memory);
      if (m <= 0) return Fail(absl::StatusCode::kInvalidArgument, absl::StrCat("--memory ", o.memory, ": not a size; write e.g. 512M or 2G"));
      s->mutable_limits()->set_memory_bytes(m);
    }
    s->mutable_checkpoint()->set_interval_s(o.every);
    s->mutable_checkpoint()->set_keep_last(o.keep);
    s->mutable_checkpoint()->set_on_shutdown(!o.no_shutdown_checkpoint);
    s->mutable_checkpoint()->set_on_signal(!o.no_signal_checkpoint);
    s->mutable_checkpoint()->set_pre_copy(o.pre_copy);
    s->mutable_checkpoint()->set_incremental(o.incremental);
    s->mutable_checkpoint()->set_full_every(o.full_every);
    s->mutable_checkpoint()->set_tcp(o.tcp == "close"    ? dapi::CheckpointPolicy::TCP_CLOSE
                                     : o.tcp == "refuse" ? dapi::CheckpointPolicy::TCP_REFUSE
                                                         : dapi::CheckpointPolicy::TCP_ESTABLISHED);
    s->mutable_health()->set_hang_after_s(o.hang_after);
    s->mutable_health()->set_heartbeat_file(o.heartbeat_file);
    s->mutable_health()->set_memory_pressure_ratio(o.pressure);
    s->mutable_health()->set_oom_horizon_s(o.oom_horizon);
    // The daemon refuses the same; checked here first so that nothing is sent.
    if (absl::Status bad = daemon::CheckJobSpec(*s); !bad.ok()) return Fail(Annotate(bad, "job run"));
    dapi::RunJobResponse resp;
    if (int rc = call(&dapi::Daemon::Stub::RunJob, req, &resp)) return rc;
    if (o.json) return PrintJson(resp);
    std::printf("job %s pid %d on %s\nlogs: cairn job logs %s\n", resp.job().name().c_str(), resp.job().host_pid(),
                resp.job().node().c_str(), resp.job().name().c_str());
    return 0;
  }
  if (o.list->parsed()) {
    dapi::ListJobsResponse resp;
    if (int rc = call(&dapi::Daemon::Stub::ListJobs, dapi::ListJobsRequest(), &resp)) return rc;
    if (o.json) return PrintJson(resp);
    std::printf("%-24s %-9s %8s %-16s %6s  %s\n", "JOB", "STATE", "PID", "HEALTH", "CKPTS", "COMMAND");
    for (const auto& j : resp.jobs()) {
      std::printf("%-24s %-9s %8d %-16s %6u  %s\n", j.name().c_str(), j.state().c_str(), j.host_pid(),
                  j.health().state().c_str(), j.checkpoints(), absl::StrJoin(j.spec().command(), " ").c_str());
    }
    return 0;
  }
  if (o.show->parsed()) {
    dapi::GetJobRequest req;
    req.set_name(o.job);
    dapi::GetJobResponse resp;
    if (int rc = call(&dapi::Daemon::Stub::GetJob, req, &resp)) return rc;
    if (o.json) return PrintJson(resp);
    const dapi::Job& j = resp.job();
    const dapi::Health& h = j.health();
    std::printf("job %s on %s: %s\n", j.name().c_str(), j.node().c_str(), j.state().c_str());
    std::printf("  command   %s\n", absl::StrJoin(j.spec().command(), " ").c_str());
    std::printf("  pid       %d (start time %llu), restored %u time%s\n", j.host_pid(),
                static_cast<unsigned long long>(j.start_time()), j.restores(), j.restores() == 1 ? "" : "s");
    std::printf("  created   %s%s\n", TimeString(j.created()).c_str(),
                j.ended() > 0 ? absl::StrCat(", ended ", TimeString(j.ended())).c_str() : "");
    if (j.gpu_devices_size() > 0) std::printf("  gpus      %s\n", absl::StrJoin(j.gpu_devices(), ", ").c_str());
    std::printf("  health    %s\n", HealthLine(h).c_str());
    if (j.state() == "running") {
      std::printf("  cpu       %.2f s, %.1f s since progress\n", h.cpu_seconds(), h.seconds_since_progress());
      std::printf("  memory    %s%s%s\n", HumanBytes(static_cast<double>(h.memory_bytes())).c_str(),
                  h.memory_limit_bytes() > 0
                      ? absl::StrFormat(" of %s (%.0f%%)", HumanBytes(static_cast<double>(h.memory_limit_bytes())),
                                        h.memory_ratio() * 100).c_str()
                      : " (no limit)",
                  absl::StrFormat(", node PSI some avg10 %.2f", h.psi_some_avg10()).c_str());
    } else if (j.state() == "exited" || j.state() == "killed") {
      std::printf("  ended     %s\n", !h.exit_known() ? "status unknown"
                                      : h.signal() ? absl::StrCat("signal ", h.signal()).c_str()
                                                   : absl::StrCat("exit code ", h.exit_code()).c_str());
    }
    const auto& p = j.spec().checkpoint();
    std::printf("  policy    every %s, keep %s, %s on shutdown, %s on SIGUSR1\n",
                p.interval_s() > 0 ? absl::StrFormat("%.0f s%s", p.interval_s(),
                                                     p.pre_copy() ? " (pre-copy)" : p.incremental() ? " (incremental)" : "")
                                         .c_str()
                                   : "- (on demand)",
                p.keep_last() > 0 ? absl::StrCat("last ", p.keep_last(), " + pinned").c_str() : "all",
                p.on_shutdown() ? "checkpoint" : "no checkpoint", p.on_signal() ? "checkpoint" : "no checkpoint");
    std::printf("  limits    cpus %s, memory %s\n",
                j.spec().limits().cpus() > 0 ? absl::StrFormat("%.2f", j.spec().limits().cpus()).c_str() : "-",
                j.spec().limits().memory_bytes() > 0
                    ? HumanBytes(static_cast<double>(j.spec().limits().memory_bytes())).c_str()
                    : "-");
    std::printf("checkpoints:\n");
    for (const auto& ck : resp.checkpoints()) {
      std::printf("  ");
      PrintCheckpointRow(ck);
    }
    std::printf("events:\n");
    for (const auto& e : resp.events()) PrintEvent(e);
    return 0;
  }
  if (o.logs->parsed()) {
    dapi::JobLogsRequest req;
    req.set_name(o.job);
    req.set_stderr(o.err);
    req.set_tail_lines(o.tail);
    req.set_tail_bytes(o.tail_bytes);
    dapi::JobLogsResponse resp;
    if (int rc = call(&dapi::Daemon::Stub::JobLogs, req, &resp)) return rc;
    if (o.json) return PrintJson(resp);
    std::fwrite(resp.data().data(), 1, resp.data().size(), stdout);
    return 0;
  }
  if (o.attach->parsed()) {
    if (o.bound && o.attach_s > 0) {
      return Fail(absl::StatusCode::kInvalidArgument,
                  "attach --bound --for: the job would be killed when --for detaches; give one of them");
    }
    dapi::AttachJobRequest req;
    req.set_name(o.job);
    req.set_tail_lines(o.tail);
    req.set_tail_bytes(o.tail_bytes);
    req.set_bound(o.bound);
    grpc::ClientContext c;
    if (!o.address.empty() && !token.empty()) c.AddMetadata("authorization", "Bearer " + token);
    if (o.attach_s > 0) {
      c.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(static_cast<int64_t>(o.attach_s * 1000)));
    }
    auto reader = stub->AttachJob(&c, req);
    dapi::AttachJobOutput out, last;
    std::string ended;
    while (reader->Read(&out)) {
      if (!out.ended().empty()) {
        ended = out.ended();
        last = out;
      }
      std::FILE* to = out.stderr() ? stderr : stdout;
      std::fwrite(out.data().data(), 1, out.data().size(), to);
      std::fflush(to);
    }
    grpc::Status st = reader->Finish();
    if (st.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) return 0;  // detached after --for
    if (!st.ok()) return failed(st);
    if (ended.empty()) return 0;
    std::fprintf(stderr, "cairn: job %s %s\n", o.job.c_str(), ended.c_str());
    // The job's own exit status, as a shell gives it (128+N for signal N); a job that moved to
    // another node did not end: 0.
    const dapi::Health& h = last.health();
    if (h.signal() > 0) return 128 + h.signal();
    if (last.state() == "exited" && h.exit_known()) return h.exit_code();
    return 0;
  }
  if (o.settle->parsed()) {
    if (!o.here && !o.there) {
      return Fail(absl::StatusCode::kInvalidArgument, "job settle: say --here (it did not move) or --there (it runs there)");
    }
    dapi::SettleMigrationRequest req;
    req.set_name(o.job);
    req.set_here(o.here);
    dapi::SettleMigrationResponse resp;
    if (int rc = call(&dapi::Daemon::Stub::SettleMigration, req, &resp)) return rc;
    if (o.json) return PrintJson(resp);
    std::printf("job %s: %s\n", resp.job().name().c_str(), resp.job().state().c_str());
    return 0;
  }
  if (o.kill->parsed()) {
    dapi::KillJobRequest req;
    req.set_name(o.job);
    req.set_signal(o.signal);
    req.set_cancel(o.cancel);
    dapi::KillJobResponse resp;
    if (int rc = call(&dapi::Daemon::Stub::KillJob, req, &resp)) return rc;
    if (o.json) return PrintJson(resp);
    std::printf("job %s: %s%s\n", resp.job().name().c_str(), resp.job().state().c_str(),
                resp.job().cancelled() ? ", cancelled (its checkpoints here removed)" : "");
    return 0;
  }
  if (o.checkpoint->parsed()) {
    dapi::CheckpointJobRequest req;
    req.set_name(o.job);
    req.set_pin(o.pin);
    req.set_kill(o.stop);
    req.set_incremental(o.incremental);
    req.set_pre_copy(o.pre_copy);
    dapi::CheckpointJobResponse resp;
    if (int rc = call(&dapi::Daemon::Stub::CheckpointJob, req, &resp)) return rc;
    if (o.json) return PrintJson(resp);
    const auto& ck = resp.checkpoint();
    std::printf("checkpoint %s of job %s: %s, frozen %.3f s, total %.3f s, %s\n", ck.id().c_str(), ck.job().c_str(),
                HumanBytes(static_cast<double>(ck.size_bytes())).c_str(), ck.frozen_s(), ck.total_s(),
                ck.checksum().c_str());
    return 0;
  }
  if (o.restore->parsed()) {
    dapi::RestoreJobRequest req;
    req.set_name(o.job);
    req.set_checkpoint(o.id);
    req.set_from(o.from);
    req.set_newest_stored(o.newest_stored);
    req.set_taken_before(o.taken_before);
    if (absl::Status bad = o.owner != 0 ? SetOwner(o.owner, req.mutable_owner()) : absl::OkStatus(); !bad.ok()) {
      return Fail(bad);
    }
    if (absl::Status bad = daemon::CheckRestoreRequest(req); !bad.ok()) return Fail(Annotate(bad, "job restore"));
    dapi::RestoreJobResponse resp;
    if (int rc = call(&dapi::Daemon::Stub::RestoreJob, req, &resp)) return rc;
    if (o.json) return PrintJson(resp);
    std::printf("job %s restored as pid %d in %.3f s\n", resp.job().name().c_str(), resp.job().host_pid(), resp.seconds());
    return 0;
  }
  if (o.migrate->parsed()) {
    dapi::MigrateJobRequest req;
    req.set_name(o.job);
    req.set_to(o.to);
    req.set_restore_timeout_s(o.restore_timeout);
    if (absl::Status bad = daemon::CheckMigrateRequest(req); !bad.ok()) return Fail(Annotate(bad, "job migrate"));
    if (!o.to_token_file.empty()) {
      std::ifstream in(o.to_token_file);
      if (!in) return Fail(absl::StatusCode::kInvalidArgument, absl::StrCat("--to-token-file ", o.to_token_file, ": cannot read it"));
      std::stringstream ss;
      ss << in.rdbuf();
      req.set_token(std::string(absl::StripAsciiWhitespace(ss.str())));
    }
    dapi::MigrateJobResponse resp;
    // The migration runs in the daemon; meanwhile its progress is shown on stderr (a bar that
    // redraws itself on a terminal, a line per phase otherwise; nothing with --json).
    std::atomic<bool> done{false};
    int rc = 0;
    std::thread mover([&] {
      rc = call(&dapi::Daemon::Stub::MigrateJob, req, &resp);
      done = true;
    });
    if (!o.json) ShowMigrationProgress(*stub, o.job, token, o.address, done);
    mover.join();
    if (rc != 0) return rc;
    if (o.json) return PrintJson(resp);
    std::printf("job %s migrated from node %s to node %s: downtime %.1f ms, %s moved (%s while it ran), "
                "restored in %.1f ms, total %.2f s\n",
                o.job.c_str(), resp.from_node().c_str(), resp.to_node().c_str(), resp.downtime_s() * 1e3,
                HumanBytes(static_cast<double>(resp.bytes())).c_str(),
                HumanBytes(static_cast<double>(resp.precopy_bytes())).c_str(), resp.restore_s() * 1e3, resp.total_s());
    return 0;
  }
  if (o.del->parsed()) {
    dapi::DeleteJobRequest req;
    req.set_name(o.job);
    dapi::DeleteJobResponse resp;
    if (int rc = call(&dapi::Daemon::Stub::DeleteJob, req, &resp)) return rc;
    if (o.json) return PrintJson(resp);
    std::printf("job %s deleted\n", o.job.c_str());
    return 0;
  }
  if (o.release_network->parsed()) {
    dapi::ReleaseNetworkRequest req;
    req.set_name(o.job);
    dapi::ReleaseNetworkResponse resp;
    if (int rc = call(&dapi::Daemon::Stub::ReleaseNetwork, req, &resp)) return rc;
    if (o.json) return PrintJson(resp);
    std::printf("job %s: its connections' packets flow\n", o.job.c_str());
    return 0;
  }
  if (o.gc->parsed()) {
    dapi::CollectGarbageRequest req;
    req.set_dry_run(o.dry_run);
    dapi::CollectGarbageResponse resp;
    if (int rc = call(&dapi::Daemon::Stub::CollectGarbage, req, &resp)) return rc;
    if (o.json) return PrintJson(resp);
    int failed = 0;
    for (const dapi::GarbageItem& item : resp.items()) {
      if (!item.error().empty()) ++failed;
      std::printf("%s %s %s (job %s, %s): %s%s\n", item.error().empty() ? (o.dry_run ? "would remove" : "removed") : "kept",
                  item.kind().c_str(), item.what().c_str(), item.job().c_str(),
                  HumanBytes(static_cast<double>(item.bytes())).c_str(), item.why().c_str(),
                  item.error().empty() ? "" : (" — not removed: " + item.error()).c_str());
    }
    std::printf("%s %s in %d item(s)%s\n", o.dry_run ? "would free" : "freed",
                HumanBytes(static_cast<double>(resp.bytes())).c_str(), resp.items_size() - failed,
                failed > 0 ? absl::StrFormat("; %d could not be removed (see above)", failed).c_str() : "");
    return failed > 0 ? 1 : 0;
  }
  if (o.node_info->parsed()) {
    dapi::NodeInfoResponse resp;
    if (int rc = call(&dapi::Daemon::Stub::NodeInfo, dapi::NodeInfoRequest(), &resp)) return rc;
    if (o.json) return PrintJson(resp);
    std::printf("node %s: cairnd %s, pid %d, %u job(s) running, state %s\n", resp.node().c_str(),
                resp.version().c_str(), resp.pid(), resp.jobs_running(), resp.state_dir().c_str());
    std::map<std::string, std::string> parts(resp.components().begin(), resp.components().end());
    for (const auto& [k, v] : parts) std::printf("%s: %s\n", k.c_str(), v.c_str());
    if (!resp.storage().empty()) std::printf("storage: %s\n", resp.storage().c_str());
    if (!resp.peers().empty()) {
      std::map<std::string, std::string> peers(resp.peers().begin(), resp.peers().end());
      std::vector<std::string> each;
      for (const auto& [name, address] : peers) each.push_back(name + "=" + address);
      std::printf("peers: %s\n", absl::StrJoin(each, ", ").c_str());
    }
    if (resp.cpu_level() > 0) {
      std::printf("cpu: x86-64-v%d, %d features (jobs move here only when it has what they may use)\n",
                  resp.cpu_level(), resp.cpu_features_size());
    }
    if (resp.gpus() > 0) std::printf("gpus: %u %s\n", resp.gpus(), resp.gpu_type().c_str());
    for (const auto& e : resp.gpu_events()) std::printf("gpu event: %s\n", e.c_str());
    if (resp.has_spot_notice()) {
      const dapi::SpotNotice& n = resp.spot_notice();
      std::printf("spot notice: %s %s, deadline %s (received %s): %s\n", n.cloud().c_str(), n.action().c_str(),
                  TimeString(n.deadline()).c_str(), TimeString(n.received()).c_str(), n.detail().c_str());
    }
    return 0;
  }
  if (o.watch->parsed()) {
    dapi::WatchRequest req;
    req.set_job(o.job);
    if (o.watch_after->count() > 0) req.set_after_seq(o.after);
    grpc::ClientContext c;
    ctx(c);
    auto reader = stub->Watch(&c, req);
    dapi::Event e;
    unsigned n = 0;
    while (reader->Read(&e)) {
      if (o.json) {
        std::printf("%s", ToJson(e, /*pretty=*/false).c_str());
      } else {
        PrintEvent(e);
      }
      std::fflush(stdout);
      if (o.count > 0 && ++n >= o.count) {
        c.TryCancel();
        return 0;
      }
    }
    grpc::Status st = reader->Finish();
    if (st.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) return 0;  // watched until --timeout
    if (!st.ok()) return failed(st);
    return 0;
  }
  if (o.ck_list->parsed()) {
    dapi::ListCheckpointsRequest req;
    req.set_job(o.job);
    dapi::ListCheckpointsResponse resp;
    if (int rc = call(&dapi::Daemon::Stub::ListCheckpoints, req, &resp)) return rc;
    if (o.json) return PrintJson(resp);
    std::printf("%-40s %-16s %-9s %10s %8s %8s %-9s %s\n", "ID", "JOB", "STATE", "SIZE", "FROZEN", "TOTAL", "REASON",
                "CREATED");
    for (const auto& ck : resp.checkpoints()) PrintCheckpointRow(ck);
    return 0;
  }
  if (o.ck_show->parsed() || o.ck_pin->parsed()) {
    dapi::GetCheckpointResponse shown;  // what --json prints, for both
    dapi::Checkpoint& ck = *shown.mutable_checkpoint();
    grpc::ClientContext c;
    ctx(c);
    grpc::Status st;
    if (o.ck_show->parsed()) {
      dapi::GetCheckpointRequest req;
      req.set_id(o.id);
      dapi::GetCheckpointResponse resp;
      st = stub->GetCheckpoint(&c, req, &resp);
      ck = resp.checkpoint();
    } else {
      dapi::PinCheckpointRequest req;
      req.set_id(o.id);
      req.set_pinned(!o.unpin);
      dapi::PinCheckpointResponse resp;
      st = stub->PinCheckpoint(&c, req, &resp);
      ck = resp.checkpoint();
    }
    if (!st.ok()) return failed(st);
    if (o.json) return PrintJson(shown);
    std::printf("checkpoint %s of job %s: %s%s\n  location %s\n  size     %s (%lld bytes)\n  checksum %s\n"
                "  parent   %s\n  reason   %s, created %s\n  frozen   %.3f s, total %.3f s\n%s",
                ck.id().c_str(), ck.job().c_str(), ck.state().c_str(), ck.pinned() ? ", pinned" : "",
                ck.location().c_str(), HumanBytes(static_cast<double>(ck.size_bytes())).c_str(),
                static_cast<long long>(ck.size_bytes()), ck.checksum().empty() ? "-" : ck.checksum().c_str(),
                ck.parent().empty() ? "- (full)" : ck.parent().c_str(), ck.reason().c_str(),
                TimeString(ck.created()).c_str(), ck.frozen_s(), ck.total_s(),
                ck.error().empty() ? "" : absl::StrCat("  error    ", ck.error(), "\n").c_str());
    if (ck.gpu_processes() > 0) {
      std::printf("  gpu      the device state of %d process%s (NVIDIA driver)%s\n", ck.gpu_processes(),
                  ck.gpu_processes() == 1 ? "" : "es",
                  ck.gpu_devices().empty() ? "" : absl::StrCat(", taken on GPU ", absl::StrJoin(ck.gpu_devices(), ", ")).c_str());
    }
    return 0;
  }
  if (o.ck_delete->parsed()) {
    dapi::DeleteCheckpointRequest req;
    req.set_id(o.id);
    dapi::DeleteCheckpointResponse resp;
    if (int rc = call(&dapi::Daemon::Stub::DeleteCheckpoint, req, &resp)) return rc;
    if (o.json) return PrintJson(resp);
    std::printf("checkpoint %s deleted\n", o.id.c_str());
    return 0;
  }
  return 2;
}

}  // namespace cairn::cli
