// A job's service addresses (JobSpec.addresses, engine/net/address.h): on the node where the
// job runs, and only there. This node puts them on when it starts, restores or receives the job,
// takes them off when the job ends here or leaves (migrate.cc moves them with the job, and a
// restart takes off those of a migration to here it finds uncommitted: RecoverArrivals).

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/log.h"
#include "daemon/daemon.h"
#include "engine/net/address.h"

namespace cairn::daemon {

absl::Status Daemon::BringAddresses(const std::string& name, const api::JobSpec& spec) {
  std::vector<std::string> added;
  for (const std::string& text : spec.addresses()) {
    absl::StatusOr<net::ServiceAddress> a = net::ParseServiceAddress(text);
    absl::StatusOr<bool> put = a.ok() ? net::AddServiceAddress(*a) : a.status();
    if (!put.ok()) {
      return absl::FailedPreconditionError(absl::StrCat("job ", name, " on node ", opts_.node, ": ", put.status().message()));
    }
    if (*put) added.push_back(text);
  }
  if (!added.empty()) {
    Event(name, "address-added", absl::StrCat(absl::StrJoin(added, ", "), " put on node ", opts_.node));
  }
  return absl::OkStatus();
}

void Daemon::DropAddresses(const std::string& name, const api::JobSpec& spec, const std::string& why) {
  if (spec.addresses().empty()) return;
  std::vector<std::string> texts(spec.addresses().begin(), spec.addresses().end());
  absl::Status st = net::RemoveServiceAddresses(texts);
  if (!st.ok()) CAIRN_LOG_WARN("job={} addresses not all removed: {}", name, st.ToString());
  Event(name, "address-removed", absl::StrCat(absl::StrJoin(texts, ", "), " taken off node ", opts_.node, ": ", why));
}

}  // namespace cairn::daemon
