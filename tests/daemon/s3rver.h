// s3rver (npm, test-only, installed by scripts/install-deps.sh into tests/tools/node_modules): a
// real S3 server started on a loopback port with a temporary directory and one bucket.
//
// s3rver checks the access key id (S3RVER) but not SigV4 signatures themselves, so these tests
// prove the requests, the streaming and the multipart protocol, and that wrong credentials are
// refused with a clear error; not that a real S3 accepts libcurl's signature (see docs/daemon.md).
#pragma once

#include <sys/types.h>

#include <string>

#include <gtest/gtest.h>

#include "daemon/storage/s3_client.h"

namespace cairn::testing {

class S3rver {
 public:
  // The credentials s3rver accepts.
  static constexpr char kKey[] = "S3RVER";
  static constexpr char kSecret[] = "S3RVER";

  // Empty when node and s3rver are there; else why not (the test then skips with that message).
  static std::string Missing();

  S3rver(std::string dir, std::string bucket);
  ~S3rver();
  // Starts it and waits until it answers on its port.
  ::testing::AssertionResult Start();
  std::string endpoint() const { return "http://127.0.0.1:" + std::to_string(port_); }
  const std::string& bucket() const { return bucket_; }
  // A client's configuration for its bucket, with the credentials it accepts.
  daemon::storage::S3Config Config() const;
  // Multipart uploads started and neither completed nor aborted (s3rver keeps one directory
  // each under BUCKET/._S3rver_uploads).
  int PendingUploads() const;

 private:
  std::string dir_, bucket_;
  int port_ = 0;
  pid_t pid_ = -1;
};

}  // namespace cairn::testing
