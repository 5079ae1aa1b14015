#pragma once
// A small S3 client over libcurl: path-style requests (ENDPOINT/BUCKET/KEY) signed by libcurl's
// own AWS Signature V4 (CURLOPT_AWS_SIGV4; we never compute signatures ourselves). Objects are
// streamed from and to files, never held whole in memory; large files go up as multipart
// uploads whose parts are sent in parallel.
//
// Every error names the operation, the object (s3://BUCKET/KEY), and what S3 or the network
// said (the S3 error code and message, or curl's), so a person can tell wrong credentials from
// an unreachable endpoint.
//
// Thread safety: the methods may be called from several threads at once (one curl handle per
// request).

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace cairn::daemon::storage {

struct S3Config {
  std::string endpoint;   // http(s)://HOST[:PORT], no trailing slash
  std::string region = "us-east-1";
  std::string bucket;
  std::string access_key, secret_key;
  uint64_t part_bytes = 16ull << 20;   // multipart part size; files larger than this go up in parts
  int parallel = 4;                    // parts (of one file) sent at the same time
  int retries = 2;                     // extra tries after a network error or a 5xx answer
  long connect_timeout_s = 10;
};

struct S3Object {
  std::string key;
  uint64_t size = 0;
};

class S3Client {
 public:
  explicit S3Client(S3Config cfg);

  // Uploads the file at `path` as `key` (multipart when it is larger than part_bytes). On
  // failure an unfinished multipart upload is aborted.
  absl::Status PutFile(const std::string& key, const std::string& path);
  absl::Status PutBytes(const std::string& key, const std::string& data);
  // Downloads `key` into `path` (created 0600, truncated).
  absl::Status GetFile(const std::string& key, const std::string& path);
  absl::StatusOr<std::string> GetBytes(const std::string& key);
  // Every object whose key starts with `prefix` (follows continuation tokens).
  absl::StatusOr<std::vector<S3Object>> List(const std::string& prefix);
  // Deleting a missing object succeeds (as S3 does).
  absl::Status Delete(const std::string& key);

  const S3Config& config() const { return cfg_; }
  std::string Url(const std::string& key) const { return "s3://" + cfg_.bucket + "/" + key; }

 private:
  struct Response {
    long code = 0;
    std::string body;
    std::string etag;
  };
  struct Request;
  absl::StatusOr<Response> Perform(const Request& req, const std::string& what) const;
  absl::Status PutMultipart(const std::string& key, const std::string& path, uint64_t size);

  S3Config cfg_;
};

// "key" with each byte outside [A-Za-z0-9-._~/] percent-encoded (the S3 canonical form).
std::string UriEncode(const std::string& s, bool keep_slash);

}  // namespace cairn::daemon::storage
