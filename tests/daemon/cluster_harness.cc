#include "cluster_harness.h"

namespace cairn::testing {

using nlohmann::json;

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
