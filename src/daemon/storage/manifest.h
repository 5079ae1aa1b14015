#pragma once
// The manifest of a stored checkpoint: what files it has, each one's size and XXH3-64. Written
// last into the store (its presence commits the checkpoint) and checked on the way back.
//
// Text, one line per file after a header:
//   cairn-checkpoint-manifest 1
//   job JOB
//   id ID
//   file SIZE XXH3HEX RELATIVE/PATH

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace cairn::daemon::storage {

inline constexpr char kManifestFile[] = "cairn-manifest";
// The job's spec (api::JobSpec, binary), stored beside the image so that another node's daemon
// can restore a job it has never seen.
inline constexpr char kJobSpecFile[] = "cairnd-job.pb";
// The job's directory on the node that took it (its logs are there, and its descriptors name
// them): another node's restore makes them name its own (Daemon::AdoptForThisNode).
inline constexpr char kJobDirFile[] = "cairnd-job-dir";

struct ManifestFile {
  std::string path;  // relative to the checkpoint directory
  uint64_t size = 0;
  uint64_t xxh3 = 0;
};

struct Manifest {
  std::string job, id;
  std::vector<ManifestFile> files;

  std::string Serialize() const;
  // `what` names the manifest in errors.
  static absl::StatusOr<Manifest> Parse(const std::string& text, const std::string& what);
};

// The manifest of a local checkpoint directory: every regular file under it (but a manifest),
// hashed as it is read.
absl::StatusOr<Manifest> ManifestOf(const std::string& dir, const std::string& job, const std::string& id);

// XXH3-64 of a file, read in 1 MiB pieces.
absl::StatusOr<uint64_t> HashFile(const std::string& path, uint64_t* size);

// Checks that `dir` holds every file of `m` with its size and XXH3; extra files are refused too.
absl::Status VerifyDir(const std::string& dir, const Manifest& m);

}  // namespace cairn::daemon::storage
