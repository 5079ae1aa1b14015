#pragma once
// Where cairnd keeps checkpoints (docs/daemon.md, "Storage"). The engine always writes a
// checkpoint into a local directory first (STATE/checkpoints/JOB/ID, committed by rename); a
// store then makes it durable where it is meant to live:
//
//   local          it stays where the engine wrote it (the default)
//   dir:/PATH      copied to PATH/JOB/ID (e.g. an NFS mount other nodes share)
//   s3://B/PREFIX  uploaded to objects PREFIX/JOB/ID/FILE of bucket B (storage/s3_client.h)
//
// A stored checkpoint is committed by its manifest (kManifestFile: every file's size and XXH3),
// written last and removed first: a checkpoint without one is incomplete, whatever else is there.
// Put reads back what the store holds and checks it against the manifest before it answers; Fetch
// checks every fetched file's size and XXH3 before it commits the local copy by rename.
//
// Fault points (common/stop_points.h; tests/daemon/upload_restore_kill_test.cc cuts cairnd at
// each): upload-partial (Put: the first file is in the store), upload-multipart (s3: every part
// of a multipart upload sent, the upload not completed), upload-before-manifest (Put: every file
// in and read back, no manifest yet), fetch-partial (Fetch: the first file is in DIR.partial).
// The daemon adds upload-begun and upload-stored around Put (daemon_storage.cc).
//
// Thread safety: the methods may be called from several threads at once.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace cairn::daemon::storage {

class CheckpointStore {
 public:
  virtual ~CheckpointStore() = default;
  // "local", "dir:/mnt/ckpt", "s3://bucket/prefix".
  virtual std::string Describe() const = 0;
  // False for the local store: checkpoints stay in the state directory, Put and Fetch are no-ops.
  virtual bool Remote() const = 0;
  // Where job/id lives (or would live) in this store.
  virtual std::string LocationOf(const std::string& job, const std::string& id) const = 0;
  // Makes the committed local checkpoint `dir` durable in the store and checks what the store
  // then holds; returns its location. On failure, removes whatever of it reached the store (and
  // says so when even that fails).
  virtual absl::StatusOr<std::string> Put(const std::string& dir, const std::string& job, const std::string& id) = 0;
  // Brings the checkpoint at `location` into the local directory `dir` (which must not exist):
  // written to DIR.partial, verified against the manifest, then renamed.
  virtual absl::Status Fetch(const std::string& location, const std::string& dir) = 0;
  // Removes the checkpoint at `location`, its manifest first. A missing one is not an error.
  virtual absl::Status Remove(const std::string& location) = 0;
  // The ids of `job`'s complete checkpoints in the store (those with a manifest; whichever node
  // took them), in ascending order: cairnd's ids end in their UTC time, so the last is the newest.
  // The local store refuses (it holds one node's checkpoints, which its catalog lists).
  virtual absl::StatusOr<std::vector<std::string>> List(const std::string& job) = 0;
};

struct StoreOptions {
  std::string spec = "local";          // --storage: local | dir:/PATH | s3://BUCKET[/PREFIX]
  std::string s3_endpoint;             // --s3-endpoint (default https://s3.REGION.amazonaws.com)
  std::string s3_region = "us-east-1";
  std::string s3_credentials_file;     // --s3-credentials; else AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY
  int parallel = 4;                    // files (and parts of a file) sent at the same time
  uint64_t part_bytes = 16ull << 20;   // multipart part size
};

// Opens the store `opts.spec` names; the errors say which option is wrong and how to fix it.
absl::StatusOr<std::unique_ptr<CheckpointStore>> OpenStore(const StoreOptions& opts);

// The local store (checkpoints stay in the state directory).
std::unique_ptr<CheckpointStore> LocalStore();

}  // namespace cairn::daemon::storage
