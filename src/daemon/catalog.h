#pragma once
// The daemon's catalog: jobs, checkpoints and events in one SQLite file (STATE_DIR/catalog.db).
//
// A checkpoint row is created in state 'writing' before the engine starts and becomes 'complete'
// only after the engine's atomic commit (DIR.partial renamed to DIR) and a fsync of the catalog;
// a row still 'writing' when the daemon starts was interrupted by a crash: CleanUpInterrupted()
// removes its files and marks it 'failed'. So the catalog never calls a half-written checkpoint
// complete.
//
// Thread safety: every method may be called from any thread (one connection, serialized).

#include <sqlite3.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "daemon.pb.h"

namespace cairn::daemon {

class Catalog {
 public:
  // Opens (creating) the catalog at `path`, mode 0600. Fails when another daemon holds it.
  static absl::StatusOr<std::unique_ptr<Catalog>> Open(const std::string& path);
  ~Catalog();

  // Jobs: the whole api::Job is kept (spec and state); `name` is the key.
  absl::Status PutJob(const api::Job& job);
  absl::StatusOr<std::optional<api::Job>> GetJob(const std::string& name);
  absl::StatusOr<std::vector<api::Job>> ListJobs();
  absl::Status DeleteJob(const std::string& name);  // and its checkpoint rows

  absl::Status PutCheckpoint(const api::Checkpoint& c);
  absl::StatusOr<std::optional<api::Checkpoint>> GetCheckpoint(const std::string& id);
  // Oldest first; `job` empty: every job's.
  absl::StatusOr<std::vector<api::Checkpoint>> ListCheckpoints(const std::string& job);
  absl::Status DeleteCheckpoint(const std::string& id);
  // Saves `c` (now complete) and, in the same transaction, deletes the rows of the job's oldest
  // unpinned complete checkpoints beyond the newest `keep` (0: keep all) -- except those a kept
  // checkpoint builds on (its incremental parents, down to a full one). Returns the rows deleted,
  // whose files the caller removes: so no reader ever sees a row whose files are gone.
  absl::StatusOr<std::vector<api::Checkpoint>> CompleteCheckpoint(const api::Checkpoint& c, uint32_t keep);

  // Appends an event; returns it with its sequence number and time.
  absl::StatusOr<api::Event> AddEvent(const std::string& job, const std::string& kind, const std::string& detail);
  // Events after `after_seq` (all jobs when `job` is empty), oldest first, at most `limit`.
  absl::StatusOr<std::vector<api::Event>> Events(const std::string& job, uint64_t after_seq, int limit);

  // The newest event's sequence number (0 when there is none).
  absl::StatusOr<uint64_t> LastSeq();

  // Small named values of the daemon's own (e.g. the highest controller term heard of).
  absl::StatusOr<std::optional<std::string>> GetSetting(const std::string& key);
  absl::Status PutSetting(const std::string& key, const std::string& value);

  const std::string& path() const { return path_; }

 private:
  Catalog(std::string path, int lock_fd) : path_(std::move(path)), lock_fd_(lock_fd) {}
  absl::Status Exec(const char* sql);
  absl::Status PutCheckpointLocked(const api::Checkpoint& c);
  absl::StatusOr<std::vector<api::Checkpoint>> ListCheckpointsLocked(const std::string& job);
  absl::Status DeleteCheckpointLocked(const std::string& id);
  absl::Status Error(const std::string& what) const;

  std::string path_;
  int lock_fd_;
  std::mutex mu_;
  sqlite3* db_ = nullptr;
};

}  // namespace cairn::daemon
