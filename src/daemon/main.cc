// `cairnd`: the node daemon (docs/daemon.md). Runs managed jobs, checkpoints them by policy,
// keeps a catalog of their checkpoints and reports their health, over the gRPC API in
// proto/daemon.proto on a root-only unix socket and, optionally, TCP with a token.

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include <CLI/CLI.hpp>
#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/match.h"
#include "absl/strings/strip.h"
#include "cli/help_formats.h"
#include "common/unique_fd.h"
#include "common/grpc_server.h"
#include "common/log.h"
#include "common/server_socket.h"
#include "common/status.h"
#include "common/token.h"
#include "common/validate.h"
#include "daemon/controller_link.h"
#include "daemon/daemon.h"
#include "daemon/gpu_watch.h"
#include "daemon/spot_watch.h"
#include "daemon/metrics_http.h"
#include "daemon/migrate.h"
#include "daemon/service.h"
#include "engine/dump/devices.h"
#include "engine/job/job.h"
#include "engine/lazy/handler.h"

namespace cairn::daemon {
namespace {

std::atomic<int> g_signal{0};
void OnSignal(int sig) { g_signal = sig; }
std::atomic<bool> g_checkpoint_all{false};
void OnCheckpointSignal(int) { g_checkpoint_all = true; }

int Fail(const absl::Status& s) {
  std::fprintf(stderr, "cairnd: error: %s\n", std::string(s.message()).c_str());
  return 1;
}

}  // namespace
}  // namespace cairn::daemon

// The config file a command line names (--config FILE or --config=FILE), else the default.
static std::string ConfigPath(int argc, char** argv) {
  std::string path = "/etc/cairn/cairnd.toml";
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--config" && i + 1 < argc) path = argv[i + 1];
    if (a.rfind("--config=", 0) == 0) path = a.substr(9);
  }
  return path;
}

// OK when `path` does not exist, or is a regular file (not a symlink) owned by root and writable
// by root only, in a directory owned by root and writable by root only.
static absl::Status CheckConfigFile(const std::string& path) {
  cairn::UniqueFd fd(::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd.valid()) {
    if (errno == ENOENT) return absl::OkStatus();
    return cairn::ErrnoStatus(absl::StrCat("--config ", path, ": open (a symlink is refused: name the file itself)"));
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return cairn::ErrnoStatus("--config " + path + ": fstat");
  if (st.st_uid != 0 || (st.st_mode & 022) != 0 || !S_ISREG(st.st_mode)) {
    return absl::PermissionDeniedError(absl::StrFormat(
        "--config %s: a config file must be a regular file owned by root and writable by root only (it is owned "
        "by uid %d, mode %04o); fix its owner and mode (chown root:root; chmod 644, or 600 when it names secrets)",
        path, st.st_uid, st.st_mode & 07777));
  }
  std::string dir = path.find('/') == std::string::npos ? "." : path.substr(0, std::max<size_t>(1, path.rfind('/')));
  struct stat d {};
  if (::stat(dir.c_str(), &d) != 0) return cairn::ErrnoStatus("--config " + path + ": stat its directory");
  if (d.st_uid != 0 || (d.st_mode & 022) != 0) {
    return absl::PermissionDeniedError(absl::StrFormat(
        "--config %s: its directory %s is owned by uid %d with mode %04o: another user could replace the file; "
        "keep it in a directory of root's own (e.g. /etc/cairn)", path, dir, d.st_uid, d.st_mode & 07777));
  }
  return absl::OkStatus();
}

int main(int argc, char** argv) {
  using namespace cairn::daemon;
  // The engine's lazy restore (of jobs migrated here) starts its page handler as
  // `/proc/self/exe [-v|-vv] lazy-pages ...`: cairnd serves it itself, as `cairn` does.
  for (int i = 1; i < argc && i < 3; ++i) {
    if (std::string(argv[i]) != "lazy-pages") continue;
    CLI::App lazy{"cairnd lazy-pages: page handler of a lazy restore (started by cairnd itself)"};
    cairn::lazy::HandlerOptions h;
    int v = 0;
    lazy.add_flag("-v", v);
    auto* sub = lazy.add_subcommand("lazy-pages");
    // The same options as `cairn lazy-pages` (src/cli/main.cc), which engine/lazy/launch.cc passes.
    sub->add_option("--dir", h.dir);
    sub->add_option("--page-server", h.page_server);
    sub->add_option("--token-file", h.token_file);
    sub->add_option("--pid", h.pid)->required();
    sub->add_option("--image-pid", h.image_pid)->required();
    sub->add_option("--uffd", h.uffd)->required();
    sub->add_option("--ready-fd", h.ready_fd)->required();
    sub->add_option("--go-fd", h.go_fd)->required();
    sub->add_option("--fuse-read-fd", h.fuse_read);
    sub->add_option("--fuse-write-fd", h.fuse_write);
    CLI11_PARSE(lazy, argc, argv);
    cairn::InitLogging(v);
    absl::Status s = cairn::lazy::ServePages(h);
    return s.ok() ? 0 : Fail(s);
  }
  // A dump's guardian (the engine's, forked from cairnd) execs `/proc/self/exe gpu-put-back ...`
  // when the GPU driver's side of a dump is left to undo (engine/dump/guardian.h, point 11).
  if (argc > 1 && std::string(argv[1]) == "gpu-put-back") {
    CLI::App put_back{"cairnd gpu-put-back: puts a killed dump's GPU processes back (run by its guardian)"};
    std::string journal;
    int fd = -1;
    auto* sub = put_back.add_subcommand("gpu-put-back");
    sub->add_option("--journal", journal)->required();
    sub->add_option("--journal-fd", fd)->required();
    CLI11_PARSE(put_back, argc, argv);
    return cairn::dump::RunGpuPutBack(journal, fd);
  }
  CLI::App app{"cairnd: the cairn node daemon (managed jobs, checkpoints, health)", "cairnd"};
  app.set_version_flag("--version", std::string("cairnd ") + CAIRN_VERSION);
  DaemonOptions opts;
  opts.state_dir = "/var/lib/cairnd";
  cairn::GrpcServeOptions tls;
  std::string socket_path = "/run/cairn/cairnd.sock";
  std::string listen, token_file;
  int metrics_port = -1;
  double tick = 1.0;
  int verbose = 0;
  app.add_option("--node", opts.node, "This node's name (default: the host name)");
  app.add_option("--state-dir", opts.state_dir, "Catalog, job logs and checkpoints (0700)")->capture_default_str();
  app.add_option("--socket", socket_path, "Unix socket to serve on (0600, in a root-owned directory)")
      ->capture_default_str();
  app.add_option("--listen", listen, "Also serve on TCP HOST:PORT; every call must carry the token");
  app.add_option("--token-file", token_file,
                 "File holding the token of the TCP port and the metrics (mode 0600, >= 16 characters)");
  app.add_option("--tls-cert", tls.tls_cert, "Serve TCP in TLS with this PEM certificate chain (with --tls-key)");
  app.add_option("--tls-key", tls.tls_key, "The certificate's PEM private key (owned by root, mode 0600)");
  app.add_option("--metrics-port", metrics_port,
                 "Serve Prometheus metrics on http://127.0.0.1:PORT/metrics (0: any free port); scrapes carry "
                 "`Authorization: Bearer TOKEN` (needs --token-file)");
  app.add_option("--tick", tick, "Seconds between health samples and policy checks")
      ->capture_default_str()->check(CLI::Range(0.05, 60.0));
  app.add_option("--cairn-bin", opts.cairn_bin, "The cairn executable that starts jobs (default: next to cairnd)");
  app.add_option("--checkpoint-workers", opts.checkpoint_workers,
                 "Periodic checkpoints of different jobs taken at the same time, at most")
      ->capture_default_str()->check(CLI::Range(1, 64));
  cairn::daemon::storage::StoreOptions store_opts;
  app.add_option("--storage", store_opts.spec, "Where checkpoints live: local, dir:/PATH (shared) or s3://BUCKET[/PREFIX]")
      ->capture_default_str();
  app.add_option("--s3-endpoint", store_opts.s3_endpoint, "S3 endpoint URL (default https://s3.REGION.amazonaws.com)");
  app.add_option("--s3-region", store_opts.s3_region, "S3 region (signing)")->capture_default_str();
  app.add_option("--s3-credentials", store_opts.s3_credentials_file,
                 "File with aws_access_key_id/aws_secret_access_key (root's, 0600); default: AWS_* environment");
  app.add_option("--upload-parallel", store_opts.parallel, "Files and parts sent to the store at the same time")
      ->capture_default_str()->check(CLI::Range(1, 64));
  app.add_option("--gc-every", opts.gc_interval_s,
                 "Seconds between garbage collections (what `cairn gc` removes: checkpoints of jobs that migrated away "
                 "or were cancelled, cgroups of ended jobs); 0: only by hand")
      ->capture_default_str()->check(CLI::Range(0.0, 1e7));
  app.add_flag("--keep-local-copy", opts.keep_local, "With a remote --storage, also keep each checkpoint locally (fast restore)");
  std::vector<std::string> peers;
  std::string peer_token_file;
  bool eager_migrations = false;
  app.add_option("--peer", peers, "Another daemon jobs may be migrated to: NAME=HOST:PORT (repeatable)");
  app.add_option("--peer-token-file", peer_token_file, "File holding the token the peers' TCP ports take");
  std::string image_key;
  app.add_option("--image-key", image_key,
                 "Image key that seals the checkpoints this node writes and checks those it restores: the same file on "
                 "every node of a cluster (default: STATE/image.key, made on first start)");
  app.add_option("--spool-dir", opts.spool_dir,
                 "Where images of outgoing migrations are staged (default /dev/shm/cairnd-NODE when /dev/shm is a tmpfs, "
                 "else STATE/spool)");
  app.add_flag("--eager-migrations", eager_migrations,
               "Restore arriving jobs with all their memory in before they run (default: lazily, faster to run)");
  app.add_flag("-v,--verbose", verbose, "More log output (repeat for debug)");
  // Node signals (docs/daemon.md): spot notices only when the cloud is named; GPU events where NVML loads.
  SpotWatchOptions spot_opts;
  std::string spot_aws, spot_gcp, spot_azure, gpu_watch = "auto", nvml_lib = "libnvidia-ml.so.1";
  app.add_option("--spot-notices", spot_opts.cloud, "Poll this cloud's metadata service for spot interruption notices")
      ->check(CLI::IsMember({"aws", "gcp", "azure"}));
  app.add_option("--spot-url-aws", spot_aws, "AWS instance metadata base URL (default http://169.254.169.254)");
  app.add_option("--spot-url-gcp", spot_gcp, "GCP metadata base URL (default http://metadata.google.internal)");
  app.add_option("--spot-url-azure", spot_azure, "Azure instance metadata base URL (default http://169.254.169.254)");
  app.add_option("--spot-poll", spot_opts.poll_s, "Seconds between spot notice polls")
      ->capture_default_str()->check(CLI::Range(0.05, 300.0));
  app.add_option("--gpu-watch", gpu_watch, "GPU Xid/ECC events through NVML: auto (where NVML loads) or off")
      ->capture_default_str()->check(CLI::IsMember({"auto", "off"}));
  app.add_option("--nvml-library", nvml_lib, "The NVML library to load")->capture_default_str();
  ControllerLinkOptions link_opts;
  AddControllerLinkOptions(app, &link_opts);
  // Every option above can also be set in a config file: TOML `name = value` lines, the long
  // option's name without its dashes (`state-dir = "/var/lib/cairnd"`, `peer = ["b=10.0.0.2:7070"]`),
  // read by CLI11; an option on the command line overrides the file. Unknown names are errors.
  app.set_config("--config", "/etc/cairn/cairnd.toml",
                 "Config file (TOML: option = value, names as the long options'); command-line options override it",
                 false);
  app.allow_config_extras(CLI::config_extras_mode::error);
  bool manpage = false;
  app.add_flag("--manpage", manpage, "Print this manual page (roff) and exit");
  // The file sets what a root daemon runs and trusts: only root may have written it, or be able
  // to replace it. Checked before it is read (not a symlink; it and its directory root's and
  // writable by root only).
  if (absl::Status unsafe = CheckConfigFile(ConfigPath(argc, argv)); !unsafe.ok()) return Fail(unsafe);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ConfigError& e) {
    std::fprintf(stderr, "cairnd: error: --config %s: %s (an option name it does not know, or a value it cannot "
                 "read: names are the long options' without dashes, see cairnd --help)\n",
                 app.get_config_ptr()->as<std::string>().c_str(), e.what());
    return 2;
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (manpage) {
    std::fputs(cairn::cli::ManPage(app, "8").c_str(), stdout);
    return 0;
  }
  cairn::InitLogging(verbose + 1);
  if (::geteuid() != 0) {
    return Fail(absl::PermissionDeniedError("cairnd runs as root (it ptraces, creates namespaces and cgroups)"));
  }
  if (!listen.empty() && token_file.empty()) {
    return Fail(absl::InvalidArgumentError("--listen needs --token-file: TCP calls must carry a token"));
  }
  if (metrics_port >= 0 && token_file.empty()) {
    return Fail(absl::InvalidArgumentError(
        "--metrics-port needs --token-file: every scrape must carry `Authorization: Bearer TOKEN` "
        "(any local user can reach a loopback port)"));
  }
  std::string token;
  if (!token_file.empty()) {
    auto t = cairn::ReadTokenFile(token_file);
    if (!t.ok()) return Fail(t.status());
    token = *t;
  }
  if (opts.node.empty()) {
    char host[256] = {};
    ::gethostname(host, sizeof(host) - 1);
    opts.node = host;
  }
  for (const std::string& p : peers) {
    if (absl::Status s = AddPeer(p, &opts.peers); !s.ok()) return Fail(s);
  }
  if (!peer_token_file.empty()) {
    auto t = cairn::ReadTokenFile(peer_token_file);
    if (!t.ok()) return Fail(t.status());
    opts.peer_token = *t;
  }
  opts.lazy_migrations = !eager_migrations;
  if (opts.spool_dir.empty()) {
    struct statfs fs {};
    opts.spool_dir = ::statfs("/dev/shm", &fs) == 0 && fs.f_type == TMPFS_MAGIC ? "/dev/shm/cairnd-" + opts.node
                                                                               : opts.state_dir + "/spool";
  }
  if (absl::Status s = cairn::job::CheckName(opts.node); !s.ok()) {
    return Fail(absl::InvalidArgumentError(absl::StrCat("--node ", opts.node, ": use ", cairn::kJobNameRule)));
  }
  if (opts.cairn_bin.empty()) {
    char self[4096] = {};
    ssize_t n = ::readlink("/proc/self/exe", self, sizeof(self) - 1);
    std::string dir = n > 0 ? std::string(self, static_cast<size_t>(n)) : std::string("/usr/bin/cairnd");
    opts.cairn_bin = dir.substr(0, dir.find_last_of('/')) + "/cairn";
  }
  if (::access(opts.cairn_bin.c_str(), X_OK) != 0) {
    return Fail(absl::NotFoundError(absl::StrCat("--cairn-bin ", opts.cairn_bin, ": not an executable; give the path of `cairn`")));
  }
  // Jobs are started by `cairn run`, which exits: their inits are then re-parented to us.
  if (::prctl(PR_SET_CHILD_SUBREAPER, 1) != 0) return Fail(cairn::ErrnoStatus("prctl(PR_SET_CHILD_SUBREAPER)"));
  if (const char* p = std::getenv("CAIRND_TEST_PAUSE_IN_CHECKPOINT")) opts.pause_in_checkpoint_s = std::atof(p);
  if (const char* p = std::getenv("CAIRND_TEST_FAIL_MIGRATION_RESTORE")) opts.fail_migration_restore = *p == '1';
  if (const char* p = std::getenv("CAIRND_TEST_PAUSE_BEFORE_MIGRATION_RESTORE")) {
    opts.pause_before_migration_restore_s = std::atof(p);
  }
  // engine/job keeps its registry (NAME.job) under $CAIRN_STATE_DIR/jobs: the daemon's own.
  ::setenv("CAIRN_STATE_DIR", opts.state_dir.c_str(), 1);
  {
    auto key = cairn::image::ImageKey::LoadOrCreate(image_key.empty() ? opts.state_dir + "/image.key" : image_key);
    if (!key.ok()) return Fail(cairn::Annotate(key.status(), "--image-key"));
    opts.image_key = std::make_shared<cairn::image::ImageKey>(std::move(*key));
  }

  // Stop requests set a flag; nothing is blocked, so jobs started from any thread inherit a
  // clean signal mask.
  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGTERM, &sa, nullptr);
  ::sigaction(SIGINT, &sa, nullptr);
  // SIGUSR1 asks for a checkpoint of every job whose policy says on_signal.
  sa.sa_handler = OnCheckpointSignal;
  ::sigaction(SIGUSR1, &sa, nullptr);

  auto store = cairn::daemon::storage::OpenStore(store_opts);
  if (!store.ok()) return Fail(store.status());
  opts.store = std::move(*store);
  if (absl::Status s = cairn::PrepareServerSocket(socket_path, "cairnd"); !s.ok()) return Fail(s);
  auto daemon = Daemon::Open(opts);
  if (!daemon.ok()) return Fail(daemon.status());

  GrpcService service(daemon->get(), token);
  tls.socket_path = socket_path;
  tls.listen = listen;
  tls.server = "cairnd";
  auto started = cairn::StartGrpcServer(tls, &service);
  if (!started.ok()) return Fail(started.status());
  std::unique_ptr<grpc::Server> server = std::move(started->server);
  const int tcp_port = started->tcp_port;
  std::unique_ptr<MetricsServer> metrics;
  if (metrics_port >= 0) {
    auto m = MetricsServer::Start(metrics_port, token, [d = daemon->get()] { return d->Metrics(); });
    if (!m.ok()) {
      server->Shutdown();
      return Fail(m.status());
    }
    metrics = std::move(*m);
  }
  (*daemon)->SetComponentStatus("tcp", listen.empty() ? "off (--listen HOST:PORT turns it on)"
                                                       : absl::StrCat(listen, " (port ", tcp_port, "; calls carry the token",
                                                                      tls.tls_cert.empty() ? "" : ", in TLS", ")"));
  (*daemon)->SetComponentStatus(
      "metrics", metrics ? absl::StrCat("http://127.0.0.1:", metrics->port(), "/metrics (scrapes carry the token)")
                         : "off (--metrics-port turns it on)");
  // GPU events first: the controller is told how many GPUs the node has.
  std::unique_ptr<ControllerLink> link;
  std::unique_ptr<GpuWatcher> gpus;
  std::unique_ptr<SpotWatcher> spot;
  Daemon* d = daemon->get();
  if (gpu_watch == "off") {
    d->SetComponentStatus("gpu-watcher", "off (--gpu-watch off)");
  } else if (auto src = OpenNvml(nvml_lib); !src.ok()) {
    d->SetComponentStatus("gpu-watcher", absl::StrCat("off (no NVML: ", src.status().message(), ")"));
  } else {
    d->SetGpus((*src)->Devices());
    d->SetComponentStatus("gpu-watcher", absl::StrCat("on: ", (*src)->Devices().size(), " GPU(s), Xid and ECC events"));
    gpus = std::make_unique<GpuWatcher>(std::move(*src), [d, &link](const GpuSignal& g) {
      if (link) link->ReportGpu(g);
      d->OnGpuSignal(g);
    });
  }
  if (!link_opts.address.empty()) {
    std::string advertise = link_opts.advertise;
    if (advertise.empty()) advertise = listen.empty() ? "unix:" + socket_path : listen;
    auto l = ControllerLink::Start(d, opts.node, link_opts, advertise,
                                   absl::StartsWith(advertise, "unix:") ? "" : token,
                                   gpus ? gpus->devices() : std::vector<GpuDevice>{});
    if (!l.ok()) {
      server->Shutdown();
      return Fail(l.status());
    }
    link = std::move(*l);
  } else {
    d->SetComponentStatus("controller", "off (no --controller)");
  }
  // Jobs are held in their freezer cgroup for a migration's commit and while their connections
  // are saved; without the hierarchy both fail later, so say it now.
  struct stat freezer {};
  if (::stat("/sys/fs/cgroup/freezer", &freezer) == 0 && S_ISDIR(freezer.st_mode) &&
      ::access("/sys/fs/cgroup/freezer/cgroup.procs", F_OK) == 0) {
    d->SetComponentStatus("freezer", "on (/sys/fs/cgroup/freezer)");
  } else {
    d->SetComponentStatus(
        "freezer",
        "warning: the cgroup v1 freezer is not mounted at /sys/fs/cgroup/freezer here: jobs cannot be held "
        "for a live migration's commit nor while their TCP connections are saved (started under `ip netns "
        "exec`, which mounts a /sys of its own? use nsenter --net=/run/netns/NAME)");
  }
  if (spot_opts.cloud.empty()) {
    d->SetComponentStatus("spot-watcher", "off (--spot-notices aws|gcp|azure turns it on)");
  } else {
    spot_opts.base_url = spot_opts.cloud == "aws" ? spot_aws : spot_opts.cloud == "gcp" ? spot_gcp : spot_azure;
    auto w = SpotWatcher::Start(
        spot_opts,
        [d, &link](const SpotNoticeInfo& n) {
          // The node's own checkpoints first: whatever the controller then decides (move the
          // jobs, stop them) finds their state saved.
          d->OnSpotNotice(n);
          if (link) link->ReportSpotNotice(n);
        },
        [d](bool ok, const std::string& line) {
          d->SetComponentStatus("spot-watcher", ok ? line : "warning: " + line);
        });
    if (!w.ok()) {
      link.reset();
      gpus.reset();
      server->Shutdown();
      return Fail(w.status());
    }
    spot = std::move(*w);
  }
  spdlog::info("serving node={} socket=unix:{} tcp={} metrics={} state_dir={} storage={} pid={}", opts.node, socket_path,
               listen.empty() ? "off" : absl::StrCat(listen, " (port ", tcp_port, ")"),
               metrics ? absl::StrCat("http://127.0.0.1:", metrics->port(), "/metrics") : "off", opts.state_dir,
               opts.store->Describe(), ::getpid());

  auto step = std::chrono::duration<double>(std::min(tick, 0.1));
  auto next = std::chrono::steady_clock::now();
  while (g_signal == 0) {
    if (g_checkpoint_all.exchange(false)) {
      spdlog::info("SIGUSR1 node={}: checkpointing every job whose policy says on_signal", opts.node);
      (*daemon)->CheckpointOnSignal();
    }
    if (std::chrono::steady_clock::now() >= next) {
      (*daemon)->Tick();
      next = std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                                    std::chrono::duration<double>(tick));
    }
    std::this_thread::sleep_for(step);
  }
  spdlog::info("shutting down node={} signal={}: checkpointing jobs whose policy asks for it; jobs keep running",
               opts.node, g_signal.load());
  spot.reset();
  gpus.reset();
  link.reset();
  service.Stop();
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  (*daemon)->CheckpointForShutdown();
  metrics.reset();
  ::unlink(socket_path.c_str());
  spdlog::info("stopped node={}", opts.node);
  return 0;
}
