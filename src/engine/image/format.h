#pragma once
// The on-disk layout of a checkpoint directory (docs/image-format.md is the reference).
//
//   DIR/checkpoint.meta  framed protobuf `cairn.image.Checkpoint`
//   DIR/pages.img        header page, then page-aligned blocks of memory contents
//   DIR/files.img        header page, then contents of files deleted while open
//
// Every file starts with a header carrying a magic, the format version and a checksum
// of the header itself; every payload (the metadata, each page block, each saved file)
// carries an XXH3-64 checksum recorded in the metadata.

#include <cstddef>
#include <cstdint>
#include <string>
#include "absl/strings/string_view.h"

#include "absl/status/statusor.h"

namespace cairn::image {

// 3 since session 21: an uncompressed block's `xxh3` may be the checksum of its chunks'
// checksums (PageBlock.chunk_xxh3), which an older cairn would take for damage.
inline constexpr uint32_t kFormatVersion = 3;
inline constexpr size_t kPageSize = 4096;
inline constexpr size_t kHeaderSize = 4096;  // data files: one page so blocks stay aligned
inline constexpr uint64_t kMaxBlockBytes = 64ull << 20;  // no block cairn writes is larger

inline constexpr char kMetaFile[] = "checkpoint.meta";
inline constexpr char kPagesFile[] = "pages.img";
inline constexpr char kFilesFile[] = "files.img";

inline constexpr char kMetaMagic[8] = {'C', 'A', 'I', 'R', 'N', 'C', 'K', 'P'};
inline constexpr char kPagesMagic[8] = {'C', 'A', 'I', 'R', 'N', 'P', 'G', 'S'};
inline constexpr char kFilesMagic[8] = {'C', 'A', 'I', 'R', 'N', 'F', 'L', 'S'};

// A file header as stored (little-endian, 40 bytes, zero-padded to the header size).
struct FileHeader {
  char magic[8];
  uint32_t version;
  uint32_t flags;          // reserved, 0
  uint64_t payload_len;    // meta: payload bytes; data files: 0
  uint64_t payload_xxh3;   // meta: XXH3 of the payload; data files: 0
  uint64_t header_xxh3;    // XXH3 of the 32 bytes above
};
static_assert(sizeof(FileHeader) == 40);

uint64_t Checksum(const void* data, size_t len);

// A page block's checksum in chunks (PageBlock.chunk_xxh3): each kChecksumChunk bytes of `data`
// checksummed alone into `chunks` (replaced), and the checksum of those returned.
inline constexpr size_t kChecksumChunk = 64 * 1024;
uint64_t ChunkedChecksum(const void* data, size_t len, std::string* chunks);

// Builds a header with its checksum filled in.
FileHeader MakeHeader(const char (&magic)[8], uint64_t payload_len, uint64_t payload_xxh3);

// The format version a writer stamps: kFormatVersion, or CAIRN_TEST_FORMAT_VERSION when set
// (a test hook to produce images "from the future").
uint32_t WriterFormatVersion();

// Checks magic, header checksum and version; `what` names the file in errors.
absl::Status CheckHeader(const FileHeader& h, const char (&magic)[8], absl::string_view what);

}  // namespace cairn::image
