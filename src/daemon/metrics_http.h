#pragma once
// A minimal HTTP/1.0 server on a loopback port that answers `GET /metrics` with the daemon's
// Prometheus text exposition (version 0.0.4) and 404 to anything else. Each connection is served
// on a thread of its own (up to kMaxConnections at once; beyond, 503 at once), its whole request
// read within 5 s: an idle or slow connection never holds up another scrape (one served at a time
// made two idle connections delay a scrape by 3.7 s). Not Debian's cpp-httplib: its build links
// OpenSSL dynamically, a second copy beside the one cairnd links statically (link.static_deps).
//
// Every request must carry `Authorization: Bearer TOKEN` with the daemon's token (the one its
// gRPC TCP port takes, --token-file), compared in constant time; without it, or with another
// token, the answer is 401 and nothing else: loopback is not access control, any local user can
// connect. Prometheus sends it with `authorization: {credentials_file: FILE}`.

#include <atomic>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"

namespace cairn::daemon {

class MetricsServer {
 public:
  // Listens on 127.0.0.1:`port` (0: any free port); `render` makes the body of each scrape.
  // `token`: what a scrape must present (InvalidArgument when empty).
  static absl::StatusOr<std::unique_ptr<MetricsServer>> Start(int port, std::string token,
                                                              std::function<std::string()> render);
  ~MetricsServer();  // stops the thread and closes the socket
  int port() const { return port_; }

 private:
  MetricsServer(int fd, int port, std::string token, std::function<std::string()> render);
  static constexpr int kMaxConnections = 16;
  void Loop();
  // Reads one request from `c`, answers it, closes `c` (on a thread of its own).
  void Serve(int c);
  // The whole response to one request (its head and what follows, as read).
  std::string Answer(const std::string& request);

  int fd_;
  int port_;
  const std::string token_;
  std::function<std::string()> render_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable idle_;
  int active_ = 0;  // GUARDED_BY(mu_): connections being served
};

}  // namespace cairn::daemon
