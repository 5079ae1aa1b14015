// cairn-controller with its default SQLite store: real controller processes, a node daemon
// played through the real gRPC API, and the real `cairn` CLI.

#include <sys/stat.h>

#include <algorithm>
#include <regex>
#include <fstream>
#include <functional>
#include <limits>

#include <grpcpp/grpcpp.h>

#include "absl/strings/match.h"
#include "controller_harness.h"

namespace cairn::testing {
namespace {

using nlohmann::json;

class ControllerSqliteTest : public ::testing::Test {
 protected:
  std::string Store() const { return "sqlite:" + dir_ / "controller.db"; }
  std::vector<std::string> Env(const ControllerProcess& c) const { return {"CAIRN_CONTROLLER=" + c.address()}; }
  CommandResult Cairn(const ControllerProcess& c, std::vector<std::string> args) {
    return RunCairn(args, dir_.path(), Env(c));
  }
  // Polls `cairn events --json` until an event satisfies `pred`.
  json WaitEvent(const ControllerProcess& c, const std::function<bool(const json&)>& pred,
                 std::chrono::milliseconds timeout) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      CommandResult r = Cairn(c, {"events", "--json"});
      if (r.Exited(0)) {
        json j = ParseJson(r);
        for (const json& e : j.value("events", json::array())) {
          if (pred(e)) return e;
        }
      }
      std::this_thread::sleep_for(100ms);
    }
    return json();
  }

  TempDir dir_;
};

// Three nodes a GPU job fits on, one it does not; the controller must pick the cheapest that
// fits, and `cairn job explain` must list every node with its score or its reason.
TEST_F(ControllerSqliteTest, SubmitPlacesOnCheapestFittingNodeAndExplains) {
  ControllerProcess c(dir_.path(), "c1", Store());
  ASSERT_TRUE(c.Start());
  std::vector<api::NodeSpec> nodes = {
      MakeNode("od-v100", 3.06, false, 1, "V100"),
      MakeNode("spot-v100", 0.92, true, 1, "V100"),
      MakeNode("cpu-only", 0.34, false, 0, "", 16, 64 * 1024),
      MakeNode("spot-small", 0.50, true, 1, "V100", 4, 16 * 1024),
  };
  std::vector<std::unique_ptr<NodeAgent>> agents;
  for (const auto& n : nodes) {
    agents.push_back(std::make_unique<NodeAgent>(std::vector<std::string>{c.address()}, n));
    ASSERT_TRUE(agents.back()->Register());
    agents.back()->StartHeartbeats(200ms);
  }
  // The job: 1 GPU, 8 CPUs, 60 GB. The cheapest node that fits, computed here from the specs.
  const double cpus = 8;
  const int64_t mem = 60000;
  std::string cheapest;
  double best = 1e18;
  for (const auto& n : nodes) {
    bool fits = n.gpus() >= 1 && n.cpus() >= cpus && n.memory_mb() >= mem;
    if (fits && n.price_per_hour() < best) best = n.price_per_hour(), cheapest = n.id();
  }
  ASSERT_FALSE(cheapest.empty());

  // --memory and --checkpoint-every as `cairn job run` spells them (--memory-mb and
  // --checkpoint-interval, the older spellings, are taken too: below).
  CommandResult r = Cairn(c, {"submit", "--id", "train-1", "--gpus", "1", "--cpus", "8", "--memory", "60000M",
                              "--checkpoint-every", "1800", "--restore-time", "60", "--json"});
  ASSERT_TRUE(r.Exited(0)) << r.Describe();
  json sub = ParseJson(r);
  json listed = ParseJson(Cairn(c, {"cluster", "status", "--json"}));
  for (const json& j : listed["jobs"]) {
    if (j["spec"]["id"] != "train-1") continue;
    EXPECT_EQ(j["spec"]["memory_mb"], 60000) << "a number, not proto3's string: " << j.dump();
    EXPECT_EQ(j["spec"]["checkpoint"]["interval_s"].get<double>(), 1800) << j.dump();
  }
  EXPECT_EQ(sub["job_id"], "train-1");
  EXPECT_EQ(sub["node_id"], cheapest) << r.out;
  EXPECT_TRUE(absl::StrContains(sub["reason"].get<std::string>(), "lowest total")) << r.out;

  // explain --json: every node, the chosen first, the misfits with their reasons.
  r = Cairn(c, {"job", "explain", "train-1", "--json"});
  ASSERT_TRUE(r.Exited(0)) << r.Describe();
  json ex = ParseJson(r);
  EXPECT_EQ(ex["best_node_id"], cheapest);
  ASSERT_EQ(ex["candidates"].size(), nodes.size()) << r.out;
  EXPECT_EQ(ex["candidates"][0]["node_id"], cheapest);
  EXPECT_TRUE(ex["candidates"][0]["feasible"].get<bool>());
  int feasible = 0;
  for (const json& cand : ex["candidates"]) {
    if (cand["feasible"].get<bool>()) {
      ++feasible;
      EXPECT_GE(cand["total"].get<double>(), ex["candidates"][0]["total"].get<double>());
    } else {
      EXPECT_FALSE(cand["rejected_because"].get<std::string>().empty()) << cand.dump();
    }
  }
  EXPECT_EQ(feasible, 2) << r.out;  // od-v100 and spot-v100.

  // The human-readable table says where and why.
  r = Cairn(c, {"job", "explain", "train-1"});
  ASSERT_TRUE(r.Exited(0)) << r.Describe();
  EXPECT_TRUE(absl::StrContains(r.out, "placed on " + cheapest)) << r.out;
  for (const auto& n : nodes) EXPECT_TRUE(absl::StrContains(r.out, n.id())) << r.out;

  // cluster status shows the job bound to the node, and the node's free resources shrunk.
  r = Cairn(c, {"cluster", "status", "--json"});
  ASSERT_TRUE(r.Exited(0)) << r.Describe();
  json st = ParseJson(r);
  ASSERT_EQ(st["jobs"].size(), 1u);
  EXPECT_EQ(st["jobs"][0]["node_id"], cheapest);
  for (const json& n : st["nodes"]) {
    if (n["spec"]["id"] == cheapest) {
      EXPECT_EQ(n["free_gpus"].get<int>(), 0) << n.dump();
    }
  }
  r = Cairn(c, {"cluster", "status"});
  ASSERT_TRUE(r.Exited(0)) << r.Describe();
  EXPECT_TRUE(absl::StrContains(r.out, "train-1")) << r.out;

  // A second identical job cannot have the same node: it takes the next cheapest that fits.
  r = Cairn(c, {"submit", "--id", "train-2", "--gpus", "1", "--cpus", "8", "--memory-mb", "60000", "--json"});
  ASSERT_TRUE(r.Exited(0)) << r.Describe();
  EXPECT_EQ(ParseJson(r)["node_id"], "od-v100") << r.out;
  // A third waits, saying why.
  r = Cairn(c, {"submit", "--id", "train-3", "--gpus", "1", "--cpus", "8", "--memory-mb", "60000"});
  ASSERT_TRUE(r.Exited(0)) << r.Describe();
  EXPECT_TRUE(absl::StrContains(r.out, "pending")) << r.out;
  r = Cairn(c, {"cluster", "status"});
  EXPECT_TRUE(absl::StrContains(r.out, "waits: no node fits: ")) << r.out;
  std::printf("%s", r.out.c_str());  // (docs/controller.md shows this output)

  // Scale-down through the CLI: the rule picks a job and the decision is recorded, not carried out.
  r = Cairn(c, {"cluster", "scale-down", "--gpus", "1"});
  ASSERT_TRUE(r.Exited(0)) << r.Describe();
  EXPECT_TRUE(absl::StrContains(r.out, "decision scale-down -> suspend")) << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, "not carried out")) << r.out;

  // Every placement is an event with its reason.
  json placed = WaitEvent(c, [](const json& e) { return e["kind"] == "job-placed" && e["job_id"] == "train-1"; }, 2s);
  ASSERT_FALSE(placed.is_null());
  EXPECT_TRUE(absl::StrContains(placed["reason"].get<std::string>(), "next best")) << placed.dump();

  // Cancelling train-2 frees od-v100, so the waiting train-3 takes it; a node with a job bound
  // cannot be removed.
  r = Cairn(c, {"job", "cancel", "train-2"});
  ASSERT_TRUE(r.Exited(0)) << r.Describe();
  EXPECT_TRUE(absl::StrContains(r.out, "job-cancelled")) << r.out;
  json after = ParseJson(Cairn(c, {"cluster", "status", "--json"}));
  std::map<std::string, std::string> where;
  for (const json& j : after["jobs"]) where[j["spec"]["id"]] = j.value("node_id", "");
  EXPECT_EQ(where.count("train-2"), 0u) << after.dump();
  EXPECT_EQ(where["train-3"], "od-v100") << after.dump();
  r = Cairn(c, {"cluster", "remove-node", "od-v100"});
  EXPECT_TRUE(r.FailedCleanly()) << r.Describe();
  EXPECT_TRUE(absl::StrContains(r.err, "train-3")) << r.err;
  r = Cairn(c, {"job", "cancel", "no-such-job"});
  EXPECT_TRUE(r.Exited(3)) << "not found\n" << r.Describe();
  EXPECT_TRUE(absl::StrContains(r.err, "no-such-job")) << r.err;
  for (auto& a : agents) a->Stop();
}

// Required GPU types and node labels outrank price; explain names the mismatch.
TEST_F(ControllerSqliteTest, GpuTypeAndNodeLabelsAreHonoured) {
  ControllerProcess c(dir_.path(), "c1", Store());
  ASSERT_TRUE(c.Start());
  api::NodeSpec cheap = MakeNode("cheap-v100", 0.9, true, 2, "V100");
  api::NodeSpec a100 = MakeNode("a100", 4.1, false, 2, "A100");
  api::NodeSpec team = MakeNode("team-v100", 3.0, false, 2, "V100");
  (*team.mutable_labels())["team"] = "ml";
  for (const auto& n : {cheap, a100, team}) {
    NodeAgent a({c.address()}, n);
    ASSERT_TRUE(a.Register());
  }
  CommandResult r = Cairn(c, {"submit", "--id", "needs-a100", "--gpus", "1", "--cpus", "4", "--memory-mb", "8000",
                              "--gpu-type", "A100", "--json"});
  ASSERT_TRUE(r.Exited(0)) << r.Describe();
  EXPECT_EQ(ParseJson(r)["node_id"], "a100") << r.out;
  r = Cairn(c, {"submit", "--id", "team-job", "--gpus", "1", "--cpus", "4", "--memory-mb", "8000", "--node-label",
                "team=ml", "--json"});
  ASSERT_TRUE(r.Exited(0)) << r.Describe();
  EXPECT_EQ(ParseJson(r)["node_id"], "team-v100") << r.out;
  r = Cairn(c, {"submit", "--id", "any", "--gpus", "1", "--cpus", "4", "--memory-mb", "8000", "--json"});
  ASSERT_TRUE(r.Exited(0)) << r.Describe();
  EXPECT_EQ(ParseJson(r)["node_id"], "cheap-v100") << r.out;
  r = Cairn(c, {"job", "explain", "needs-a100", "--json"});
  ASSERT_TRUE(r.Exited(0)) << r.Describe();
  json ex = ParseJson(r);
  for (const json& cand : ex["candidates"]) {
    if (cand["node_id"] != "a100") {
      EXPECT_FALSE(cand["feasible"].get<bool>()) << cand.dump();
      EXPECT_TRUE(absl::StrContains(cand["rejected_because"].get<std::string>(), "A100")) << cand.dump();
    }
  }
  r = Cairn(c, {"submit", "--id", "bad-label", "--cpus", "1", "--node-label", "novalue"});
  EXPECT_TRUE(r.FailedCleanly()) << r.Describe();
  EXPECT_TRUE(absl::StrContains(r.err, "KEY=VALUE")) << r.Describe();
}

// A node that stops heartbeating is declared lost with the reason, and the node-lost rule decides
// to restore its job elsewhere; the decision is an event that says it was not carried out.
TEST_F(ControllerSqliteTest, MissedHeartbeatsMakeNodeLostWithReason) {
  ControllerProcess c(dir_.path(), "c1", Store(), {"--heartbeat-timeout", "1.5"});
  ASSERT_TRUE(c.Start());
  NodeAgent a({c.address()}, MakeNode("cheap", 0.9, true, 1, "V100"));
  NodeAgent b({c.address()}, MakeNode("dear", 3.0, false, 1, "V100"));
  ASSERT_TRUE(a.Register());
  ASSERT_TRUE(b.Register());
  a.StartHeartbeats(200ms);
  b.StartHeartbeats(200ms);
  CommandResult r = Cairn(c, {"submit", "--id", "j", "--gpus", "1", "--cpus", "4", "--memory-mb", "8000", "--json"});
  ASSERT_TRUE(r.Exited(0)) << r.Describe();
  ASSERT_EQ(ParseJson(r)["node_id"], "cheap");

  // Heartbeating nodes stay healthy well past the timeout.
  std::this_thread::sleep_for(2500ms);
  r = Cairn(c, {"events", "--json"});
  for (const json& e : ParseJson(r).value("events", json::array())) EXPECT_NE(e["kind"], "node-lost") << e.dump();

  a.Stop();
  json lost = WaitEvent(c, [](const json& e) { return e["kind"] == "node-lost" && e["node_id"] == "cheap"; }, 10s);
  ASSERT_FALSE(lost.is_null()) << c.Log();
  // Not before the timeout: the controller saw the last heartbeat no later than its reply came.
  double after = std::chrono::duration<double>(std::chrono::steady_clock::now() - a.last_ack()).count();
  EXPECT_GE(after, 1.45);
  std::string reason = lost["reason"].get<std::string>();
  EXPECT_TRUE(absl::StrContains(reason, "no heartbeat for")) << reason;
  EXPECT_TRUE(absl::StrContains(reason, "timeout 1.5 s")) << reason;
  EXPECT_TRUE(absl::StrContains(reason, "j")) << reason;

  json decision = WaitEvent(c, [](const json& e) {
    return e["kind"] == "decision" && e["rule"] == "node-lost" && e["job_id"] == "j";
  }, 2s);
  ASSERT_FALSE(decision.is_null());
  EXPECT_EQ(decision["action"], "restore");
  EXPECT_EQ(decision["target_node_id"], "dear");
  EXPECT_TRUE(absl::StrContains(decision["dispatch"].get<std::string>(), "not carried out")) << decision.dump();

  r = Cairn(c, {"cluster", "status", "--json"});
  json st = ParseJson(r);
  for (const json& n : st["nodes"]) {
    EXPECT_EQ(n["health"], n["spec"]["id"] == "cheap" ? "lost" : "healthy") << n.dump();
  }
  EXPECT_TRUE(absl::StrContains(st["jobs"][0]["pending_action"].get<std::string>(), "restore to dear"))
      << st.dump();

  // The node comes back: a heartbeat makes it healthy again, as an event.
  NodeAgent again({c.address()}, MakeNode("cheap", 0.9, true, 1, "V100"));
  again.StartHeartbeats(200ms);
  json back = WaitEvent(c, [](const json& e) { return e["kind"] == "node-returned" && e["node_id"] == "cheap"; }, 5s);
  EXPECT_FALSE(back.is_null());
  again.Stop();
  b.Stop();
}

// A controller killed with SIGKILL and started again on the same database has every node, job,
// binding and event; a second controller on the same database is refused while one runs.
TEST_F(ControllerSqliteTest, RestartKeepsState) {
  std::vector<std::string> before_events;
  {
    ControllerProcess c(dir_.path(), "c1", Store());
    ASSERT_TRUE(c.Start());
    NodeAgent a({c.address()}, MakeNode("n1", 1.0, false, 2, "A100", 16, 128 * 1024));
    ASSERT_TRUE(a.Register());
    CommandResult r = Cairn(c, {"submit", "--id", "keep-me", "--gpus", "1", "--cpus", "4", "--memory-mb", "4000",
                                "--priority", "7", "--deadline", "6h", "--budget", "50"});
    ASSERT_TRUE(r.Exited(0)) << r.Describe();
    r = Cairn(c, {"submit", "--id", "waits", "--gpus", "4", "--cpus", "4", "--memory-mb", "4000"});
    ASSERT_TRUE(r.Exited(0)) << r.Describe();

    ControllerProcess second(dir_.path(), "c2", Store());
    ::testing::AssertionResult started = second.Start(5s);
    EXPECT_FALSE(started);
    EXPECT_TRUE(absl::StrContains(second.Log(), "in use by another cairn-controller")) << second.Log();

    r = Cairn(c, {"events", "--json"});
    json events = ParseJson(r)["events"];
    for (const json& e : events) before_events.push_back(e.dump());
    c.Kill(SIGKILL);
  }
  ControllerProcess c(dir_.path(), "c1", Store());
  ASSERT_TRUE(c.Start());
  CommandResult r = Cairn(c, {"cluster", "status", "--json"});
  ASSERT_TRUE(r.Exited(0)) << r.Describe();
  json st = ParseJson(r);
  ASSERT_EQ(st["nodes"].size(), 1u) << r.out;
  EXPECT_EQ(st["nodes"][0]["spec"]["gpu_type"], "A100");
  EXPECT_EQ(st["nodes"][0]["free_gpus"].get<int>(), 1);
  ASSERT_EQ(st["jobs"].size(), 2u) << r.out;
  EXPECT_EQ(st["jobs"][0]["spec"]["id"], "keep-me");
  EXPECT_EQ(st["jobs"][0]["node_id"], "n1");
  EXPECT_EQ(st["jobs"][0]["spec"]["priority"].get<int>(), 7);
  // Times in the CLI's JSON are RFC 3339, UTC.
  EXPECT_TRUE(std::regex_match(st["jobs"][0]["spec"]["deadline"].get<std::string>(),
                               std::regex("20[0-9]{2}-[01][0-9]-[0-3][0-9]T[0-2][0-9]:[0-5][0-9]:[0-6][0-9]\\.[0-9]{3}Z")))
      << st["jobs"][0].dump();
  EXPECT_EQ(st["jobs"][1]["spec"]["id"], "waits");
  EXPECT_EQ(st["jobs"][1]["state"], "pending");
  // A job no node can take says why, in the status and its text.
  EXPECT_EQ(st["jobs"][1].value("waiting", ""), "no node fits: n1: larger than the node: needs 4 GPU, 2 in all") << st["jobs"][1].dump();
  EXPECT_EQ(st["jobs"][0].value("waiting", ""), "") << st["jobs"][0].dump();
  CommandResult text = Cairn(c, {"cluster", "status"});
  EXPECT_TRUE(absl::StrContains(text.out, "waits: no node fits: n1: larger than the node: needs 4 GPU, 2 in all")) << text.out;

  // Old events are all still there, in order, and new ones continue the sequence.
  r = Cairn(c, {"events", "--json"});
  json ev = ParseJson(r)["events"];
  ASSERT_GT(ev.size(), before_events.size());
  for (size_t i = 0; i < before_events.size(); ++i) EXPECT_EQ(ev[i].dump(), before_events[i]);
  EXPECT_EQ(ev[before_events.size()]["kind"], "leader-elected");
  // 64-bit integers are numbers in the CLI's JSON (not proto3's strings).
  auto seq = [](const json& e) { return e["seq"].get<uint64_t>(); };
  EXPECT_GT(seq(ev[before_events.size()]), seq(ev[before_events.size() - 1]));

  // The pending job is placed as soon as enough capacity registers.
  NodeAgent big({c.address()}, MakeNode("n2", 8.0, false, 4, "A100", 32, 256 * 1024));
  ASSERT_TRUE(big.Register());
  r = Cairn(c, {"cluster", "status", "--json"});
  st = ParseJson(r);
  EXPECT_EQ(st["jobs"][1]["node_id"], "n2") << r.out;
}

// TCP calls need the token; the unix socket is 0600.
TEST_F(ControllerSqliteTest, TcpNeedsTokenAndSocketIsRootOnly) {
  std::string token_file = dir_ / "token";
  WriteFile(token_file, "s3cret-token-0123456789\n");
  ::chmod(token_file.c_str(), 0600);
  int port = FreePort();
  std::string tcp = "127.0.0.1:" + std::to_string(port);
  ControllerProcess c(dir_.path(), "c1", Store(), {"--listen", tcp, "--token-file", token_file});
  ASSERT_TRUE(c.Start());

  struct stat st;
  ASSERT_EQ(::stat(c.socket().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);

  CommandResult r = RunCairn({"cluster", "status", "--controller", tcp}, dir_.path(), {"CAIRN_TOKEN="});
  EXPECT_TRUE(r.FailedCleanly()) << r.Describe();
  EXPECT_TRUE(absl::StrContains(r.err, "token")) << r.Describe();

  r = RunCairn({"cluster", "status", "--controller", tcp}, dir_.path(), {"CAIRN_TOKEN=wrong-token-0123456789"});
  EXPECT_TRUE(r.FailedCleanly()) << r.Describe();
  EXPECT_TRUE(absl::StrContains(r.err, "token")) << r.Describe();

  // A node daemon over TCP without the token is refused too.
  auto stub = api::Controller::NewStub(grpc::CreateChannel(tcp, grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  api::RegisterNodeRequest req;
  *req.mutable_spec() = MakeNode("sneaky", 0.1, true, 1, "V100");
  api::RegisterNodeResponse resp;
  EXPECT_EQ(stub->RegisterNode(&ctx, req, &resp).error_code(), grpc::StatusCode::UNAUTHENTICATED);

  r = RunCairn({"cluster", "status", "--json", "--controller", tcp, "--token-file", token_file}, dir_.path());
  ASSERT_TRUE(r.Exited(0)) << r.Describe();
  EXPECT_EQ(ParseJson(r)["nodes"].size(), 0u);  // the refused registration left nothing

  // A token file others can read is refused at start.
  std::string loose = dir_ / "loose";
  WriteFile(loose, "s3cret-token-0123456789\n");
  ::chmod(loose.c_str(), 0644);
  ControllerProcess bad(dir_.path(), "c2", "sqlite:" + dir_ / "other.db", {"--listen", "127.0.0.1:0", "--token-file", loose});
  EXPECT_FALSE(bad.Start(5s));
  EXPECT_TRUE(absl::StrContains(bad.Log(), "chmod 600")) << bad.Log();
}

// With --tls-cert/--tls-key the TCP port speaks TLS: a client trusting the certificate's CA gets
// through (with the token), one in the clear or trusting another CA does not; a private key
// others can read is refused at start.
TEST_F(ControllerSqliteTest, TcpInTls) {
  if (::access("/usr/bin/openssl", X_OK) != 0) GTEST_SKIP() << "openssl is not installed: `apt-get install openssl`";
  ASSERT_TRUE(MakeSelfSignedCert(dir_.path(), "server"));
  ASSERT_TRUE(MakeSelfSignedCert(dir_.path(), "other"));
  std::string token_file = dir_ / "token";
  WriteFile(token_file, "s3cret-token-0123456789\n");
  ::chmod(token_file.c_str(), 0600);
  std::string tcp = "127.0.0.1:" + std::to_string(FreePort());
  ControllerProcess c(dir_.path(), "c1", Store(),
                      {"--listen", tcp, "--token-file", token_file, "--tls-cert", dir_ / "server.pem", "--tls-key",
                       dir_ / "server.key"});
  ASSERT_TRUE(c.Start());
  std::vector<std::string> call = {"cluster", "status", "--json", "--controller", tcp, "--token-file", token_file,
                                   "--timeout", "3"};
  auto with = [&](std::vector<std::string> more) {
    std::vector<std::string> args = call;
    args.insert(args.end(), more.begin(), more.end());
    return RunCairn(args, dir_.path());
  };
  CommandResult r = with({"--tls-ca", dir_ / "server.pem"});
  ASSERT_TRUE(r.Exited(0)) << r.Describe();
  EXPECT_EQ(ParseJson(r)["nodes"].size(), 0u);
  r = with({});
  EXPECT_TRUE(r.FailedCleanly()) << r.Describe();
  r = with({"--tls-ca", dir_ / "other.pem"});
  EXPECT_TRUE(r.FailedCleanly()) << r.Describe();
  r = with({"--tls-ca", dir_ / "missing.pem"});
  EXPECT_TRUE(r.FailedCleanly()) << r.Describe();
  EXPECT_TRUE(absl::StrContains(r.err, "missing.pem")) << r.err;

  ::chmod((dir_ / "other.key").c_str(), 0644);
  ControllerProcess loose(dir_.path(), "c2", "sqlite:" + dir_ / "other.db",
                          {"--listen", "127.0.0.1:0", "--token-file", token_file, "--tls-cert", dir_ / "other.pem",
                           "--tls-key", dir_ / "other.key"});
  EXPECT_FALSE(loose.Start(5s));
  EXPECT_TRUE(absl::StrContains(loose.Log(), "readable by root only")) << loose.Log();
}

// Bad input: a clear error naming what failed, non-zero exit, nothing recorded.
TEST_F(ControllerSqliteTest, BadInputIsRefusedClearly) {
  ControllerProcess c(dir_.path(), "c1", Store());
  ASSERT_TRUE(c.Start());
  CommandResult r = Cairn(c, {"submit", "--id", "x"});
  EXPECT_TRUE(r.FailedCleanly()) << r.Describe();
  EXPECT_TRUE(absl::StrContains(r.err, "no resources requested")) << r.Describe();
  r = Cairn(c, {"submit", "--id", "x", "--cpus", "1", "--deadline", "soon"});
  EXPECT_TRUE(r.FailedCleanly()) << r.Describe();
  EXPECT_TRUE(absl::StrContains(r.err, "--deadline soon")) << r.Describe();
  r = Cairn(c, {"submit", "--id", "x", "--cpus", "1", "--service", "--deadline", "1h"});
  EXPECT_TRUE(r.FailedCleanly()) << r.Describe();
  r = Cairn(c, {"job", "explain", "nope"});
  EXPECT_TRUE(r.FailedCleanly()) << r.Describe();
  EXPECT_TRUE(absl::StrContains(r.err, "no job `nope`")) << r.Describe();
  r = Cairn(c, {"cluster", "status", "--json"});
  EXPECT_EQ(ParseJson(r)["jobs"].size(), 0u);
  // Nobody listening: says so and where it tried.
  r = RunCairn({"cluster", "status", "--controller", "unix:" + dir_ / "absent.sock"}, dir_.path());
  EXPECT_TRUE(r.FailedCleanly()) << r.Describe();
  EXPECT_TRUE(absl::StrContains(r.err, "absent.sock")) << r.Describe();
  // Registering a node with GPUs but no type is refused, naming the field.
  NodeAgent bad({c.address()}, MakeNode("g", 1, false, 1, ""));
  ::testing::AssertionResult reg = bad.Register(2s);
  EXPECT_FALSE(reg);
  EXPECT_TRUE(absl::StrContains(reg.message(), "gpu_type")) << reg.message();

  // Stores that cannot be opened stop the controller before it serves, naming the store.
  ControllerProcess no_dir(dir_.path(), "c2", "sqlite:" + dir_ / "missing/parent/x.db");
  EXPECT_FALSE(no_dir.Start(5s));
  EXPECT_TRUE(absl::StrContains(no_dir.Log(), "missing/parent")) << no_dir.Log();
  EXPECT_FALSE(Exists(no_dir.socket()));
  ControllerProcess no_etcd(dir_.path(), "c3", "etcd://127.0.0.1:" + std::to_string(FreePort()));
  EXPECT_FALSE(no_etcd.Start(10s));
  EXPECT_TRUE(absl::StrContains(no_etcd.Log(), "no endpoint answered")) << no_etcd.Log();
  ControllerProcess bad_spec(dir_.path(), "c4", "mysql://x");
  EXPECT_FALSE(bad_spec.Start(5s));
  EXPECT_TRUE(absl::StrContains(bad_spec.Log(), "not a store")) << bad_spec.Log();
}

// Issue 21: job ids that cannot name a job on a node, and numbers that are not finite or not
// sane, are refused by `cairn submit` before it sends anything and by the controller when they
// come straight through its API, naming the field, the value and the range; nothing is recorded.
// A node registering with such numbers is refused too.
TEST_F(ControllerSqliteTest, BadIdsAndNumbersAreRefusedByTheCliAndTheApi) {
  ControllerProcess c(dir_.path(), "c1", Store());
  ASSERT_TRUE(c.Start());
  NodeAgent node({c.address()}, MakeNode("n1", 1, false, 0, "", 8, 16000));
  ASSERT_TRUE(node.Register());
  node.StartHeartbeats(200ms);

  // The CLI refuses before it sends: nothing listens where it is pointed.
  const std::vector<std::string> nobody = {"CAIRN_CONTROLLER=unix:" + dir_ / "absent.sock"};
  const std::vector<std::pair<std::vector<std::string>, std::string>> cli = {
      {{"--id=-x", "--cpus=1"}, "invalid job id '-x'"},
      {{"--id=--", "--cpus=1"}, "invalid job id '--'"},
      {{"--cpus=nan"}, "cpus (--cpus) nan: give a finite number from 0 to 8192"},
      {{"--cpus=1e308"}, "cpus (--cpus) 1e+308: give a finite number"},
      {{"--cpus=-1"}, "cpus (--cpus) -1: give a finite number"},
      {{"--cpus=1", "--checkpoint-every=nan"}, "checkpoint.interval_s (--checkpoint-every) nan"},
      {{"--cpus=1", "--checkpoint-interval=Infinity"}, "checkpoint.interval_s (--checkpoint-every) inf"},
      {{"--cpus=1", "--budget=-5"}, "budget_usd (--budget) -5"},
      {{"--cpus=1", "--downtime-cost=nan"}, "downtime_cost_per_hour (--downtime-cost) nan"},
      {{"--cpus=1", "--work-hours=1e308"}, "work_s (--work-hours x 3600) inf"},
      {{"--cpus=1", "--max-downtime=inf", "--service"}, "max_downtime_s (--max-downtime) inf"},
      {{"--cpus=1", "--memory-mb=4611686018427387904"}, "memory_mb (--memory) 4611686018427387904"},
      {{"--cpus=1", "--memory=2000000T"}, "memory_mb (--memory) 2097152000000"},
      {{"--cpus=1", "--memory=lots"}, "--memory lots: not a size; write e.g. 512M or 2G"},
      // (Shaped like an address, which the old check let through and placement then ignored.)
      {{"--cpus=1", "--address=999.1.1.1/24"}, "address (--address) '999.1.1.1/24': not an IPv4 or IPv6 address"},
      {{"--cpus=1", "--address=10.0.0.5/33"}, "'10.0.0.5/33': not a prefix length of that family"},
      {{"--cpus=1", "--memory=1G", "--memory-mb=5"}, "excludes"},
      {{"--cpus=1", "--checkpoint-bytes=-1"}, "checkpoint.bytes (--checkpoint-bytes) -1"},
      {{"--cpus=1", "--restore-time=nan"}, "checkpoint.restore_s (--restore-time) nan"},
      {{"--cpus=1", "--deadline=inf"}, "--deadline inf: not a positive finite duration"},
  };
  for (const auto& [args, message] : cli) {
    std::vector<std::string> argv = {"submit"};
    argv.insert(argv.end(), args.begin(), args.end());
    CommandResult r = RunCairn(argv, dir_.path(), nobody);
    EXPECT_TRUE(r.FailedCleanly()) << r.Describe();
    EXPECT_TRUE(absl::StrContains(r.err, message)) << message << ": " << r.err;
    EXPECT_FALSE(absl::StrContains(r.err, "absent.sock")) << "the CLI tried the controller first: " << r.err;
  }

  // Straight through the API: the controller is the authority.
  auto stub = api::Controller::NewStub(grpc::CreateChannel(c.address(), grpc::InsecureChannelCredentials()));
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  const std::vector<std::pair<std::function<void(api::JobSpec*)>, std::string>> bad = {
      {[](api::JobSpec* s) { s->set_id("-x"); }, "invalid job id '-x'"},
      {[](api::JobSpec* s) { s->set_id("a/../b"); }, "invalid job id"},
      {[&](api::JobSpec* s) { s->set_cpus(nan); }, "cpus (--cpus) nan"},
      {[&](api::JobSpec* s) { s->set_cpus(inf); }, "cpus (--cpus) inf"},
      {[](api::JobSpec* s) { s->set_cpus(1e308); }, "cpus (--cpus) 1e+308"},
      {[](api::JobSpec* s) { s->set_gpus(-1); }, "gpus (--gpus) -1"},
      {[](api::JobSpec* s) { s->set_priority(2000000000); }, "priority (--priority) 2000000000"},
      {[&](api::JobSpec* s) { s->set_deadline(inf); }, "deadline (--deadline, unix seconds) inf"},
      {[&](api::JobSpec* s) { s->set_deadline(nan); }, "deadline (--deadline, unix seconds) nan"},
      {[&](api::JobSpec* s) { s->mutable_checkpoint()->set_interval_s(nan); }, "checkpoint.interval_s"},
      {[&](api::JobSpec* s) { s->mutable_checkpoint()->set_interval_s(inf); }, "checkpoint.interval_s"},
      {[&](api::JobSpec* s) { s->mutable_checkpoint()->set_pause_s(-inf); }, "checkpoint.pause_s"},
      {[&](api::JobSpec* s) { s->set_budget_usd(nan); }, "budget_usd (--budget) nan"},
      {[&](api::JobSpec* s) { s->set_work_s(inf); }, "work_s"},
      {[&](api::JobSpec* s) { s->set_downtime_cost_per_hour(-1); }, "downtime_cost_per_hour"},
  };
  for (const auto& [set, message] : bad) {
    api::SubmitJobRequest req;
    req.mutable_spec()->set_id("ok-id");
    req.mutable_spec()->set_cpus(1);
    set(req.mutable_spec());
    api::SubmitJobResponse resp;
    grpc::ClientContext ctx;
    grpc::Status s = stub->SubmitJob(&ctx, req, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << message << ": " << s.error_message();
    EXPECT_TRUE(absl::StrContains(s.error_message(), message)) << s.error_message();
  }
  CommandResult r = Cairn(c, {"cluster", "status", "--json"});
  EXPECT_EQ(ParseJson(r)["jobs"].size(), 0u) << r.out;
  r = Cairn(c, {"events", "--json"});
  EXPECT_FALSE(absl::StrContains(r.out, "job-submitted")) << r.out;

  // A node registering with numbers no node has is refused, naming the field.
  NodeAgent nan_node({c.address()}, MakeNode("n2", 1, false, 0, "", nan, 16000));
  ::testing::AssertionResult reg = nan_node.Register(2s);
  EXPECT_FALSE(reg);
  EXPECT_TRUE(absl::StrContains(reg.message(), "node cpus (cairnd --cpus) nan")) << reg.message();
  NodeAgent free_node({c.address()}, MakeNode("n3", inf, false, 0, ""));
  reg = free_node.Register(2s);
  EXPECT_FALSE(reg);
  EXPECT_TRUE(absl::StrContains(reg.message(), "price_per_hour (cairnd --price-per-hour) inf")) << reg.message();
  NodeAgent dash_node({c.address()}, MakeNode("-n", 1, false, 0, ""));
  reg = dash_node.Register(2s);
  EXPECT_FALSE(reg);
  EXPECT_TRUE(absl::StrContains(reg.message(), "invalid node id '-n'")) << reg.message();

  // Sane values still go through, as given, by the CLI and by the API.
  r = Cairn(c, {"submit", "--id", "fine", "--cpus", "0.5", "--memory-mb", "100", "--checkpoint-interval", "600",
                "--budget", "12.5", "--json"});
  ASSERT_TRUE(r.Exited(0)) << r.Describe();
  EXPECT_EQ(ParseJson(r)["node_id"], "n1") << r.out;
  api::SubmitJobRequest req;
  req.mutable_spec()->set_id("api-fine");
  req.mutable_spec()->set_cpus(1);
  req.mutable_spec()->mutable_checkpoint()->set_interval_s(30);
  api::SubmitJobResponse resp;
  grpc::ClientContext ctx;
  grpc::Status s = stub->SubmitJob(&ctx, req, &resp);
  EXPECT_TRUE(s.ok()) << s.error_message();
  r = Cairn(c, {"cluster", "status", "--json"});
  EXPECT_EQ(ParseJson(r)["jobs"].size(), 2u) << r.out;
}

}  // namespace
}  // namespace cairn::testing
