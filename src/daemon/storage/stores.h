#pragma once
// The stores behind storage.h's OpenStore (one file each: local.cc, dir_store.cc, s3_store.cc).

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "daemon/storage/storage.h"

namespace cairn::daemon::storage {

// dir:/PATH: PATH must be an existing directory.
absl::StatusOr<std::unique_ptr<CheckpointStore>> DirStore(const std::string& root);
// s3://BUCKET[/PREFIX] with the endpoint, region and credentials of `opts`.
absl::StatusOr<std::unique_ptr<CheckpointStore>> S3Store(const std::string& url, const StoreOptions& opts);

// Removes DIR and DIR.partial.
void RemoveLocalTree(const std::string& dir);

}  // namespace cairn::daemon::storage
