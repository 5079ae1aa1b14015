#include "controller_harness.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace cairn::testing {
namespace fs = std::filesystem;

int FreePort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof(a);
  int port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
    port = ntohs(a.sin_port);
  }
  ::close(fd);
  return port;
}

namespace {

std::unique_ptr<api::Controller::Stub> StubFor(const std::string& address) {
  return api::Controller::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
}

void Deadline(grpc::ClientContext* ctx, std::chrono::milliseconds d) {
  ctx->set_deadline(std::chrono::system_clock::now() + d);
}

}  // namespace

// ---- ControllerProcess ----

ControllerProcess::ControllerProcess(std::string dir, std::string name, std::string store,
                                     std::vector<std::string> extra)
    : dir_(std::move(dir)), name_(std::move(name)), store_(std::move(store)), extra_(std::move(extra)) {
  socket_ = dir_ + "/" + name_ + ".sock";
}

ControllerProcess::~ControllerProcess() { Kill(SIGKILL); }

::testing::AssertionResult ControllerProcess::Start(std::chrono::milliseconds timeout) {
  static int starts = 0;
  log_ = absl::StrCat(dir_, "/", name_, ".log.", ++starts);
  std::vector<std::string> argv = {CONTROLLER_BIN, "--store", store_, "--socket", socket_, "--id", name_, "-v"};
  argv.insert(argv.end(), extra_.begin(), extra_.end());
  WriteFile(dir_ + "/empty", "");
  pid_ = SpawnProgram(argv, dir_ + "/empty", log_ + ".out", log_);
  if (pid_ <= 0) return ::testing::AssertionFailure() << "fork failed";
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (!IsAlive(pid_)) {
      Ending e = WaitGone(pid_, 1s);
      pid_ = -1;
      return ::testing::AssertionFailure() << "cairn-controller " << name_ << " " << e.Describe() << "; log:\n" << Log();
    }
    if (Leader().has_value()) return ::testing::AssertionSuccess();
    std::this_thread::sleep_for(50ms);
  }
  return ::testing::AssertionFailure() << "cairn-controller " << name_ << " did not answer on " << socket_ << "; log:\n"
                                       << Log();
}

std::optional<api::LeaderResponse> ControllerProcess::Leader() const {
  if (!fs::exists(socket_)) return std::nullopt;
  auto stub = StubFor(address());
  grpc::ClientContext ctx;
  Deadline(&ctx, 1s);
  api::LeaderResponse resp;
  if (!stub->Leader(&ctx, api::LeaderRequest(), &resp).ok()) return std::nullopt;
  return resp;
}

::testing::AssertionResult ControllerProcess::WaitLeader(std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    auto l = Leader();
    if (l && l->leader()) return ::testing::AssertionSuccess();
    std::this_thread::sleep_for(50ms);
  }
  return ::testing::AssertionFailure() << name_ << " did not become leader; log:\n" << Log();
}

void ControllerProcess::Kill(int sig) {
  if (pid_ <= 0) return;
  if (sig == SIGKILL) {
    KillAndWait(pid_);
    pid_ = -1;
  } else {
    ::kill(pid_, sig);
  }
}

Ending ControllerProcess::Wait(std::chrono::milliseconds timeout) {
  Ending e = WaitGone(pid_, timeout);
  if (e.gone) pid_ = -1;
  return e;
}

// ---- NodeAgent ----

NodeAgent::NodeAgent(std::vector<std::string> addresses, api::NodeSpec spec)
    : addresses_(std::move(addresses)), spec_(std::move(spec)) {}

NodeAgent::~NodeAgent() { Stop(); }

grpc::Status NodeAgent::CallAny(const std::function<grpc::Status(api::Controller::Stub&)>& f) {
  grpc::Status last(grpc::StatusCode::UNAVAILABLE, "no address");
  for (const std::string& a : addresses_) {
    auto stub = StubFor(a);
    last = f(*stub);
    if (last.error_code() != grpc::StatusCode::UNAVAILABLE &&
        last.error_code() != grpc::StatusCode::DEADLINE_EXCEEDED) {
      return last;
    }
  }
  return last;
}

::testing::AssertionResult NodeAgent::Register(std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  grpc::Status s;
  do {
    s = CallAny([&](api::Controller::Stub& stub) {
      grpc::ClientContext ctx;
      Deadline(&ctx, 2s);
      api::RegisterNodeRequest req;
      *req.mutable_spec() = spec_;
      api::RegisterNodeResponse resp;
      return stub.RegisterNode(&ctx, req, &resp);
    });
    if (s.ok()) return ::testing::AssertionSuccess();
    if (s.error_code() != grpc::StatusCode::UNAVAILABLE) break;
    std::this_thread::sleep_for(100ms);
  } while (std::chrono::steady_clock::now() < deadline);
  return ::testing::AssertionFailure() << "register " << spec_.id() << ": " << s.error_message();
}

void NodeAgent::StartHeartbeats(std::chrono::milliseconds every) {
  thread_ = std::thread([this, every] {
    while (!stop_.load()) {
      grpc::Status s = CallAny([&](api::Controller::Stub& stub) {
        grpc::ClientContext ctx;
        Deadline(&ctx, 1s);
        api::HeartbeatRequest req;
        req.set_node_id(spec_.id());
        api::HeartbeatResponse resp;
        return stub.Heartbeat(&ctx, req, &resp);
      });
      if (s.ok()) {
        acked_.fetch_add(1);
        last_ack_.store(std::chrono::steady_clock::now().time_since_epoch().count());
      }
      std::this_thread::sleep_for(every);
    }
  });
}

void NodeAgent::Stop() {
  stop_.store(true);
  if (thread_.joinable()) thread_.join();
}

api::NodeSpec MakeNode(const std::string& id, double price, bool spot, int gpus, const std::string& gpu_type,
                       double cpus, int64_t memory_mb) {
  api::NodeSpec s;
  s.set_id(id);
  s.set_cpus(cpus);
  s.set_memory_mb(memory_mb);
  s.set_gpus(gpus);
  s.set_gpu_type(gpu_type);
  s.set_price_per_hour(price);
  s.set_spot(spot);
  s.set_zone("us-east-1a");
  s.set_cloud("aws");
  return s;
}

CommandResult RunCairn(const std::vector<std::string>& args, const std::string& scratch_dir,
                       std::vector<std::string> env) {
  std::vector<std::string> argv = {CAIRN_BIN};
  argv.insert(argv.end(), args.begin(), args.end());
  return RunCommand(argv, scratch_dir, WithEnv(std::move(env)));
}

nlohmann::json ParseJson(const CommandResult& r) {
  nlohmann::json j = nlohmann::json::parse(r.out, nullptr, false);
  EXPECT_FALSE(j.is_discarded()) << "not JSON: " << r.Describe();
  return j.is_discarded() ? nlohmann::json() : j;
}

// ---- EtcdCluster ----

std::string EtcdCluster::Binary() {
  for (const char* p : {"/usr/bin/etcd", "/usr/local/bin/etcd"}) {
    if (::access(p, X_OK) == 0) return p;
  }
  return "";
}

EtcdCluster::~EtcdCluster() {
  for (pid_t p : pids_) KillAndWait(p);
}

void EtcdCluster::KillMember(int i) {
  KillAndWait(pids_[i]);
  pids_[i] = -1;
}

std::string EtcdCluster::StoreSpec() const {
  std::vector<std::string> eps;
  for (int p : client_ports_) eps.push_back(absl::StrCat("127.0.0.1:", p));
  return "etcd://" + absl::StrJoin(eps, ",");
}

::testing::AssertionResult EtcdCluster::Start(int members, std::chrono::milliseconds timeout) {
  std::vector<int> peer_ports;
  for (int i = 0; i < members; ++i) {
    client_ports_.push_back(FreePort());
    peer_ports.push_back(FreePort());
  }
  std::vector<std::string> initial;
  for (int i = 0; i < members; ++i) initial.push_back(absl::StrCat("m", i, "=http://127.0.0.1:", peer_ports[i]));
  std::string token = absl::StrCat("cairn-test-", ::getpid());
  WriteFile(dir_ + "/empty", "");
  for (int i = 0; i < members; ++i) {
    std::string client = absl::StrCat("http://127.0.0.1:", client_ports_[i]);
    std::string peer = absl::StrCat("http://127.0.0.1:", peer_ports[i]);
    std::vector<std::string> argv = {Binary(), "--name", absl::StrCat("m", i),
                                     "--data-dir", absl::StrCat(dir_, "/etcd-m", i),
                                     "--listen-client-urls", client, "--advertise-client-urls", client,
                                     "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                                     "--initial-cluster", absl::StrJoin(initial, ","),
                                     "--initial-cluster-state", "new", "--initial-cluster-token", token,
                                     // Short elections keep the test fast on loopback.
                                     "--heartbeat-interval", "50", "--election-timeout", "500"};
    pid_t p = SpawnProgram(argv, dir_ + "/empty", absl::StrCat(dir_, "/etcd-m", i, ".out"),
                           absl::StrCat(dir_, "/etcd-m", i, ".log"));
    if (p <= 0) return ::testing::AssertionFailure() << "fork etcd failed";
    pids_.push_back(p);
  }
  // Healthy when every member serves a linearizable read: `etcdctl endpoint health` would do the
  // same; a range through the JSON gateway needs nothing but the server.
  auto deadline = std::chrono::steady_clock::now() + timeout;
  std::vector<bool> ok(members, false);
  while (std::chrono::steady_clock::now() < deadline) {
    int healthy = 0;
    for (int i = 0; i < members; ++i) {
      if (!ok[i]) {
        CommandResult r = RunCommand({"/usr/bin/curl", "-sf", "-m", "2", "-X", "POST", "-d", "{\"key\":\"AA==\"}",
                                      absl::StrCat("http://127.0.0.1:", client_ports_[i], "/v3/kv/range")},
                                     dir_, WithTimeout(5s));
        ok[i] = r.Exited(0);
      }
      healthy += ok[i] ? 1 : 0;
    }
    if (healthy == members) return ::testing::AssertionSuccess();
    for (int i = 0; i < members; ++i) {
      if (!IsAlive(pids_[i])) {
        return ::testing::AssertionFailure() << "etcd member m" << i << " exited; log:\n"
                                             << ReadFile(absl::StrCat(dir_, "/etcd-m", i, ".log"));
      }
    }
    std::this_thread::sleep_for(200ms);
  }
  return ::testing::AssertionFailure() << "etcd cluster not healthy in time; m0 log:\n"
                                       << ReadFile(dir_ + "/etcd-m0.log");
}

Partitionable::Partitionable(int to_port) : to_port_(to_port) {
  listener_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (listener_ < 0 || ::bind(listener_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      ::listen(listener_, 64) != 0 || ::getsockname(listener_, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    ADD_FAILURE() << "Partitionable: cannot listen on loopback: " << std::strerror(errno);
    return;
  }
  port_ = ntohs(a.sin_port);
  acceptor_ = std::thread([this] { Accept(); });
}

Partitionable::~Partitionable() {
  stop_.store(true);
  ::shutdown(listener_, SHUT_RDWR);
  {
    std::lock_guard<std::mutex> l(mu_);
    for (int fd : fds_) ::shutdown(fd, SHUT_RDWR);
  }
  if (acceptor_.joinable()) acceptor_.join();
  for (std::thread& t : pumps_) t.join();
  ::close(listener_);
  for (int fd : fds_) ::close(fd);
}

void Partitionable::Accept() {
  for (;;) {
    int in = ::accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC);
    if (in < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (stop_.load()) {
      ::close(in);
      return;
    }
    int out = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<uint16_t>(to_port_));
    if (out < 0 || ::connect(out, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
      ::close(in);
      if (out >= 0) ::close(out);
      continue;
    }
    std::lock_guard<std::mutex> l(mu_);
    fds_.push_back(in);
    fds_.push_back(out);
    pumps_.emplace_back([this, in, out] { Pump(in, out); });
    pumps_.emplace_back([this, in, out] { Pump(out, in); });
  }
}

// Copies `from` to `to` until either ends; once cut, reads and drops (the sender is not
// blocked on a full buffer, as a lossy network would not block it either).
void Partitionable::Pump(int from, int to) {
  char buf[16384];
  for (;;) {
    ssize_t n = ::read(from, buf, sizeof buf);
    if (n <= 0 || stop_.load()) return;
    if (cut_.load()) continue;
    for (ssize_t off = 0; off < n;) {
      ssize_t w = ::write(to, buf + off, static_cast<size_t>(n - off));
      if (w <= 0) return;
      off += w;
    }
  }
}

std::string PartitionableStoreSpec(const EtcdCluster& etcd, std::vector<std::unique_ptr<Partitionable>>* paths) {
  std::vector<std::string> eps;
  for (int p : etcd.client_ports()) {
    paths->push_back(std::make_unique<Partitionable>(p));
    eps.push_back(absl::StrCat("127.0.0.1:", paths->back()->port()));
  }
  return "etcd://" + absl::StrJoin(eps, ",");
}

}  // namespace cairn::testing
