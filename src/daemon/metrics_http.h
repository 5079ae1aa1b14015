#pragma once
// A minimal HTTP/1.0 server on a loopback port that answers `GET /metrics` with the daemon's
// Prometheus text exposition (version 0.0.4) and 404 to anything else. One connection at a time:
// scrapes are rare and small.

#include <atomic>
#include <functional>
#include <string>
#include <thread>

#include "absl/status/statusor.h"

namespace cairn::daemon {

class MetricsServer {
 public:
  // Listens on 127.0.0.1:`port` (0: any free port); `render` makes the body of each scrape.
  static absl::StatusOr<std::unique_ptr<MetricsServer>> Start(int port, std::function<std::string()> render);
  ~MetricsServer();  // stops the thread and closes the socket
  int port() const { return port_; }

 private:
  MetricsServer(int fd, int port, std::function<std::string()> render);
  void Loop();

  int fd_;
  int port_;
  std::function<std::string()> render_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace cairn::daemon
