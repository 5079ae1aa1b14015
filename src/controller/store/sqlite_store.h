#pragma once
// The default store: one SQLite database file (WAL journal, synchronous=FULL), a single table
// kv(key TEXT PRIMARY KEY, value BLOB). One controller only: opening takes an exclusive lock
// on PATH.lock, and a second controller on the same file is refused with a message saying to
// use etcd for several controllers. The holder of the lock always leads.

#include <memory>
#include <mutex>
#include <string>

#include "common/unique_fd.h"
#include "controller/store/store.h"

struct sqlite3;

namespace cairn::controller {

class SqliteStore : public Store {
 public:
  // Creates the database, and its directory (0700) if that is missing but its parent exists.
  // Errors: FailedPrecondition (another controller holds it), Internal (SQLite errors).
  static absl::StatusOr<std::unique_ptr<SqliteStore>> Open(const std::string& path);
  ~SqliteStore() override;

  absl::StatusOr<std::optional<std::string>> Get(absl::string_view key) override;
  absl::Status Put(absl::string_view key, absl::string_view value) override;
  absl::Status Delete(absl::string_view key) override;
  absl::StatusOr<std::vector<std::pair<std::string, std::string>>> List(
      absl::string_view prefix) override;
  absl::StatusOr<Leadership> Campaign(const std::string& id) override;
  void Resign() override {}
  std::string Describe() const override { return "sqlite:" + path_; }

 private:
  SqliteStore(std::string path, UniqueFd lock) : path_(std::move(path)), lock_(std::move(lock)) {}
  absl::Status Exec(const char* sql);
  absl::Status Error(absl::string_view what) const;

  const std::string path_;
  UniqueFd lock_;
  std::mutex mu_;
  sqlite3* db_ = nullptr;  // GUARDED_BY(mu_)
};

}  // namespace cairn::controller
