#pragma once
// The store for several controllers: etcd v3, reached through its JSON gateway (POST
// /v3/kv/range, /v3/kv/txn, /v3/lease/grant, /v3/lease/keepalive, /v3/lease/revoke) with
// libcurl; keys and values are base64 in the gateway's JSON. Everything lives under "/cairn/".
//
// Leader election: the key "/cairn/leader" holds the leader's id, attached to a lease of
// `lease_ttl_s`. Campaign() renews this controller's lease (keepalive) and, when the key is
// absent, creates it in a transaction (compare create_revision == 0, then put with the lease),
// so at most one controller holds it. When the leader dies its lease expires and the next
// follower's Campaign() takes the key. Every Put/Delete is a transaction conditioned on the
// leader key still holding this controller's id, so a deposed leader cannot write.
//
// Endpoints are tried in order; the one that last answered is tried first.

#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "controller/store/store.h"

namespace cairn::controller {

class EtcdStore : public Store {
 public:
  // `endpoints`: "host:port" each. Checks that one of them answers.
  // Errors: InvalidArgument (no endpoints), Unavailable (none answers).
  static absl::StatusOr<std::unique_ptr<EtcdStore>> Open(std::vector<std::string> endpoints,
                                                         double lease_ttl_s);
  ~EtcdStore() override;

  absl::StatusOr<std::optional<std::string>> Get(absl::string_view key) override;
  absl::Status Put(absl::string_view key, absl::string_view value) override;
  absl::Status Delete(absl::string_view key) override;
  absl::StatusOr<std::vector<std::pair<std::string, std::string>>> List(
      absl::string_view prefix) override;
  absl::StatusOr<Leadership> Campaign(const std::string& id) override;
  void Resign() override;
  std::string Describe() const override;

 private:
  EtcdStore(std::vector<std::string> endpoints, double lease_ttl_s)
      : endpoints_(std::move(endpoints)), lease_ttl_s_(lease_ttl_s) {}
  // POSTs `body` (JSON) to `path` on the first endpoint that answers; returns the JSON reply.
  // Errors: Unavailable (no endpoint answered), Internal (etcd's error, quoted).
  absl::StatusOr<std::string> Post(const std::string& path, const std::string& body);
  absl::StatusOr<Leadership> CampaignRound(const std::string& id);
  // A transaction guarded by this controller's leadership.
  absl::Status FencedTxn(const std::string& request_op, absl::string_view what);

  const std::vector<std::string> endpoints_;
  const double lease_ttl_s_;
  std::mutex post_mu_;
  size_t preferred_ = 0;  // GUARDED_BY(post_mu_)

  std::mutex lead_mu_;  // held across a Campaign round.
  std::string id_;      // the id this controller campaigns with. GUARDED_BY(lead_mu_)
  int64_t lease_id_ = 0;
  bool leader_ = false;
  std::chrono::steady_clock::time_point renewed_;  // last successful grant or keepalive.
};

}  // namespace cairn::controller
