#pragma once
// Block compression for `cairn dump --compress lz4|zstd[:LEVEL]` (liblz4, libzstd).

#include <cstddef>
#include <string>

#include "absl/status/statusor.h"
#include "image.pb.h"

namespace cairn::image {

struct Compression {
  PageBlock::Codec codec = PageBlock::NONE;
  int level = 0;  // zstd: 1..19 (default 3); lz4: ignored
};

// Parses "lz4", "zstd" or "zstd:LEVEL".
absl::StatusOr<Compression> ParseCompression(const std::string& spec);

// Compresses `len` bytes into `out`. False when compressing would not save at least one
// page's worth (the block is then stored as it is).
bool Compress(const Compression& c, const char* data, size_t len, std::string* out);

// Decompresses `stored` (as written by Compress with `codec`) into exactly `len` bytes.
absl::Status Decompress(PageBlock::Codec codec, const char* stored, size_t stored_len, char* out, size_t len);

}  // namespace cairn::image
