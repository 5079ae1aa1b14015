#include "controller/store/etcd_store.h"

#include <curl/curl.h>

#include <nlohmann/json.hpp>

#include "absl/strings/escaping.h"
#include "absl/strings/str_join.h"
#include "common/log.h"
#include "common/status.h"

namespace cairn::controller {
namespace {

using Json = nlohmann::json;
constexpr char kRoot[] = "/cairn/";
constexpr char kLeaderKey[] = "/cairn/leader";

std::string B64(absl::string_view s) { return absl::Base64Escape(s); }

std::string UnB64(const Json& j) {
  std::string out;
  if (j.is_string()) absl::Base64Unescape(j.get<std::string>(), &out);
  return out;
}

// etcd's int64 fields come back as JSON strings.
int64_t Int(const Json& j, const char* field) {
  if (!j.is_object() || !j.contains(field)) return 0;
  const Json& v = j[field];
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_string()) return std::strtoll(v.get<std::string>().c_str(), nullptr, 10);
  return 0;
}

// The end of the key range holding every key with `prefix`: prefix with its last byte + 1.
std::string PrefixEnd(std::string prefix) {
  while (!prefix.empty()) {
    unsigned char c = static_cast<unsigned char>(prefix.back());
    if (c < 0xff) {
      prefix.back() = static_cast<char>(c + 1);
      return prefix;
    }
    prefix.pop_back();
  }
  return std::string(1, '\0');
}

size_t Append(char* data, size_t size, size_t n, void* out) {
  static_cast<std::string*>(out)->append(data, size * n);
  return size * n;
}

absl::StatusOr<Json> Parse(const std::string& body, absl::string_view what) {
  Json j = Json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    return absl::InternalError(absl::StrCat("etcd ", what, ": reply is not JSON: ", body.substr(0, 200)));
  }
  return j;
}

}  // namespace

absl::StatusOr<std::unique_ptr<EtcdStore>> EtcdStore::Open(std::vector<std::string> endpoints,
                                                           double lease_ttl_s) {
  if (endpoints.empty()) return absl::InvalidArgumentError("etcd store: no endpoints given");
  static const bool curl_ready = curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK;
  if (!curl_ready) return absl::InternalError("curl_global_init failed");
  std::unique_ptr<EtcdStore> s(new EtcdStore(std::move(endpoints), lease_ttl_s));
  // A cheap read proves that some endpoint answers.
  auto probe = s->Get("probe");
  if (!probe.ok()) return probe.status();
  return s;
}

EtcdStore::~EtcdStore() = default;

std::string EtcdStore::Describe() const { return "etcd://" + absl::StrJoin(endpoints_, ","); }

absl::StatusOr<std::string> EtcdStore::Post(const std::string& path, const std::string& body) {
  std::lock_guard<std::mutex> l(post_mu_);
  std::string errors;
  for (size_t i = 0; i < endpoints_.size(); ++i) {
    size_t idx = (preferred_ + i) % endpoints_.size();
    std::string url = absl::StrCat("http://", endpoints_[idx], path);
    CURL* c = curl_easy_init();
    if (c == nullptr) return absl::InternalError("curl_easy_init failed");
    std::string reply;
    curl_slist* headers = curl_slist_append(nullptr, "Content-Type: application/json");
    curl_easy_setopt(c, CURLOPT_URL, url.c_str());
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, body.c_str());
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, static_cast<long>(body.size()));
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, Append);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &reply);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, 1000L);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 3000L);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    CURLcode rc = curl_easy_perform(c);
    long http = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &http);
    curl_slist_free_all(headers);
    curl_easy_cleanup(c);
    if (rc != CURLE_OK) {
      absl::StrAppend(&errors, errors.empty() ? "" : "; ", endpoints_[idx], ": ", curl_easy_strerror(rc));
      continue;
    }
    if (http != 200) {
      // etcd answered, but refused: e.g. no leader during an election. Try the next member.
      absl::StrAppend(&errors, errors.empty() ? "" : "; ", endpoints_[idx], ": HTTP ", http, " ",
                      reply.substr(0, 200));
      continue;
    }
    preferred_ = idx;
    return reply;
  }
  return absl::UnavailableError(absl::StrCat("etcd ", path, ": no endpoint answered (", errors,
                                             "); check that etcd runs at ", Describe()));
}

absl::StatusOr<std::optional<std::string>> EtcdStore::Get(absl::string_view key) {
  Json req = {{"key", B64(absl::StrCat(kRoot, key))}};
  ASSIGN_OR_RETURN(std::string body, Post("/v3/kv/range", req.dump()));
  ASSIGN_OR_RETURN(Json j, Parse(body, "range"));
  if (!j.contains("kvs") || j["kvs"].empty()) return std::optional<std::string>();
  return std::optional<std::string>(UnB64(j["kvs"][0]["value"]));
}

absl::StatusOr<std::vector<std::pair<std::string, std::string>>> EtcdStore::List(
    absl::string_view prefix) {
  std::string full = absl::StrCat(kRoot, prefix);
  Json req = {{"key", B64(full)}, {"range_end", B64(PrefixEnd(full))}};
  ASSIGN_OR_RETURN(std::string body, Post("/v3/kv/range", req.dump()));
  ASSIGN_OR_RETURN(Json j, Parse(body, "range"));
  std::vector<std::pair<std::string, std::string>> out;
  if (j.contains("kvs")) {
    for (const Json& kv : j["kvs"]) {
      std::string k = UnB64(kv["key"]);
      out.emplace_back(k.substr(sizeof(kRoot) - 1), UnB64(kv["value"]));
    }
  }
  return out;  // etcd returns a range sorted by key.
}

absl::Status EtcdStore::FencedTxn(const std::string& request_op, absl::string_view what) {
  std::string id;
  {
    std::lock_guard<std::mutex> l(lead_mu_);
    if (!leader_) {
      return absl::FailedPreconditionError(
          absl::StrCat("etcd ", what, ": this controller does not lead; nothing written"));
    }
    id = id_;
  }
  Json req = {
      {"compare", Json::array({{{"key", B64(kLeaderKey)},
                                {"target", "VALUE"},
                                {"result", "EQUAL"},
                                {"value", B64(id)}}})},
      {"success", Json::array({Json::parse(request_op)})},
  };
  ASSIGN_OR_RETURN(std::string body, Post("/v3/kv/txn", req.dump()));
  ASSIGN_OR_RETURN(Json j, Parse(body, "txn"));
  if (!j.value("succeeded", false)) {
    std::lock_guard<std::mutex> l(lead_mu_);
    leader_ = false;
    return absl::FailedPreconditionError(absl::StrCat(
        "etcd ", what, ": ", kLeaderKey, " no longer names ", id, " (leadership lost); nothing written"));
  }
  return absl::OkStatus();
}

absl::Status EtcdStore::Put(absl::string_view key, absl::string_view value) {
  Json op = {{"request_put", {{"key", B64(absl::StrCat(kRoot, key))}, {"value", B64(value)}}}};
  return FencedTxn(op.dump(), absl::StrCat("put ", key));
}

absl::Status EtcdStore::Delete(absl::string_view key) {
  Json op = {{"request_delete_range", {{"key", B64(absl::StrCat(kRoot, key))}}}};
  return FencedTxn(op.dump(), absl::StrCat("delete ", key));
}

absl::StatusOr<Leadership> EtcdStore::Campaign(const std::string& id) {
  absl::StatusOr<Leadership> round = CampaignRound(id);
  if (round.ok()) return round;
  // etcd did not answer. Without a renewal for most of a lease, assume the lease is gone and
  // stop acting before another controller can take over; until then keep leading.
  std::lock_guard<std::mutex> l(lead_mu_);
  if (leader_ && std::chrono::steady_clock::now() - renewed_ >
                     std::chrono::duration<double>(lease_ttl_s_ * 0.8)) {
    CAIRN_LOG_WARN("etcd: leadership lapsed: {}", round.status().ToString());
    leader_ = false;
  } else {
    CAIRN_LOG_WARN("etcd: election round failed: {}", round.status().ToString());
  }
  return Leadership{leader_, leader_ ? id : ""};
}

absl::StatusOr<Leadership> EtcdStore::CampaignRound(const std::string& id) {
  using Clock = std::chrono::steady_clock;
  int64_t lease;
  bool was_leader;
  {
    std::lock_guard<std::mutex> l(lead_mu_);
    id_ = id;
    lease = lease_id_;
    was_leader = leader_;
  }
  // 1. Keep this controller's lease alive, or get a new one.
  if (lease != 0) {
    Json req = {{"ID", std::to_string(lease)}};
    auto body = Post("/v3/lease/keepalive", req.dump());
    if (!body.ok()) return body.status();
    ASSIGN_OR_RETURN(Json j, Parse(*body, "keepalive"));
    // The gateway streams keepalives: a failure (e.g. "etcdserver: no leader" while etcd elects
    // a new leader after losing a member) arrives as HTTP 200 with {"error": ...}. That says
    // nothing about the lease; only a result with no TTL means it expired.
    if (!j.contains("result")) {
      return absl::UnavailableError(absl::StrCat("etcd lease keepalive: ", body->substr(0, 300)));
    }
    if (Int(j["result"], "TTL") <= 0) {
      // A keepalive answered by a member while etcd changes leader can say TTL 0 for a lease
      // that lives; ask for the lease's time to live before giving the leadership up.
      auto ttl_body = Post("/v3/lease/timetolive", req.dump());
      if (!ttl_body.ok()) return ttl_body.status();
      ASSIGN_OR_RETURN(Json ttl, Parse(*ttl_body, "lease timetolive"));
      if (Int(ttl, "TTL") > 0) {
        return absl::UnavailableError(absl::StrCat("etcd lease keepalive said ", body->substr(0, 300),
                                                   " but the lease lives: ", ttl_body->substr(0, 200)));
      }
      std::lock_guard<std::mutex> l(lead_mu_);
      if (leader_) CAIRN_LOG_WARN("etcd: lease {} expired; leadership lost ({})", lease, body->substr(0, 300));
      leader_ = false;
      lease_id_ = lease = 0;
    } else {
      std::lock_guard<std::mutex> l(lead_mu_);
      renewed_ = Clock::now();
    }
  }
  if (lease == 0) {
    Json req = {{"TTL", static_cast<int64_t>(std::max(1.0, lease_ttl_s_))}};
    auto body = Post("/v3/lease/grant", req.dump());
    if (!body.ok()) return body.status();
    ASSIGN_OR_RETURN(Json j, Parse(*body, "lease grant"));
    lease = Int(j, "ID");
    if (lease == 0) return absl::InternalError(absl::StrCat("etcd lease grant: no ID in ", *body));
    std::lock_guard<std::mutex> l(lead_mu_);
    lease_id_ = lease;
    renewed_ = Clock::now();
  }
  // 2. Take the leader key if nobody holds it; otherwise read who does.
  Json txn = {
      {"compare", Json::array({{{"key", B64(kLeaderKey)},
                                {"target", "CREATE"},
                                {"result", "EQUAL"},
                                {"create_revision", "0"}}})},
      {"success", Json::array({{{"request_put",
                                 {{"key", B64(kLeaderKey)},
                                  {"value", B64(id)},
                                  {"lease", std::to_string(lease)}}}}})},
      {"failure", Json::array({{{"request_range", {{"key", B64(kLeaderKey)}}}}})},
  };
  auto body = Post("/v3/kv/txn", txn.dump());
  if (!body.ok()) return body.status();
  ASSIGN_OR_RETURN(Json j, Parse(*body, "campaign txn"));
  Leadership out;
  if (j.value("succeeded", false)) {
    out.leader_id = id;
  } else if (j.contains("responses") && !j["responses"].empty()) {
    const Json& r = j["responses"][0].value("response_range", Json::object());
    if (r.contains("kvs") && !r["kvs"].empty()) out.leader_id = UnB64(r["kvs"][0]["value"]);
  }
  out.leader = out.leader_id == id;
  std::lock_guard<std::mutex> l(lead_mu_);
  if (out.leader != was_leader) {
    CAIRN_LOG_WARN("etcd: {} {} leadership (lease {})", id, out.leader ? "took" : "lost", lease);
  }
  leader_ = out.leader;
  return out;
}

void EtcdStore::Resign() {
  int64_t lease;
  {
    std::lock_guard<std::mutex> l(lead_mu_);
    lease = lease_id_;
    leader_ = false;
    lease_id_ = 0;
  }
  if (lease == 0) return;
  // Revoking the lease deletes the leader key with it.
  Json req = {{"ID", std::to_string(lease)}};
  (void)Post("/v3/lease/revoke", req.dump());
}

}  // namespace cairn::controller
