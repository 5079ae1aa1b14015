// `cairn-controller`: the cluster's scheduler as a service (docs/controller.md).

#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <random>
#include <sstream>
#include <string>

#include <CLI/CLI.hpp>
#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "cli/help_formats.h"
#include "common/grpc_server.h"
#include "common/log.h"
#include "common/server_socket.h"
#include "common/status.h"
#include "common/token.h"
#include "common/unique_fd.h"
#include "controller/service/cairnd_dispatcher.h"
#include "controller/service/controller.h"
#include "controller/service/dispatch.h"
#include "controller/service/grpc_service.h"
#include "controller/store/store.h"

namespace cairn::controller {
namespace {

int Fail(const absl::Status& s) {
  std::fprintf(stderr, "cairn-controller: error: %s\n", std::string(s.message()).c_str());
  return 1;
}

std::string RandomSuffix() {
  std::random_device rd;
  return absl::StrFormat("%08x", rd());
}

}  // namespace
}  // namespace cairn::controller

int main(int argc, char** argv) {
  using namespace cairn::controller;
  CLI::App app{"cairn-controller: places jobs by price, performance, SLA and capacity, and decides when to move them",
               "cairn-controller"};
  app.set_version_flag("--version", std::string("cairn-controller ") + CAIRN_VERSION);
  std::string store_spec = "sqlite:/var/lib/cairn/controller.db";
  std::string socket_path = "/run/cairn/controller.sock";
  std::string listen, token_file, name;
  cairn::GrpcServeOptions tls;
  double lease_ttl = 5, hb_interval = 1, hb_timeout = 5, deadline_check = 30;
  uint64_t keep_events = 100000;
  int verbose = 0;
  app.add_option("--store", store_spec,
                 "sqlite:PATH (default, one controller) or etcd://host:port[,host:port...] (several, one leads)")
      ->capture_default_str();
  app.add_option("--socket", socket_path, "Unix socket to serve on (0600, root only)")->capture_default_str();
  app.add_option("--listen", listen, "Also serve on TCP HOST:PORT; every call must carry the token");
  app.add_option("--token-file", token_file, "File holding the TCP token (mode 0600, >= 16 characters)");
  app.add_option("--tls-cert", tls.tls_cert, "Serve TCP in TLS with this PEM certificate chain (with --tls-key)");
  app.add_option("--tls-key", tls.tls_key, "The certificate's PEM private key (owned by root, mode 0600)");
  app.add_option("--id", name, "This controller's name (default: the host name); a random suffix is added");
  app.add_option("--lease-ttl", lease_ttl, "etcd leadership lease in seconds: how long followers wait for a dead leader")
      ->capture_default_str()->check(CLI::Range(1.0, 300.0));
  app.add_option("--heartbeat-interval", hb_interval, "Seconds between node heartbeats (told to nodes)")
      ->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--heartbeat-timeout", hb_timeout, "Seconds of silence after which a node is lost")
      ->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--deadline-check", deadline_check,
                 "Seconds between the deadline guard's looks at waiting batch jobs (0 = never)")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  app.add_option("--keep-events", keep_events, "Events kept in the store; older ones are deleted (0 = all)")
      ->capture_default_str();
  std::string dispatch = "record";
  app.add_option("--dispatch", dispatch,
                 "Who carries decisions out: record (nobody; they are recorded as events) or cairnd (the node "
                 "daemons, at the address each gave when it registered)")
      ->capture_default_str()->check(CLI::IsMember({"record", "cairnd"}));
  std::string daemon_tls_ca;
  app.add_option("--daemon-tls-ca", daemon_tls_ca,
                 "With --dispatch cairnd: PEM CA certificates to verify daemons serving TCP in TLS");
  app.add_flag("-v,--verbose", verbose, "More log output (repeat for debug)");
  bool manpage = false;
  app.add_flag("--manpage", manpage, "Print this manual page (roff) and exit");
  CLI11_PARSE(app, argc, argv);
  if (manpage) {
    std::fputs(cairn::cli::ManPage(app, "8").c_str(), stdout);
    return 0;
  }
  cairn::InitLogging(verbose);

  if (!listen.empty() && token_file.empty()) {
    return Fail(absl::InvalidArgumentError("--listen needs --token-file: TCP calls must carry a token"));
  }
  std::string token;
  if (!token_file.empty()) {
    auto t = cairn::ReadTokenFile(token_file);
    if (!t.ok()) return Fail(t.status());
    token = *t;
  }
  if (name.empty()) {
    char host[256] = {};
    ::gethostname(host, sizeof(host) - 1);
    name = host;
  }
  ControllerOptions opts;
  opts.id = absl::StrCat(name, "-", RandomSuffix());
  opts.heartbeat_interval_s = hb_interval;
  opts.heartbeat_timeout_s = hb_timeout;
  opts.deadline_check_s = deadline_check;
  opts.keep_events = keep_events;

  // Signals are taken synchronously by the main loop; block them before any thread starts.
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGTERM);
  sigaddset(&sigs, SIGINT);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);

  auto store = OpenStore(store_spec, lease_ttl);
  if (!store.ok()) return Fail(store.status());
  if (absl::Status s = cairn::PrepareServerSocket(socket_path, "cairn-controller"); !s.ok()) return Fail(s);

  RecordOnlyDispatcher record_only;
  CairndDispatcher cairnd(120, daemon_tls_ca);
  ActionDispatcher* dispatcher = dispatch == "cairnd" ? static_cast<ActionDispatcher*>(&cairnd) : &record_only;
  Controller controller(store->get(), dispatcher, opts);
  GrpcService service(&controller, token);
  tls.socket_path = socket_path;
  tls.listen = listen;
  tls.server = "cairn-controller";
  auto started = cairn::StartGrpcServer(tls, &service);
  if (!started.ok()) return Fail(started.status());
  std::unique_ptr<grpc::Server> server = std::move(started->server);
  std::fprintf(stderr, "cairn-controller %s: serving on unix:%s%s, store %s\n", opts.id.c_str(),
               socket_path.c_str(), listen.empty() ? "" : absl::StrCat(" and tcp ", listen).c_str(),
               (*store)->Describe().c_str());

  double tick = std::clamp(std::min(lease_ttl / 3, hb_timeout / 4), 0.05, 1.0);
  timespec ts{static_cast<time_t>(tick), static_cast<long>((tick - static_cast<time_t>(tick)) * 1e9)};
  for (;;) {
    controller.Tick();
    int sig = sigtimedwait(&sigs, nullptr, &ts);
    if (sig == SIGTERM || sig == SIGINT) break;
  }
  std::fprintf(stderr, "cairn-controller %s: shutting down\n", opts.id.c_str());
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  controller.Shutdown();
  ::unlink(socket_path.c_str());
  return 0;
}
