#pragma once
// What the tests of a controller with real daemons share (cluster_test.cc, e2e_test.cc): the
// `cairn` CLI pointed at the controller, its status and its events.

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "controller_harness.h"
#include "daemon_harness.h"

namespace cairn::testing {

class ClusterFixture : public DaemonFixture {
 protected:
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
};

}  // namespace cairn::testing
