#include "daemon/spot_watch.h"

#include <curl/curl.h>

#include <chrono>
#include <nlohmann/json.hpp>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/log.h"

namespace cairn::daemon {
namespace {

// Notice windows the clouds promise where a reply carries no time of its own.
constexpr double kGcpPreemptNoticeS = 30;     // preemptible/Spot VMs: about 30 s
constexpr double kGcpMaintenanceNoticeS = 60;  // TERMINATE_ON_HOST_MAINTENANCE: 60 s
constexpr double kAzureNoticeS = 30;           // Spot eviction: at least 30 s

double UnixNow() { return absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch()); }

std::string Short(const std::string& body) {
  std::string s(absl::StripAsciiWhitespace(body));
  return s.size() > 200 ? s.substr(0, 200) + "..." : s;
}

struct HttpReply {
  long code = 0;
  std::string body;
};

size_t Append(char* data, size_t size, size_t n, void* out) {
  static_cast<std::string*>(out)->append(data, size * n);
  return size * n;
}

// One HTTP request; an error names the method, the URL and what went wrong.
absl::StatusOr<HttpReply> Http(const std::string& method, const std::string& url,
                               const std::vector<std::string>& headers, double timeout_s) {
  static const bool curl_ready = curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK;
  if (!curl_ready) return absl::InternalError("curl_global_init failed");
  CURL* c = curl_easy_init();
  if (c == nullptr) return absl::InternalError("curl_easy_init failed");
  curl_slist* list = nullptr;
  for (const std::string& h : headers) list = curl_slist_append(list, h.c_str());
  HttpReply reply;
  curl_easy_setopt(c, CURLOPT_URL, url.c_str());
  curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method.c_str());
  if (method == "PUT") {
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, "");
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, 0L);
  }
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, list);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, Append);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &reply.body);
  curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, static_cast<long>(timeout_s * 1000));
  curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(timeout_s * 1000));
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c, CURLOPT_NOPROXY, "*");  // metadata services are never behind a proxy
  CURLcode rc = curl_easy_perform(c);
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &reply.code);
  curl_slist_free_all(list);
  curl_easy_cleanup(c);
  if (rc != CURLE_OK) {
    return absl::UnavailableError(absl::StrCat(method, " ", url, ": ", curl_easy_strerror(rc)));
  }
  return reply;
}

absl::Status BadReply(const std::string& what, long code, const std::string& body) {
  return absl::DataLossError(absl::StrFormat("%s: unexpected reply HTTP %d: %s", what, code, Short(body)));
}

}  // namespace

absl::StatusOr<std::optional<SpotNoticeInfo>> ParseAwsInstanceAction(long http_code, const std::string& body,
                                                                     double now) {
  if (http_code == 404) return std::nullopt;  // no notice
  if (http_code != 200) return BadReply("aws spot/instance-action", http_code, body);
  nlohmann::json j = nlohmann::json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("action") || !j["action"].is_string()) {
    return BadReply("aws spot/instance-action (not {\"action\":..., \"time\":...})", http_code, body);
  }
  SpotNoticeInfo n;
  n.cloud = "aws";
  n.action = j["action"].get<std::string>();
  n.deadline = now + 120;  // the documented two minutes, unless the reply says when
  if (j.contains("time") && j["time"].is_string()) {
    absl::Time t;
    std::string err;
    if (!absl::ParseTime(absl::RFC3339_full, j["time"].get<std::string>(), &t, &err)) {
      return BadReply("aws spot/instance-action (time: " + err + ")", http_code, body);
    }
    n.deadline = absl::ToDoubleSeconds(t - absl::UnixEpoch());
  }
  n.detail = Short(body);
  return n;
}

absl::StatusOr<std::optional<SpotNoticeInfo>> ParseGcpPreempted(long http_code, const std::string& body,
                                                                double now) {
  if (http_code != 200) return BadReply("gcp instance/preempted", http_code, body);
  std::string v = absl::AsciiStrToUpper(absl::StripAsciiWhitespace(body));
  if (v == "FALSE") return std::nullopt;
  if (v != "TRUE") return BadReply("gcp instance/preempted (not TRUE or FALSE)", http_code, body);
  SpotNoticeInfo n{"gcp", "preempt", now + kGcpPreemptNoticeS, "instance/preempted: TRUE"};
  return n;
}

absl::StatusOr<std::optional<SpotNoticeInfo>> ParseGcpMaintenanceEvent(long http_code, const std::string& body,
                                                                       double now) {
  if (http_code == 404) return std::nullopt;  // older metadata servers
  if (http_code != 200) return BadReply("gcp instance/maintenance-event", http_code, body);
  std::string v(absl::StripAsciiWhitespace(body));
  // MIGRATE_ON_HOST_MAINTENANCE is a live migration: the node and its jobs stay.
  if (v != "TERMINATE_ON_HOST_MAINTENANCE") return std::nullopt;
  SpotNoticeInfo n{"gcp", "terminate-on-host-maintenance", now + kGcpMaintenanceNoticeS,
                   "instance/maintenance-event: " + v};
  return n;
}

absl::StatusOr<std::optional<SpotNoticeInfo>> ParseAzureScheduledEvents(long http_code, const std::string& body,
                                                                        double now) {
  if (http_code != 200) return BadReply("azure scheduledevents", http_code, body);
  nlohmann::json j = nlohmann::json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("Events") || !j["Events"].is_array()) {
    return BadReply("azure scheduledevents (no Events array)", http_code, body);
  }
  for (const auto& e : j["Events"]) {
    if (!e.is_object()) continue;
    std::string type = e.value("EventType", "");
    if (type != "Preempt" && type != "Terminate") continue;
    SpotNoticeInfo n;
    n.cloud = "azure";
    n.action = absl::AsciiStrToLower(type);
    n.deadline = now + kAzureNoticeS;
    std::string not_before = e.value("NotBefore", "");
    if (!not_before.empty()) {
      absl::Time t;
      std::string err;
      if (!absl::ParseTime("%a, %d %b %Y %H:%M:%S GMT", not_before, absl::UTCTimeZone(), &t, &err)) {
        return BadReply("azure scheduledevents (NotBefore: " + err + ")", http_code, body);
      }
      n.deadline = absl::ToDoubleSeconds(t - absl::UnixEpoch());
    }
    n.detail = absl::StrCat("EventId ", e.value("EventId", "?"), " ", type, " NotBefore ",
                            not_before.empty() ? "(none)" : not_before, " status ", e.value("EventStatus", "?"));
    return n;
  }
  return std::nullopt;
}

absl::StatusOr<std::string> DefaultMetadataUrl(const std::string& cloud) {
  if (cloud == "aws" || cloud == "azure") return std::string("http://169.254.169.254");
  if (cloud == "gcp") return std::string("http://metadata.google.internal");
  return absl::InvalidArgumentError(absl::StrCat("--spot-notices ", cloud, ": give aws, gcp or azure"));
}

SpotWatcher::SpotWatcher(SpotWatchOptions opts, NoticeFn on_notice, StatusFn on_status)
    : opts_(std::move(opts)), on_notice_(std::move(on_notice)), on_status_(std::move(on_status)) {}

absl::StatusOr<std::unique_ptr<SpotWatcher>> SpotWatcher::Start(SpotWatchOptions opts, NoticeFn on_notice,
                                                                StatusFn on_status) {
  absl::StatusOr<std::string> def = DefaultMetadataUrl(opts.cloud);
  if (!def.ok()) return def.status();
  if (opts.base_url.empty()) opts.base_url = *def;
  while (!opts.base_url.empty() && opts.base_url.back() == '/') opts.base_url.pop_back();
  if (!absl::StartsWith(opts.base_url, "http://") && !absl::StartsWith(opts.base_url, "https://")) {
    return absl::InvalidArgumentError(absl::StrCat("spot metadata URL ", opts.base_url, ": give http://HOST[:PORT]"));
  }
  if (opts.poll_s <= 0 || opts.timeout_s <= 0) {
    return absl::InvalidArgumentError("--spot-poll and the request timeout must be > 0 seconds");
  }
  std::unique_ptr<SpotWatcher> w(new SpotWatcher(std::move(opts), std::move(on_notice), std::move(on_status)));
  w->thread_ = std::thread([p = w.get()] { p->Loop(); });
  return w;
}

SpotWatcher::~SpotWatcher() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::string SpotWatcher::Describe() const {
  return absl::StrFormat("%s %s: polling every %.1f s", opts_.cloud, opts_.base_url, opts_.poll_s);
}

absl::StatusOr<std::optional<SpotNoticeInfo>> SpotWatcher::PollOnce() const {
  const std::string& base = opts_.base_url;
  double now = UnixNow();
  if (opts_.cloud == "aws") {
    absl::StatusOr<HttpReply> tok = Http("PUT", base + "/latest/api/token",
                                         {"X-aws-ec2-metadata-token-ttl-seconds: 300"}, opts_.timeout_s);
    if (!tok.ok()) return tok.status();
    if (tok->code != 200 || tok->body.empty()) return BadReply("aws IMDSv2 token (PUT /latest/api/token)", tok->code, tok->body);
    absl::StatusOr<HttpReply> r = Http("GET", base + "/latest/meta-data/spot/instance-action",
                                       {"X-aws-ec2-metadata-token: " + tok->body}, opts_.timeout_s);
    if (!r.ok()) return r.status();
    return ParseAwsInstanceAction(r->code, r->body, now);
  }
  if (opts_.cloud == "gcp") {
    const std::vector<std::string> h = {"Metadata-Flavor: Google"};
    absl::StatusOr<HttpReply> r = Http("GET", base + "/computeMetadata/v1/instance/preempted", h, opts_.timeout_s);
    if (!r.ok()) return r.status();
    absl::StatusOr<std::optional<SpotNoticeInfo>> p = ParseGcpPreempted(r->code, r->body, now);
    if (!p.ok() || p->has_value()) return p;
    r = Http("GET", base + "/computeMetadata/v1/instance/maintenance-event", h, opts_.timeout_s);
    if (!r.ok()) return r.status();
    return ParseGcpMaintenanceEvent(r->code, r->body, now);
  }
  absl::StatusOr<HttpReply> r =
      Http("GET", base + "/metadata/scheduledevents?api-version=2020-07-01", {"Metadata: true"}, opts_.timeout_s);
  if (!r.ok()) return r.status();
  return ParseAzureScheduledEvents(r->code, r->body, now);
}

void SpotWatcher::Loop() {
  bool failing = false, first = true;
  std::string last_key;
  for (;;) {
    absl::StatusOr<std::optional<SpotNoticeInfo>> r = PollOnce();
    if (!r.ok()) {
      if (!failing || first) {
        on_status_(false, absl::StrCat("poll failed (no notice assumed): ", r.status().message()));
      }
      failing = true;
    } else {
      if (failing || first) on_status_(true, Describe() + "; last poll ok");
      failing = false;
      if (r->has_value()) {
        const SpotNoticeInfo& n = **r;
        // Estimated deadlines move with every poll: the notice is what the cloud said.
        std::string key = absl::StrCat(n.action, "|", n.detail);
        if (key != last_key) {
          last_key = key;
          on_notice_(n);
        }
      }
    }
    first = false;
    std::unique_lock<std::mutex> l(mu_);
    if (cv_.wait_for(l, std::chrono::duration<double>(opts_.poll_s), [this] { return stop_; })) return;
  }
}

}  // namespace cairn::daemon
