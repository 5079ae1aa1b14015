#include "s3rver.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <thread>

#include "daemon_harness.h"

namespace cairn::testing {

namespace fs = std::filesystem;

std::string S3rver::Missing() {
  if (::access("/usr/bin/node", X_OK) != 0 && ::access("/usr/local/bin/node", X_OK) != 0) {
    return "node is not installed (run scripts/install-deps.sh)";
  }
  if (!fs::exists(S3RVER_JS)) return std::string(S3RVER_JS) + " is missing (run scripts/install-deps.sh: it installs s3rver 3.7.1)";
  return "";
}

S3rver::S3rver(std::string dir, std::string bucket) : dir_(std::move(dir)), bucket_(std::move(bucket)) {}

S3rver::~S3rver() {
  if (pid_ > 0) {
    ::kill(pid_, SIGKILL);
    WaitGone(pid_, std::chrono::seconds(5));
  }
}

::testing::AssertionResult S3rver::Start() {
  fs::create_directories(dir_ + "/data");
  WriteFile(dir_ + "/empty", "");
  std::string node = ::access("/usr/bin/node", X_OK) == 0 ? "/usr/bin/node" : "/usr/local/bin/node";
  for (int attempt = 0; attempt < 3; ++attempt) {
    port_ = FreeTcpPort();
    // s3rver's continuation tokens use a cipher OpenSSL 3 keeps in its legacy provider.
    pid_ = SpawnProgram({node, "--openssl-legacy-provider", S3RVER_JS, "-d", dir_ + "/data", "-a", "127.0.0.1", "-p", std::to_string(port_),
                         "--configure-bucket", bucket_},
                        dir_ + "/empty", dir_ + "/s3rver.log", dir_ + "/s3rver.log");
    bool up = WaitFor(
        [&] {
          if (!IsAlive(pid_)) return true;
          return ReadFile(dir_ + "/s3rver.log").find("listening") != std::string::npos;
        },
        std::chrono::seconds(20));
    if (up && IsAlive(pid_)) return ::testing::AssertionSuccess();
    ::kill(pid_, SIGKILL);
    WaitGone(pid_, std::chrono::seconds(5));
    pid_ = -1;
  }
  return ::testing::AssertionFailure() << "s3rver did not start: " << ReadFile(dir_ + "/s3rver.log");
}

int S3rver::PendingUploads() const {
  int n = 0;
  std::error_code ec;
  for (auto it = fs::directory_iterator(dir_ + "/data/" + bucket_ + "/._S3rver_uploads", ec);
       !ec && it != fs::directory_iterator(); it.increment(ec)) {
    n++;
  }
  return n;
}

daemon::storage::S3Config S3rver::Config() const {
  daemon::storage::S3Config c;
  c.endpoint = endpoint();
  c.bucket = bucket_;
  c.access_key = kKey;
  c.secret_key = kSecret;
  return c;
}

}  // namespace cairn::testing
