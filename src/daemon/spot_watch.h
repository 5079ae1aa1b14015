#pragma once
// Spot interruption notices: cairnd polls its cloud's instance metadata service and reports the
// announcement that this node will be reclaimed (docs/daemon.md, "Node signals").
//
// The protocols, per cloud:
//   aws   IMDSv2: PUT BASE/latest/api/token with X-aws-ec2-metadata-token-ttl-seconds, then
//         GET BASE/latest/meta-data/spot/instance-action with X-aws-ec2-metadata-token: 404 while
//         there is no notice, then {"action": "terminate|stop|hibernate", "time": "RFC 3339"}.
//   gcp   GET BASE/computeMetadata/v1/instance/preempted with Metadata-Flavor: Google: "TRUE"
//         once preempted (about 30 s before the stop), else "FALSE"; and .../maintenance-event:
//         "TERMINATE_ON_HOST_MAINTENANCE" announces a stop (live migrations are not reported).
//   azure GET BASE/metadata/scheduledevents?api-version=2020-07-01 with Metadata: true:
//         {"Events": [{"EventType": "Preempt", "NotBefore": "RFC 1123", ...}]}; Preempt is the
//         Spot VM eviction, Terminate a deletion; other types (Reboot, Redeploy, Freeze) are not.
//
// Polling is off unless configured: the default BASE URLs are the clouds' link-local metadata
// addresses, which are only contacted when cairnd is told which cloud it runs on.
//
// Thread safety: a SpotWatcher polls on its own thread and calls its callbacks there; its public
// methods may be called from any thread. The Parse* functions are pure.

#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "absl/status/statusor.h"

namespace cairn::daemon {

struct SpotNoticeInfo {
  std::string cloud;
  std::string action;
  double deadline = 0;  // unix seconds
  std::string detail;
};

// The notice in a metadata reply, if any; an error when the reply is not one the protocol allows
// (then no notice is assumed). `now` (unix seconds) estimates deadlines the cloud does not give.
absl::StatusOr<std::optional<SpotNoticeInfo>> ParseAwsInstanceAction(long http_code, const std::string& body,
                                                                     double now);
absl::StatusOr<std::optional<SpotNoticeInfo>> ParseGcpPreempted(long http_code, const std::string& body, double now);
absl::StatusOr<std::optional<SpotNoticeInfo>> ParseGcpMaintenanceEvent(long http_code, const std::string& body,
                                                                       double now);
absl::StatusOr<std::optional<SpotNoticeInfo>> ParseAzureScheduledEvents(long http_code, const std::string& body,
                                                                        double now);

struct SpotWatchOptions {
  std::string cloud;     // aws | gcp | azure
  std::string base_url;  // empty: the cloud's own metadata address
  double poll_s = 5;     // AWS advises checking every 5 s
  double timeout_s = 2;  // per HTTP request
};

// The cloud's metadata address (link-local; never contacted unless polling is configured).
absl::StatusOr<std::string> DefaultMetadataUrl(const std::string& cloud);

class SpotWatcher {
 public:
  using NoticeFn = std::function<void(const SpotNoticeInfo&)>;
  // `ok` false: the poll failed (what, on which URL, in `line`); true: it works (again).
  using StatusFn = std::function<void(bool ok, const std::string& line)>;

  // Checks the options and starts polling. Calls `on_notice` once per distinct notice (what
  // the cloud said: a changed action or time is a new one) and `on_status` when polling starts failing or
  // works again (not on every poll).
  static absl::StatusOr<std::unique_ptr<SpotWatcher>> Start(SpotWatchOptions opts, NoticeFn on_notice,
                                                            StatusFn on_status);
  ~SpotWatcher();  // stops polling and joins the thread

  // One poll, on the caller's thread: the notice, if there is one, or why the poll failed.
  absl::StatusOr<std::optional<SpotNoticeInfo>> PollOnce() const;
  // "aws http://...: polling every 5 s" for NodeInfo.
  std::string Describe() const;

 private:
  SpotWatcher(SpotWatchOptions opts, NoticeFn on_notice, StatusFn on_status);
  void Loop();

  const SpotWatchOptions opts_;
  const NoticeFn on_notice_;
  const StatusFn on_status_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;  // GUARDED_BY(mu_)
  std::thread thread_;
};

}  // namespace cairn::daemon
