#include "cluster_harness.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>

namespace cairn::testing {

using nlohmann::json;

std::unique_ptr<ControllerProcess> ClusterFixture::StartTcpController(const std::string& heartbeat_timeout_s,
                                                                      const std::string& host) {
  controller_token_ = Token("controller.token", "controller-token-0123456789abcdef");
  daemon_token_ = Token("daemon.token", "daemon-token-0123456789abcdef");
  controller_tcp_ = host + ":" + std::to_string(FreePort());
  return RestartTcpController(heartbeat_timeout_s);
}

std::unique_ptr<ControllerProcess> ClusterFixture::RestartTcpController(const std::string& heartbeat_timeout_s) {
  auto c = std::make_unique<ControllerProcess>(
      Dir(), "ctl", "sqlite:" + Dir() + "/controller.db",
      std::vector<std::string>{"--dispatch", "cairnd", "--listen", controller_tcp_, "--token-file", controller_token_,
                               "--heartbeat-interval", "0.3", "--heartbeat-timeout", heartbeat_timeout_s});
  ::testing::AssertionResult started = c->Start();
  EXPECT_TRUE(started);
  if (!started || !c->WaitLeader(10s)) {
    ADD_FAILURE() << "the controller did not lead: " << c->Log();
    return nullptr;
  }
  return c;
}

std::vector<std::string> ClusterFixture::JoinArgs(const std::string& price, const std::string& shared,
                                                  std::vector<std::string> more, const std::string& host) {
  std::vector<std::string> a = {"--listen", host + ":" + std::to_string(FreeTcpPort()), "--token-file", daemon_token_,
                                "--controller", controller_tcp_, "--controller-token-file", controller_token_,
                                "--price-per-hour", price, "--cloud", "aws", "--storage", "dir:" + shared};
  a.insert(a.end(), more.begin(), more.end());
  return a;
}

std::string ClusterFixture::SharedStore() {
  std::string shared = Dir() + "/shared-store";
  EXPECT_EQ(::mkdir(shared.c_str(), 0700), 0) << shared << ": " << std::strerror(errno);
  return shared;
}

std::vector<std::string> ClusterFixture::SpotArgs(const std::string& metadata_url, const std::string& zone) {
  return {"--spot", "--zone", zone, "--spot-notices", "aws", "--spot-url-aws", metadata_url, "--spot-poll", "0.2"};
}

CommandResult ClusterFixture::Ctl(const ControllerProcess& c, std::vector<std::string> args) {
  return RunCairn(args, Dir(), {"CAIRN_CONTROLLER=" + c.address()});
}

json ClusterFixture::Status(const ControllerProcess& c) {
  json j = json::parse(Ctl(c, {"cluster", "status", "--json"}).out, nullptr, false);
  return j.is_discarded() ? json() : j;
}

json ClusterFixture::NodeIn(const json& status, const std::string& id) {
  for (const json& n : status.value("nodes", json::array())) {
    if (n["spec"].value("id", "") == id) return n;
  }
  return json();
}

std::vector<json> ClusterFixture::Events(const ControllerProcess& c) {
  json j = json::parse(Ctl(c, {"events", "--json"}).out, nullptr, false);
  std::vector<json> out;
  if (!j.is_discarded()) {
    for (const json& e : j.value("events", json::array())) out.push_back(e);
  }
  return out;
}

json ClusterFixture::WaitEvent(const ControllerProcess& c, uint64_t after_seq, const std::function<bool(const json&)>& pred,
                               std::chrono::milliseconds timeout) {
  json found;
  WaitFor(
      [&] {
        for (const json& e : Events(c)) {
          if (static_cast<uint64_t>(JsonInt(e["seq"])) > after_seq && pred(e)) {
            found = e;
            return true;
          }
        }
        return false;
      },
      timeout);
  return found;
}

}  // namespace cairn::testing
