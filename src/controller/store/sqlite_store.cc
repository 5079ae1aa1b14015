#include "controller/store/sqlite_store.h"

#include <fcntl.h>
#include <sqlite3.h>
#include <sys/file.h>
#include <sys/stat.h>

#include "common/status.h"

namespace cairn::controller {
namespace {

// Finalizes a prepared statement on every path out of a function.
struct Stmt {
  sqlite3_stmt* s = nullptr;
  ~Stmt() { sqlite3_finalize(s); }
};

}  // namespace

absl::StatusOr<std::unique_ptr<SqliteStore>> SqliteStore::Open(const std::string& path) {
  if (size_t slash = path.find_last_of('/'); slash != std::string::npos && slash > 0) {
    std::string dir = path.substr(0, slash);
    if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
      absl::Status s = ErrnoStatus("mkdir " + dir);
      return absl::Status(s.code(), absl::StrCat("store ", path, ": ", s.message(),
                                                 " (create its parent directory, or pick another --store)"));
    }
  }
  std::string lock_path = path + ".lock";
  UniqueFd lock(::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
  if (!lock.valid()) return ErrnoStatus("open " + lock_path);
  if (::flock(lock.get(), LOCK_EX | LOCK_NB) != 0) {
    if (errno == EWOULDBLOCK) {
      return absl::FailedPreconditionError(absl::StrCat(
          "store ", path, " is in use by another cairn-controller (", lock_path,
          " is locked): stop it, or use --store etcd://... to run several controllers"));
    }
    return ErrnoStatus("flock " + lock_path);
  }
  // The database holds the cluster's state: root only, like the controller's socket.
  UniqueFd db(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
  if (!db.valid()) return ErrnoStatus("open " + path);
  std::unique_ptr<SqliteStore> store(new SqliteStore(path, std::move(lock)));
  int rc = sqlite3_open_v2(path.c_str(), &store->db_,
                           SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX,
                           nullptr);
  if (rc != SQLITE_OK) return store->Error("open");
  sqlite3_busy_timeout(store->db_, 5000);
  // synchronous=FULL: a write the controller acknowledged survives a power loss, not only a
  // crash of the controller.
  RETURN_IF_ERROR(store->Exec("PRAGMA journal_mode=WAL"));
  RETURN_IF_ERROR(store->Exec("PRAGMA synchronous=FULL"));
  RETURN_IF_ERROR(store->Exec(
      "CREATE TABLE IF NOT EXISTS kv (key TEXT PRIMARY KEY, value BLOB NOT NULL) WITHOUT ROWID"));
  return store;
}

SqliteStore::~SqliteStore() { sqlite3_close_v2(db_); }

absl::Status SqliteStore::Error(absl::string_view what) const {
  return absl::InternalError(absl::StrCat("sqlite ", what, " on ", path_, ": ",
                                          db_ ? sqlite3_errmsg(db_) : "out of memory"));
}

absl::Status SqliteStore::Exec(const char* sql) {
  char* err = nullptr;
  if (sqlite3_exec(db_, sql, nullptr, nullptr, &err) != SQLITE_OK) {
    std::string msg = err ? err : "unknown error";
    sqlite3_free(err);
    return absl::InternalError(absl::StrCat("sqlite `", sql, "` on ", path_, ": ", msg));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::optional<std::string>> SqliteStore::Get(absl::string_view key) {
  std::lock_guard<std::mutex> l(mu_);
  Stmt st;
  if (sqlite3_prepare_v2(db_, "SELECT value FROM kv WHERE key = ?", -1, &st.s, nullptr) != SQLITE_OK) {
    return Error("prepare get");
  }
  sqlite3_bind_text(st.s, 1, key.data(), static_cast<int>(key.size()), SQLITE_TRANSIENT);
  int rc = sqlite3_step(st.s);
  if (rc == SQLITE_DONE) return std::optional<std::string>();
  if (rc != SQLITE_ROW) return Error(absl::StrCat("get ", key));
  const void* v = sqlite3_column_blob(st.s, 0);
  int n = sqlite3_column_bytes(st.s, 0);
  return std::optional<std::string>(std::string(static_cast<const char*>(v), n));
}

absl::Status SqliteStore::Put(absl::string_view key, absl::string_view value) {
  std::lock_guard<std::mutex> l(mu_);
  Stmt st;
  if (sqlite3_prepare_v2(db_, "INSERT OR REPLACE INTO kv (key, value) VALUES (?, ?)", -1, &st.s,
                         nullptr) != SQLITE_OK) {
    return Error("prepare put");
  }
  sqlite3_bind_text(st.s, 1, key.data(), static_cast<int>(key.size()), SQLITE_TRANSIENT);
  sqlite3_bind_blob(st.s, 2, value.data(), static_cast<int>(value.size()), SQLITE_TRANSIENT);
  if (sqlite3_step(st.s) != SQLITE_DONE) return Error(absl::StrCat("put ", key));
  return absl::OkStatus();
}

absl::Status SqliteStore::Delete(absl::string_view key) {
  std::lock_guard<std::mutex> l(mu_);
  Stmt st;
  if (sqlite3_prepare_v2(db_, "DELETE FROM kv WHERE key = ?", -1, &st.s, nullptr) != SQLITE_OK) {
    return Error("prepare delete");
  }
  sqlite3_bind_text(st.s, 1, key.data(), static_cast<int>(key.size()), SQLITE_TRANSIENT);
  if (sqlite3_step(st.s) != SQLITE_DONE) return Error(absl::StrCat("delete ", key));
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::pair<std::string, std::string>>> SqliteStore::List(
    absl::string_view prefix) {
  std::lock_guard<std::mutex> l(mu_);
  Stmt st;
  // Keys in [prefix, prefix + 0xff): every key that starts with prefix (keys are ASCII).
  if (sqlite3_prepare_v2(db_, "SELECT key, value FROM kv WHERE key >= ? AND key < ? ORDER BY key",
                         -1, &st.s, nullptr) != SQLITE_OK) {
    return Error("prepare list");
  }
  std::string end = std::string(prefix) + "\xff";
  sqlite3_bind_text(st.s, 1, prefix.data(), static_cast<int>(prefix.size()), SQLITE_TRANSIENT);
  sqlite3_bind_text(st.s, 2, end.data(), static_cast<int>(end.size()), SQLITE_TRANSIENT);
  std::vector<std::pair<std::string, std::string>> out;
  int rc;
  while ((rc = sqlite3_step(st.s)) == SQLITE_ROW) {
    const char* k = reinterpret_cast<const char*>(sqlite3_column_text(st.s, 0));
    const void* v = sqlite3_column_blob(st.s, 1);
    int n = sqlite3_column_bytes(st.s, 1);
    out.emplace_back(k ? k : "", std::string(static_cast<const char*>(v), n));
  }
  if (rc != SQLITE_DONE) return Error(absl::StrCat("list ", prefix));
  return out;
}

absl::StatusOr<Leadership> SqliteStore::Campaign(const std::string& id) {
  // The file lock taken in Open() makes this controller the only one on this store.
  return Leadership{true, id};
}

}  // namespace cairn::controller
