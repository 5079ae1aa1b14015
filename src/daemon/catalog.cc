#include "daemon/catalog.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <ctime>
#include <map>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/status.h"

namespace cairn::daemon {
namespace {

// Finalizes a prepared statement on every path out of a function.
struct Stmt {
  sqlite3_stmt* s = nullptr;
  ~Stmt() { sqlite3_finalize(s); }
};

void BindText(sqlite3_stmt* s, int i, const std::string& v) {
  sqlite3_bind_text(s, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
}

std::string ColumnText(sqlite3_stmt* s, int i) {
  const unsigned char* t = sqlite3_column_text(s, i);
  return t ? std::string(reinterpret_cast<const char*>(t), sqlite3_column_bytes(s, i)) : std::string();
}

constexpr char kCheckpointColumns[] =
    "id, job, state, location, size_bytes, parent, checksum, pinned, reason, created, frozen_s, total_s, error, "
    "group_checkpoint, gpu_processes, gpu_devices";

api::Checkpoint ReadCheckpoint(sqlite3_stmt* s) {
  api::Checkpoint c;
  c.set_id(ColumnText(s, 0));
  c.set_job(ColumnText(s, 1));
  c.set_state(ColumnText(s, 2));
  c.set_location(ColumnText(s, 3));
  c.set_size_bytes(sqlite3_column_int64(s, 4));
  c.set_parent(ColumnText(s, 5));
  c.set_checksum(ColumnText(s, 6));
  c.set_pinned(sqlite3_column_int(s, 7) != 0);
  c.set_reason(ColumnText(s, 8));
  c.set_created(sqlite3_column_double(s, 9));
  c.set_frozen_s(sqlite3_column_double(s, 10));
  c.set_total_s(sqlite3_column_double(s, 11));
  c.set_error(ColumnText(s, 12));
  c.set_group_checkpoint(ColumnText(s, 13));
  c.set_gpu_processes(sqlite3_column_int(s, 14));
  for (absl::string_view d : absl::StrSplit(ColumnText(s, 15), ',', absl::SkipEmpty())) {
    int i = 0;
    if (absl::SimpleAtoi(d, &i)) c.add_gpu_devices(i);
  }
  return c;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Catalog>> Catalog::Open(const std::string& path) {
  std::string lock_path = path + ".lock";
  int lock = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (lock < 0) return ErrnoStatus("open " + lock_path);
  if (::flock(lock, LOCK_EX | LOCK_NB) != 0) {
    ::close(lock);
    return absl::FailedPreconditionError(absl::StrCat("catalog ", path, " is in use by another cairnd (", lock_path,
                                                      " is locked): stop it, or give this one another --state-dir"));
  }
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) {
    ::close(lock);
    return ErrnoStatus("open " + path);
  }
  ::close(fd);
  std::unique_ptr<Catalog> c(new Catalog(path, lock));
  if (sqlite3_open_v2(path.c_str(), &c->db_, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX,
                      nullptr) != SQLITE_OK) {
    return c->Error("open");
  }
  sqlite3_busy_timeout(c->db_, 5000);
  // synchronous=FULL: a checkpoint the catalog calls complete stays complete after a power loss.
  RETURN_IF_ERROR(c->Exec("PRAGMA journal_mode=WAL"));
  RETURN_IF_ERROR(c->Exec("PRAGMA synchronous=FULL"));
  RETURN_IF_ERROR(c->Exec("CREATE TABLE IF NOT EXISTS jobs (name TEXT PRIMARY KEY, state TEXT NOT NULL, "
                          "host_pid INTEGER, data BLOB NOT NULL)"));
  RETURN_IF_ERROR(c->Exec(
      "CREATE TABLE IF NOT EXISTS checkpoints (id TEXT PRIMARY KEY, job TEXT NOT NULL, state TEXT NOT NULL, "
      "location TEXT NOT NULL, size_bytes INTEGER NOT NULL DEFAULT 0, parent TEXT NOT NULL DEFAULT '', "
      "checksum TEXT NOT NULL DEFAULT '', pinned INTEGER NOT NULL DEFAULT 0, reason TEXT NOT NULL DEFAULT '', "
      "created REAL NOT NULL, frozen_s REAL NOT NULL DEFAULT 0, total_s REAL NOT NULL DEFAULT 0, "
      "error TEXT NOT NULL DEFAULT '')"));
  // Added after the first catalogs were written: a catalog that has it already says so.
  if (absl::Status added = c->Exec("ALTER TABLE checkpoints ADD COLUMN group_checkpoint TEXT NOT NULL DEFAULT ''");
      !added.ok() && !absl::StrContains(added.message(), "duplicate column")) {
    return added;
  }
  if (absl::Status added = c->Exec("ALTER TABLE checkpoints ADD COLUMN gpu_processes INTEGER NOT NULL DEFAULT 0");
      !added.ok() && !absl::StrContains(added.message(), "duplicate column")) {
    return added;
  }
  if (absl::Status added = c->Exec("ALTER TABLE checkpoints ADD COLUMN gpu_devices TEXT NOT NULL DEFAULT ''");
      !added.ok() && !absl::StrContains(added.message(), "duplicate column")) {
    return added;
  }
  RETURN_IF_ERROR(c->Exec("CREATE INDEX IF NOT EXISTS checkpoints_job ON checkpoints (job, created)"));
  RETURN_IF_ERROR(c->Exec("CREATE TABLE IF NOT EXISTS events (seq INTEGER PRIMARY KEY AUTOINCREMENT, "
                          "time REAL NOT NULL, job TEXT NOT NULL, kind TEXT NOT NULL, detail TEXT NOT NULL)"));
  RETURN_IF_ERROR(c->Exec("CREATE TABLE IF NOT EXISTS settings (key TEXT PRIMARY KEY, value TEXT NOT NULL)"));
  return c;
}

Catalog::~Catalog() {
  sqlite3_close_v2(db_);
  ::close(lock_fd_);
}

absl::Status Catalog::Error(const std::string& what) const {
  return absl::InternalError(absl::StrCat("catalog ", path_, ": sqlite ", what, ": ",
                                          db_ ? sqlite3_errmsg(db_) : "out of memory"));
}

absl::Status Catalog::Exec(const char* sql) {
  char* err = nullptr;
  if (sqlite3_exec(db_, sql, nullptr, nullptr, &err) != SQLITE_OK) {
    std::string msg = err ? err : "unknown error";
    sqlite3_free(err);
    return absl::InternalError(absl::StrCat("catalog ", path_, ": `", sql, "`: ", msg));
  }
  return absl::OkStatus();
}

absl::Status Catalog::PutJob(const api::Job& job) {
  std::lock_guard<std::mutex> l(mu_);
  Stmt st;
  if (sqlite3_prepare_v2(db_, "INSERT OR REPLACE INTO jobs (name, state, host_pid, data) VALUES (?, ?, ?, ?)", -1,
                         &st.s, nullptr) != SQLITE_OK) {
    return Error("prepare put job");
  }
  std::string data = job.SerializeAsString();
  BindText(st.s, 1, job.name());
  BindText(st.s, 2, job.state());
  sqlite3_bind_int(st.s, 3, job.host_pid());
  sqlite3_bind_blob(st.s, 4, data.data(), static_cast<int>(data.size()), SQLITE_TRANSIENT);
  if (sqlite3_step(st.s) != SQLITE_DONE) return Error("put job " + job.name());
  return absl::OkStatus();
}

absl::StatusOr<std::optional<api::Job>> Catalog::GetJob(const std::string& name) {
  std::lock_guard<std::mutex> l(mu_);
  Stmt st;
  if (sqlite3_prepare_v2(db_, "SELECT data FROM jobs WHERE name = ?", -1, &st.s, nullptr) != SQLITE_OK) {
    return Error("prepare get job");
  }
  BindText(st.s, 1, name);
  int rc = sqlite3_step(st.s);
  if (rc == SQLITE_DONE) return std::optional<api::Job>();
  if (rc != SQLITE_ROW) return Error("get job " + name);
  api::Job job;
  if (!job.ParseFromArray(sqlite3_column_blob(st.s, 0), sqlite3_column_bytes(st.s, 0))) {
    return absl::DataLossError(absl::StrCat("catalog ", path_, ": job ", name, " is not readable"));
  }
  return std::optional<api::Job>(std::move(job));
}

absl::StatusOr<std::vector<api::Job>> Catalog::ListJobs() {
  std::lock_guard<std::mutex> l(mu_);
  Stmt st;
  if (sqlite3_prepare_v2(db_, "SELECT data FROM jobs ORDER BY name", -1, &st.s, nullptr) != SQLITE_OK) {
    return Error("prepare list jobs");
  }
  std::vector<api::Job> out;
  int rc;
  while ((rc = sqlite3_step(st.s)) == SQLITE_ROW) {
    api::Job job;
    if (!job.ParseFromArray(sqlite3_column_blob(st.s, 0), sqlite3_column_bytes(st.s, 0))) {
      return absl::DataLossError(absl::StrCat("catalog ", path_, ": a job row is not readable"));
    }
    out.push_back(std::move(job));
  }
  if (rc != SQLITE_DONE) return Error("list jobs");
  return out;
}

absl::Status Catalog::DeleteJob(const std::string& name) {
  std::lock_guard<std::mutex> l(mu_);
  for (const char* sql : {"DELETE FROM checkpoints WHERE job = ?", "DELETE FROM jobs WHERE name = ?"}) {
    Stmt st;
    if (sqlite3_prepare_v2(db_, sql, -1, &st.s, nullptr) != SQLITE_OK) return Error("prepare delete job");
    BindText(st.s, 1, name);
    if (sqlite3_step(st.s) != SQLITE_DONE) return Error("delete job " + name);
  }
  return absl::OkStatus();
}

absl::Status Catalog::PutCheckpoint(const api::Checkpoint& c) {
  std::lock_guard<std::mutex> l(mu_);
  return PutCheckpointLocked(c);
}

absl::Status Catalog::PutCheckpointLocked(const api::Checkpoint& c) {
  Stmt st;
  std::string sql = absl::StrCat("INSERT OR REPLACE INTO checkpoints (", kCheckpointColumns,
                                 ") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
  if (sqlite3_prepare_v2(db_, sql.c_str(), -1, &st.s, nullptr) != SQLITE_OK) return Error("prepare put checkpoint");
  BindText(st.s, 1, c.id());
  BindText(st.s, 2, c.job());
  BindText(st.s, 3, c.state());
  BindText(st.s, 4, c.location());
  sqlite3_bind_int64(st.s, 5, c.size_bytes());
  BindText(st.s, 6, c.parent());
  BindText(st.s, 7, c.checksum());
  sqlite3_bind_int(st.s, 8, c.pinned() ? 1 : 0);
  BindText(st.s, 9, c.reason());
  sqlite3_bind_double(st.s, 10, c.created());
  sqlite3_bind_double(st.s, 11, c.frozen_s());
  sqlite3_bind_double(st.s, 12, c.total_s());
  BindText(st.s, 13, c.error());
  BindText(st.s, 14, c.group_checkpoint());
  sqlite3_bind_int(st.s, 15, c.gpu_processes());
  BindText(st.s, 16, absl::StrJoin(c.gpu_devices(), ","));
  if (sqlite3_step(st.s) != SQLITE_DONE) return Error("put checkpoint " + c.id());
  return absl::OkStatus();
}

absl::StatusOr<std::optional<api::Checkpoint>> Catalog::GetCheckpoint(const std::string& id) {
  std::lock_guard<std::mutex> l(mu_);
  Stmt st;
  std::string sql = absl::StrCat("SELECT ", kCheckpointColumns, " FROM checkpoints WHERE id = ?");
  if (sqlite3_prepare_v2(db_, sql.c_str(), -1, &st.s, nullptr) != SQLITE_OK) return Error("prepare get checkpoint");
  BindText(st.s, 1, id);
  int rc = sqlite3_step(st.s);
  if (rc == SQLITE_DONE) return std::optional<api::Checkpoint>();
  if (rc != SQLITE_ROW) return Error("get checkpoint " + id);
  return std::optional<api::Checkpoint>(ReadCheckpoint(st.s));
}

absl::StatusOr<std::vector<api::Checkpoint>> Catalog::ListCheckpoints(const std::string& job) {
  std::lock_guard<std::mutex> l(mu_);
  return ListCheckpointsLocked(job);
}

absl::StatusOr<std::vector<api::Checkpoint>> Catalog::ListCheckpointsLocked(const std::string& job) {
  Stmt st;
  std::string sql = absl::StrCat("SELECT ", kCheckpointColumns, " FROM checkpoints",
                                 job.empty() ? "" : " WHERE job = ?", " ORDER BY created, id");
  if (sqlite3_prepare_v2(db_, sql.c_str(), -1, &st.s, nullptr) != SQLITE_OK) return Error("prepare list checkpoints");
  if (!job.empty()) BindText(st.s, 1, job);
  std::vector<api::Checkpoint> out;
  int rc;
  while ((rc = sqlite3_step(st.s)) == SQLITE_ROW) out.push_back(ReadCheckpoint(st.s));
  if (rc != SQLITE_DONE) return Error("list checkpoints");
  return out;
}

absl::Status Catalog::DeleteCheckpoint(const std::string& id) {
  std::lock_guard<std::mutex> l(mu_);
  return DeleteCheckpointLocked(id);
}

absl::StatusOr<std::vector<api::Checkpoint>> Catalog::CompleteCheckpoint(const api::Checkpoint& c, uint32_t keep) {
  std::lock_guard<std::mutex> l(mu_);
  RETURN_IF_ERROR(Exec("BEGIN IMMEDIATE"));
  auto body = [&]() -> absl::StatusOr<std::vector<api::Checkpoint>> {
    RETURN_IF_ERROR(PutCheckpointLocked(c));
    std::vector<api::Checkpoint> expired;
    if (keep == 0) return expired;
    ASSIGN_OR_RETURN(std::vector<api::Checkpoint> all, ListCheckpointsLocked(c.job()));
    std::vector<const api::Checkpoint*> unpinned;
    for (const auto& x : all) {
      if (x.state() == "complete" && !x.pinned()) unpinned.push_back(&x);
    }
    size_t over = unpinned.size() > keep ? unpinned.size() - keep : 0;
    // What stays (the newest `keep`, pinned ones, any not complete) keeps its parents, down to
    // a full checkpoint: an incremental checkpoint is restored through them.
    std::map<std::string, const api::Checkpoint*> by_id;
    for (const auto& x : all) by_id[x.id()] = &x;
    std::set<std::string> needed;
    for (const auto& x : all) {
      bool expiring = std::find(unpinned.begin(), unpinned.begin() + over, &x) != unpinned.begin() + over;
      if (expiring) continue;
      for (const api::Checkpoint* p = &x; p != nullptr && !p->parent().empty() && needed.insert(p->parent()).second;) {
        auto it = by_id.find(p->parent());
        p = it == by_id.end() ? nullptr : it->second;
      }
    }
    for (size_t i = 0; i < over; ++i) {
      if (needed.count(unpinned[i]->id())) continue;
      RETURN_IF_ERROR(DeleteCheckpointLocked(unpinned[i]->id()));
      expired.push_back(*unpinned[i]);
    }
    return expired;
  };
  absl::StatusOr<std::vector<api::Checkpoint>> r = body();
  if (!r.ok()) {
    (void)Exec("ROLLBACK");
    return r.status();
  }
  RETURN_IF_ERROR(Exec("COMMIT"));
  return r;
}

absl::Status Catalog::DeleteCheckpointLocked(const std::string& id) {
  Stmt st;
  if (sqlite3_prepare_v2(db_, "DELETE FROM checkpoints WHERE id = ?", -1, &st.s, nullptr) != SQLITE_OK) {
    return Error("prepare delete checkpoint");
  }
  BindText(st.s, 1, id);
  if (sqlite3_step(st.s) != SQLITE_DONE) return Error("delete checkpoint " + id);
  return absl::OkStatus();
}

absl::StatusOr<api::Event> Catalog::AddEvent(const std::string& job, const std::string& kind,
                                             const std::string& detail) {
  std::lock_guard<std::mutex> l(mu_);
  Stmt st;
  if (sqlite3_prepare_v2(db_, "INSERT INTO events (time, job, kind, detail) VALUES (?, ?, ?, ?)", -1, &st.s,
                         nullptr) != SQLITE_OK) {
    return Error("prepare add event");
  }
  api::Event e;
  e.set_time(absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch()));
  e.set_job(job);
  e.set_kind(kind);
  e.set_detail(detail);
  sqlite3_bind_double(st.s, 1, e.time());
  BindText(st.s, 2, job);
  BindText(st.s, 3, kind);
  BindText(st.s, 4, detail);
  if (sqlite3_step(st.s) != SQLITE_DONE) return Error("add event");
  e.set_seq(static_cast<uint64_t>(sqlite3_last_insert_rowid(db_)));
  return e;
}

absl::StatusOr<std::vector<api::Event>> Catalog::Events(const std::string& job, uint64_t after_seq, int limit) {
  std::lock_guard<std::mutex> l(mu_);
  Stmt st;
  std::string sql = absl::StrCat("SELECT seq, time, job, kind, detail FROM events WHERE seq > ?",
                                 job.empty() ? "" : " AND job = ?", " ORDER BY seq LIMIT ?");
  if (sqlite3_prepare_v2(db_, sql.c_str(), -1, &st.s, nullptr) != SQLITE_OK) return Error("prepare events");
  int i = 1;
  sqlite3_bind_int64(st.s, i++, static_cast<sqlite3_int64>(after_seq));
  if (!job.empty()) BindText(st.s, i++, job);
  sqlite3_bind_int(st.s, i, limit);
  std::vector<api::Event> out;
  int rc;
  while ((rc = sqlite3_step(st.s)) == SQLITE_ROW) {
    api::Event e;
    e.set_seq(static_cast<uint64_t>(sqlite3_column_int64(st.s, 0)));
    e.set_time(sqlite3_column_double(st.s, 1));
    e.set_job(ColumnText(st.s, 2));
    e.set_kind(ColumnText(st.s, 3));
    e.set_detail(ColumnText(st.s, 4));
    out.push_back(std::move(e));
  }
  if (rc != SQLITE_DONE) return Error("events");
  return out;
}

absl::StatusOr<uint64_t> Catalog::LastSeq() {
  std::lock_guard<std::mutex> l(mu_);
  Stmt st;
  if (sqlite3_prepare_v2(db_, "SELECT COALESCE(MAX(seq), 0) FROM events", -1, &st.s, nullptr) != SQLITE_OK) {
    return Error("prepare last seq");
  }
  if (sqlite3_step(st.s) != SQLITE_ROW) return Error("last seq");
  return static_cast<uint64_t>(sqlite3_column_int64(st.s, 0));
}

absl::StatusOr<std::optional<std::string>> Catalog::GetSetting(const std::string& key) {
  std::lock_guard<std::mutex> l(mu_);
  Stmt st;
  if (sqlite3_prepare_v2(db_, "SELECT value FROM settings WHERE key = ?", -1, &st.s, nullptr) != SQLITE_OK) {
    return Error("prepare get setting");
  }
  BindText(st.s, 1, key);
  int rc = sqlite3_step(st.s);
  if (rc == SQLITE_DONE) return std::optional<std::string>();
  if (rc != SQLITE_ROW) return Error("get setting " + key);
  const unsigned char* v = sqlite3_column_text(st.s, 0);
  return std::optional<std::string>(v == nullptr ? "" : reinterpret_cast<const char*>(v));
}

absl::Status Catalog::PutSetting(const std::string& key, const std::string& value) {
  std::lock_guard<std::mutex> l(mu_);
  Stmt st;
  if (sqlite3_prepare_v2(db_, "INSERT OR REPLACE INTO settings (key, value) VALUES (?, ?)", -1, &st.s, nullptr) !=
      SQLITE_OK) {
    return Error("prepare put setting");
  }
  BindText(st.s, 1, key);
  BindText(st.s, 2, value);
  if (sqlite3_step(st.s) != SQLITE_DONE) return Error("put setting " + key);
  return absl::OkStatus();
}

}  // namespace cairn::daemon
