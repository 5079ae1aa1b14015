// controller_bench: latency of the controller's calls through its real gRPC API, against a
// running cairn-controller (bench/controller_bench.sh starts one on SQLite and one on etcd).
//
//   controller_bench --controller unix:PATH [--nodes N] [--jobs M]
//
// Registers N nodes (a mix of spot and on-demand GPU nodes), then submits M one-GPU jobs one at a
// time and reports each call's latency (p50, p99, max) and the rate; then heartbeats and
// ClusterStatus. Every submit places the job and writes the job and its events to the store
// before it returns.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <grpcpp/grpcpp.h>

#include "controller.grpc.pb.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Stats {
  std::vector<double> ms;
  void Add(Clock::time_point t0) { ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count()); }
  void Print(const char* what) {
    if (ms.empty()) return;
    std::vector<double> s = ms;
    std::sort(s.begin(), s.end());
    double total = 0;
    for (double v : s) total += v;
    auto pct = [&](double p) { return s[std::min(s.size() - 1, static_cast<size_t>(p * s.size()))]; };
    std::printf("%-16s n=%-6zu p50 %8.3f ms  p99 %8.3f ms  max %8.3f ms  rate %8.1f/s\n", what, s.size(), pct(0.5),
                pct(0.99), s.back(), 1000.0 * s.size() / total);
  }
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"controller_bench: latency of cairn-controller's calls"};
  std::string address;
  int nodes = 100, jobs = 500;
  app.add_option("--controller", address, "unix:PATH or HOST:PORT of the leading controller")->required();
  app.add_option("--nodes", nodes, "Nodes to register")->capture_default_str();
  app.add_option("--jobs", jobs, "Jobs to submit")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  auto stub = cairn::api::Controller::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  auto fail = [](const char* what, const grpc::Status& s) {
    std::fprintf(stderr, "controller_bench: %s: %s\n", what, s.error_message().c_str());
    return 1;
  };
  Stats reg, sub, hb, status;
  for (int i = 0; i < nodes; ++i) {
    cairn::api::RegisterNodeRequest req;
    cairn::api::NodeSpec* n = req.mutable_spec();
    bool spot = i % 2 == 0;
    n->set_id("bench-node-" + std::to_string(i));
    n->set_cpus(64);
    n->set_memory_mb(488 * 1024);
    n->set_gpus(8);
    n->set_gpu_type(i % 3 == 0 ? "A100" : "V100");
    n->set_price_per_hour((spot ? 7.3 : 24.48) * (1 + 0.01 * (i % 7)));
    n->set_spot(spot);
    n->set_zone("zone-" + std::to_string(i % 4));
    n->set_interruptions_per_hour(spot ? 0.05 * (1 + i % 5) : 0);
    grpc::ClientContext ctx;
    cairn::api::RegisterNodeResponse resp;
    auto t0 = Clock::now();
    grpc::Status s = stub->RegisterNode(&ctx, req, &resp);
    if (!s.ok()) return fail("register", s);
    reg.Add(t0);
  }
  for (int i = 0; i < jobs; ++i) {
    cairn::api::SubmitJobRequest req;
    cairn::api::JobSpec* j = req.mutable_spec();
    j->set_id("bench-job-" + std::to_string(i));
    j->set_gpus(1);
    j->set_cpus(8);
    j->set_memory_mb(61 * 1024);
    j->set_work_s(3600 * (1 + i % 10));
    j->mutable_checkpoint()->set_interval_s(1800);
    j->mutable_checkpoint()->set_restore_s(60);
    j->mutable_checkpoint()->set_on_notice(true);
    j->mutable_checkpoint()->set_notice_checkpoint_s(30);
    grpc::ClientContext ctx;
    cairn::api::SubmitJobResponse resp;
    auto t0 = Clock::now();
    grpc::Status s = stub->SubmitJob(&ctx, req, &resp);
    if (!s.ok()) return fail("submit", s);
    sub.Add(t0);
  }
  for (int i = 0; i < 1000; ++i) {
    cairn::api::HeartbeatRequest req;
    req.set_node_id("bench-node-" + std::to_string(i % nodes));
    grpc::ClientContext ctx;
    cairn::api::HeartbeatResponse resp;
    auto t0 = Clock::now();
    grpc::Status s = stub->Heartbeat(&ctx, req, &resp);
    if (!s.ok()) return fail("heartbeat", s);
    hb.Add(t0);
  }
  for (int i = 0; i < 20; ++i) {
    grpc::ClientContext ctx;
    cairn::api::ClusterStatusResponse resp;
    auto t0 = Clock::now();
    grpc::Status s = stub->ClusterStatus(&ctx, cairn::api::ClusterStatusRequest(), &resp);
    if (!s.ok()) return fail("status", s);
    status.Add(t0);
  }
  std::printf("%d nodes, %d jobs\n", nodes, jobs);
  reg.Print("RegisterNode");
  sub.Print("SubmitJob");
  hb.Print("Heartbeat");
  status.Print("ClusterStatus");
  return 0;
}
