#pragma once
// `cairn page-server`: serves a checkpoint's page data (and its small metadata files) to a
// lazy restore on another machine (`cairn restore --lazy --page-server HOST:PORT`), over the
// protocol of page_protocol.h.
//
// Every connection must present the token (compared in constant time) before anything else;
// a wrong token is refused with a clear error and logged, and the server goes on serving.
// Each connection has its own thread: a page handler's fault requests and its prefetch stream
// travel on separate connections, so a fault never waits behind prefetched blocks.
// Blocks are sent as stored (sendfile from pages.img); the client verifies them.
//
// One-shot: once the restorer has said how many page handlers it started and each of them
// has said that every page is in, RunPageServer returns OK. Until then it serves (a failed
// restore may be retried against the same server).

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/status.h"

namespace cairn::lazy {

struct PageServerOptions {
  std::string dir;         // checkpoint directory (newest link of a chain)
  std::string listen;      // HOST:PORT; port 0 picks a free one
  std::string token_file;  // see common/token.h
  uint64_t max_rate = 0;   // bytes per second over all connections; 0: no limit
  // Called once with the address actually listened on ("127.0.0.1:40123").
  std::function<void(const std::string&)> on_listening;
};

// Serves until the restore has every page (OK) or an error; clear errors for a bad
// directory, an address in use, a missing or unsafe token file.
absl::Status RunPageServer(const PageServerOptions& opts);

}  // namespace cairn::lazy
