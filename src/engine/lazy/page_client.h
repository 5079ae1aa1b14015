#pragma once
// The restoring side of `cairn page-server` (page_server.h): a restore or a page handler
// connected to the server, reading the checkpoint's metadata and page data from it.
//
// OpenImage gives an ImageReader chain whose files are fetched from the server (metadata
// and files.img: small) and whose page data is read on demand (image::PageSource), each
// block verified with its checksum as a local one is. A page handler also starts a
// read-ahead stream (ReadAhead) on a second connection: the blocks it will prefetch, in its
// order, requested a few at a time so that the server's sending overlaps the handler's
// copying; faults go on the first connection and never wait behind the stream.
//
// A broken connection, a server that stops answering (ReceiveTimeout) or a refused token is
// an error naming the server. Thread-safe.

#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "common/unique_fd.h"
#include "engine/image/image.h"

namespace cairn::lazy {

// Where a restore takes its checkpoint from: a local directory, or a page server.
struct ImageSource {
  std::string dir;         // local checkpoint directory
  std::string server;      // HOST:PORT of `cairn page-server` (then `dir` is unused)
  std::string token_file;  // the server's token
  bool remote() const { return !server.empty(); }
};

class PageClient {
 public:
  // Connects and presents the token; `who` is 0 for the restorer, else the image pid of the
  // process whose page handler this is.
  static absl::StatusOr<std::shared_ptr<PageClient>> Connect(const std::string& server, const std::string& token_file,
                                                             uint64_t who);
  ~PageClient();

  const std::string& server() const { return server_; }
  std::string Describe() const { return "page server " + server_; }

  // Fetches every link's metadata and files.img and returns the chain (newest first), its
  // page data read through this client.
  absl::StatusOr<std::unique_ptr<image::ImageReader>> OpenChain(const std::shared_ptr<PageClient>& self);

  // Reads `len` stored bytes at `offset` of link `link`'s pages.img.
  absl::Status Read(uint32_t link, uint64_t offset, uint64_t len, char* buf);

  // Streams these ranges (link, offset, len), in this order, on a second connection, a few
  // blocks ahead of the reader; a Read of one that is received or on its way takes it from
  // the stream, of one not yet asked for goes on the first connection (a fault far ahead).
  struct Range {
    uint32_t link = 0;
    uint64_t offset = 0, len = 0;
  };
  absl::Status ReadAhead(std::vector<Range> plan);
  // The reader will not want the ranges streamed before `r` (its prefetch has passed them).
  void SkipTo(const Range& r);
  // Like Read of a streamed range, without a copy: when `r` is received or on its way, swaps
  // its buffer (at least r.len bytes) into *buf, takes the old one back, and returns true;
  // false when it must be read (Read). Unverified bytes: the caller checks them.
  bool Take(const Range& r, std::vector<char>* buf);

  // Tells the server this side is finished (restorer: `handlers` page handlers follow).
  absl::Status Done(uint64_t handlers);

  // The link index of `img` in the chain this client opened, or -1.
  int LinkOf(const image::ImageReader* img) const;

 private:
  PageClient(std::string server, std::string token, uint64_t who) : server_(std::move(server)), token_(std::move(token)), who_(who) {}
  absl::StatusOr<UniqueFd> Dial(uint32_t* links);
  absl::Status Request(int fd, uint32_t op, uint32_t link, uint32_t kind, uint64_t offset, uint64_t arg,
                       std::string* small, char* into, uint64_t into_len);
  void StreamLoop();
  absl::Status Fail(const absl::Status& s) const;

  const std::string server_, token_;
  const uint64_t who_;
  uint32_t links_ = 0;
  std::vector<const image::ImageReader*> chain_;

  std::mutex mu_;  // the first connection: one request at a time
  UniqueFd fd_;

  // The read-ahead stream.
  std::mutex smu_;
  std::condition_variable scv_;
  UniqueFd sfd_;
  std::vector<Range> plan_;
  std::map<std::tuple<uint32_t, uint64_t, uint64_t>, size_t> plan_index_;
  enum : char { kNotAsked, kOnItsWay, kReady, kGone };
  std::vector<char> state_;                    // GUARDED_BY(smu_): per plan entry
  std::map<size_t, std::vector<char>> ready_;  // GUARDED_BY(smu_): received, not yet taken
  std::vector<std::vector<char>> spare_;       // GUARDED_BY(smu_): buffers to reuse (no zeroing, no page faults)
  size_t consumed_ = 0;                        // GUARDED_BY(smu_): entries before this are not wanted
  size_t next_send_ = 0;                       // GUARDED_BY(smu_): the next entry to ask the server for
  absl::Status stream_error_;                  // GUARDED_BY(smu_)
  bool stop_ = false;                          // GUARDED_BY(smu_)
  std::thread streamer_;
  uint64_t stream_hits_ = 0, direct_reads_ = 0;  // GUARDED_BY(smu_), for the log
  double stream_wait_s_ = 0;                     // GUARDED_BY(smu_)
};

// Opens the checkpoint of `src`: OpenChain of the directory, or through a page server (the
// reader then keeps its client alive). `who` as for PageClient::Connect.
absl::StatusOr<std::unique_ptr<image::ImageReader>> OpenImage(const ImageSource& src, uint64_t who);

// The client behind a reader that OpenImage opened through a page server, or null.
PageClient* ClientOf(const image::ImageReader& img);

}  // namespace cairn::lazy
