#include "controller/store/store.h"

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "controller/store/etcd_store.h"
#include "controller/store/sqlite_store.h"

namespace cairn::controller {

absl::StatusOr<std::unique_ptr<Store>> OpenStore(const std::string& spec, double lease_ttl_s) {
  if (absl::StartsWith(spec, "etcd://")) {
    std::vector<std::string> endpoints =
        absl::StrSplit(spec.substr(7), ',', absl::SkipWhitespace());
    if (endpoints.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--store ", spec, ": no endpoint; give etcd://host:port[,host:port...]"));
    }
    auto s = EtcdStore::Open(std::move(endpoints), lease_ttl_s);
    if (!s.ok()) return s.status();
    return std::unique_ptr<Store>(std::move(*s));
  }
  std::string path = absl::StartsWith(spec, "sqlite:") ? spec.substr(7) : spec;
  if (path.empty() || absl::StrContains(path, "://")) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--store ", spec, ": not a store; give a SQLite file path, sqlite:PATH or etcd://host:port,..."));
  }
  auto s = SqliteStore::Open(path);
  if (!s.ok()) return s.status();
  return std::unique_ptr<Store>(std::move(*s));
}

}  // namespace cairn::controller
