#pragma once
// The wire protocol between `cairn page-server` and a lazy restore (page_server.h,
// page_client.h): small framed binary messages over one TCP connection each way of use.
//
// Every message is a 40-byte header (little-endian, this is x86-64 and arm64 only), then
// `len` bytes of payload. A client opens with kHello carrying the protocol version and the
// token as payload; the server answers kOk (with the number of links of the checkpoint's
// chain in `link`) or kError (payload: why) and closes. Then requests, answered in order on
// the same connection:
//   kGetFile  link, kind            -> kOk + the file's bytes (checkpoint.meta or files.img)
//   kRead     link, offset, arg=N   -> kOk + N stored bytes of that link's pages.img
//   kDone     offset=who, arg=count -> kOk (who 0: the restorer, `count` handlers will follow;
//                                      else a page handler whose pages are all in)
// Page data crosses the wire as stored (compressed blocks stay compressed); the client
// verifies each block's XXH3 checksum from the metadata, so corruption anywhere between the
// server's disk and the restored memory is caught where it matters.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace cairn::lazy::wire {

inline constexpr char kMagic[4] = {'C', 'P', 'S', '1'};
inline constexpr uint32_t kVersion = 1;
inline constexpr uint64_t kMaxToken = 4096;

enum Op : uint32_t { kHello = 1, kGetFile = 2, kRead = 3, kDone = 4, kOk = 100, kError = 101 };
enum FileKind : uint32_t { kMetaFile = 0, kFilesFile = 1 };

struct Header {
  char magic[4];
  uint32_t op;
  uint32_t link;
  uint32_t kind;
  uint64_t offset;
  uint64_t arg;
  uint64_t len;  // payload bytes that follow
};
static_assert(sizeof(Header) == 40);

Header MakeHeader(Op op, uint32_t link = 0, uint32_t kind = 0, uint64_t offset = 0, uint64_t arg = 0,
                  uint64_t len = 0);

// Splits "HOST:PORT" or "[V6ADDR]:PORT" and resolves it (numeric or by name); `passive` for
// a listener. Clear error for a malformed address or an unknown host.
absl::StatusOr<std::vector<char>> ResolveHostPort(const std::string& host_port, bool passive);

// Sends all of `len` bytes (MSG_NOSIGNAL). `peer` names the other side in errors.
absl::Status SendAll(int fd, const void* data, size_t len, const std::string& peer);
// Sends a header and its payload; with a null payload, only the header (the caller sends
// the `len` bytes it announces).
absl::Status SendMessage(int fd, const Header& h, const void* payload, const std::string& peer);
// Receives exactly `len` bytes; a closed connection or a receive timeout is an error naming `peer`.
absl::Status RecvAll(int fd, void* data, size_t len, const std::string& peer);
// Receives a header and checks its magic.
absl::Status RecvHeader(int fd, Header* h, const std::string& peer);

}  // namespace cairn::lazy::wire
