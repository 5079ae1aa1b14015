#pragma once
// Writing and reading checkpoint directories.
//
// A checkpoint is written into DIR.partial/ and renamed to DIR only after every file is
// complete and fsynced, so DIR either holds a complete checkpoint or does not exist.
// A reader verifies the metadata's framing and checksum on open, and each block's
// checksum before its bytes are used.

#include <cstdint>
#include <memory>
#include <string>

#include "absl/strings/string_view.h"

#include "absl/status/statusor.h"
#include "common/unique_fd.h"
#include "engine/image/codec.h"
#include "engine/image/format.h"
#include "engine/image/seal.h"
#include "image.pb.h"

namespace cairn::image {

class ImageWriter {
 public:
  // Starts a checkpoint that will become `dir`. Fails if `dir` exists and is not an empty
  // directory. A stale `dir`.partial from an earlier failed run is removed.
  static absl::StatusOr<std::unique_ptr<ImageWriter>> Create(const std::string& dir);
  ~ImageWriter();  // Aborts unless Commit() succeeded.

  // Appends `len` bytes (a multiple of the page size) holding the pages at `vaddr`.
  // Not thread-safe: call from one thread at a time.
  absl::StatusOr<PageBlock> AppendPages(uint64_t vaddr, const void* data, size_t len);
  // Same, with the block's checksum already computed by the caller: ChunkedChecksum() with its
  // chunks (the form written now), or Checksum() with none.
  absl::StatusOr<PageBlock> AppendPages(uint64_t vaddr, const void* data, size_t len, uint64_t xxh3,
                                        std::string chunks = {});

  // Start writing pages.img back to the disk while pages are still being appended, so that
  // Commit's fsync waits only for the tail: for a dump that kills its processes after the
  // commit. A dump that lets them run before the commit leaves the writeback to the fsync:
  // early writeback throttles the copy to the disk's speed and so lengthens the freeze.
  // Off by default.
  void set_early_writeback(bool on) { early_writeback_ = on; }

  // Seal the checkpoint with `key` at the commit (seal.h); null: leave it unsealed. The key
  // must outlive the writer. Call before appending: pages.img is MACed as it is written.
  absl::Status SetSealKey(const ImageKey* key);

  // How page blocks should be compressed (dump --compress); set by the dump driver.
  const Compression& compression() const { return compression_; }
  void set_compression(const Compression& c) { compression_ = c; }

  // Appends a compressed block: `stored_len` bytes holding `len` bytes of pages at `vaddr`
  // once decompressed with `codec`; `xxh3` is the checksum of the stored bytes.
  absl::StatusOr<PageBlock> AppendStored(uint64_t vaddr, uint64_t len, const void* stored, size_t stored_len,
                                         uint64_t xxh3, PageBlock::Codec codec);

  // Where bytes appended to files.img went.
  struct Blob {
    uint64_t offset = 0, size = 0, xxh3 = 0;
  };
  // Appends only the data of the `size`-byte file `fd` (its extents, found with
  // SEEK_DATA/SEEK_HOLE), and describes them, the file's size, owner and mode in `saved`.
  absl::StatusOr<Blob> AppendSparseFile(int fd, uint64_t size, const std::string& what, SavedFile* saved);
  // Appends `data` to files.img (e.g. the bytes queued in a pipe).
  absl::StatusOr<Blob> AppendBytes(absl::string_view data);

  // Writes the metadata, fsyncs everything and renames DIR.partial to DIR.
  absl::Status Commit(Checkpoint& meta);

  // Removes DIR.partial. Idempotent.
  void Abort();

 private:
  ImageWriter(std::string dir, std::string partial) : dir_(std::move(dir)), partial_(std::move(partial)) {}
  // Appends the bytes of `fd` in the extents of `layout`, one after the other.
  absl::StatusOr<Blob> AppendExtents(int fd, const SavedFile& layout, const std::string& what);

  std::string dir_, partial_;
  UniqueFd pages_, files_;
  uint64_t pages_off_ = kHeaderSize;
  uint64_t files_off_ = kHeaderSize;
  bool early_writeback_ = false;
  uint64_t writeback_from_ = 0;  // pages.img below this has been handed to writeback
  bool committed_ = false;
  Compression compression_;
  const ImageKey* seal_key_ = nullptr;
  std::unique_ptr<PagesSealer> sealer_;  // with a seal key: follows pages.img as it grows

  absl::Status WriteAt(const char* p, size_t len, uint64_t off);
  // With early writeback: starts writeback of what was appended to pages.img since the last
  // call, once there is enough of it.
  void StartWriteback();
};

// Where a reader's stored page bytes come from when pages.img is not on this machine: a page
// server (lazy/page_client.h). Blocks read through it are verified as local ones are.
class PageSource {
 public:
  virtual ~PageSource() = default;
  // Reads `len` stored bytes of pages.img at `offset` into `buf`. Thread-safe.
  virtual absl::Status Read(uint64_t offset, uint64_t len, char* buf) = 0;
  // Names where the bytes come from in messages ("page server 127.0.0.1:7070").
  virtual std::string Describe() const = 0;
};

class ImageReader {
 public:
  // Opens `dir`, checks every file's header and size, decodes and verifies the metadata.
  static absl::StatusOr<std::unique_ptr<ImageReader>> Open(const std::string& dir);
  // A reader of a checkpoint whose files are elsewhere: `meta_file` holds the bytes of its
  // checkpoint.meta, `files_fd` its files.img (e.g. a memfd), and its page data comes from
  // `pages`. `label` names it in messages. Verified as Open verifies.
  static absl::StatusOr<std::unique_ptr<ImageReader>> FromParts(const std::string& label, const std::string& meta_file,
                                                                UniqueFd files_fd, std::unique_ptr<PageSource> pages);
  ~ImageReader();

  const Checkpoint& meta() const { return meta_; }
  // Where page data comes from when not from DIR/pages.img (FromParts), else null.
  PageSource* page_source() const { return page_source_.get(); }
  const std::string& dir() const { return dir_; }

  // Reads the block's bytes into `buf` (at least b.length() bytes) and verifies them.
  // Thread-safe.
  absl::Status ReadBlock(const PageBlock& b, char* buf) const;
  absl::Status VerifyBlock(const PageBlock& b) const;
  // Checks bytes of an uncompressed block `b` obtained elsewhere (a page server's stream)
  // against its checksum, with the same error ReadBlock gives.
  absl::Status CheckBlock(const PageBlock& b, const char* data) const;

  // Whether chunk `k` of block `b` can be read alone (an uncompressed block with chunk
  // checksums, PageBlock.chunk_xxh3), and reading it: its bytes into `buf` (at least
  // kChecksumChunk), verified against its own checksum, whose list is verified against the
  // block's. Returns the chunk's length.
  static bool HasChunks(const PageBlock& b);
  absl::StatusOr<uint64_t> ReadChunk(const PageBlock& b, uint64_t k, char* buf) const;

  // The saved content of a file deleted while open (or of a pipe's or socket's queue),
  // verified; "" when this record holds none (a file's content is saved with only one of
  // the records that refer to it).
  absl::StatusOr<std::string> FileContent(const Fd& fd) const;
  // The saved content of a deleted file mapped shared, verified.
  absl::StatusOr<std::string> FileContent(const Vma& v) const;
  // The saved content of a System V shared memory segment, verified.
  absl::StatusOr<std::string> FileContent(const SysvShm& s) const;
  // A saved TCP connection's send queue (written, not yet acknowledged) and receive queue
  // (received, not yet read), verified.
  absl::StatusOr<std::string> SendQueue(const TcpConnection& t) const;
  absl::StatusOr<std::string> ReceiveQueue(const TcpConnection& t) const;

  // Verifies every page block and file content; the first failure names the block.
  // Only this image, not its parents.
  absl::Status VerifyAll() const;

  // The image this incremental checkpoint builds on (opened by OpenChain), or null.
  const ImageReader* parent() const { return parent_.get(); }
  void set_parent(std::unique_ptr<ImageReader> parent) { parent_ = std::move(parent); }

 private:
  ImageReader() = default;
  absl::StatusOr<std::string> Blob(uint64_t offset, uint64_t size, uint64_t xxh3, const std::string& what) const;
  absl::Status ParseMeta(const std::string& meta_file, const std::string& what);
  absl::Status ReadStored(char* buf, uint64_t len, uint64_t offset) const;
  // Whether block `b`'s stored bytes lie inside pages.img (uncompressed ones page-aligned).
  absl::Status CheckPlace(const PageBlock& b) const;
  std::string dir_;
  std::unique_ptr<PageSource> page_source_;
  Checkpoint meta_;
  UniqueFd pages_fd_, files_fd_;
  size_t pages_size_ = 0;
  size_t files_size_ = 0;
  std::unique_ptr<ImageReader> parent_;
};

}  // namespace cairn::image
