#pragma once
// What the tests of a controller with real daemons share (cluster_test.cc, e2e_test.cc): the
// `cairn` CLI pointed at the controller, its status and its events.

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "controller_harness.h"
#include "daemon_harness.h"

namespace cairn::testing {

class ClusterFixture : public DaemonFixture {
 protected:
  // A `cairn-controller --dispatch cairnd` on loopback TCP with a token, heartbeats every 0.3 s
  // and the given timeout, started and leading (null, with the failure recorded, if not).
  // `host`: the address it listens on.
  std::unique_ptr<ControllerProcess> StartTcpController(const std::string& heartbeat_timeout_s,
                                                        const std::string& host = "127.0.0.1");
  // The same controller started again after it died: same store, address and token.
  std::unique_ptr<ControllerProcess> RestartTcpController(const std::string& heartbeat_timeout_s);
  // The arguments of a cairnd that joins that controller: TCP with its own token on a free port
  // of `host`, the price, checkpoints in the shared directory `shared` (dir:), then `more`.
  std::vector<std::string> JoinArgs(const std::string& price, const std::string& shared, std::vector<std::string> more,
                                    const std::string& host = "127.0.0.1");
  // The checkpoint store every node of the test shares (a directory made under Dir()).
  std::string SharedStore();
  // The arguments of a spot node whose cloud (the metadata responder at `metadata_url`) is
  // polled for reclaim notices every 0.2 s, in `zone`.
  static std::vector<std::string> SpotArgs(const std::string& metadata_url, const std::string& zone);

  // `cairn ARGS...` against controller `c`.
  CommandResult Ctl(const ControllerProcess& c, std::vector<std::string> args);
  // `cairn cluster status --json` (null when it does not answer).
  nlohmann::json Status(const ControllerProcess& c);
  // The node `id` in a status (null when it is not there).
  static nlohmann::json NodeIn(const nlohmann::json& status, const std::string& id);
  // Every event the controller keeps, oldest first.
  std::vector<nlohmann::json> Events(const ControllerProcess& c);
  // The first event after `after_seq` that `pred` accepts, waited for up to `timeout` (null if none).
  nlohmann::json WaitEvent(const ControllerProcess& c, uint64_t after_seq,
                           const std::function<bool(const nlohmann::json&)>& pred, std::chrono::milliseconds timeout);

 private:
  std::string controller_tcp_, controller_token_, daemon_token_;
};

}  // namespace cairn::testing
