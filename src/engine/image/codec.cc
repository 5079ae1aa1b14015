#include "engine/image/codec.h"

#include <lz4.h>
#include <zstd.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace cairn::image {

absl::StatusOr<Compression> ParseCompression(const std::string& spec) {
  Compression c;
  if (spec == "lz4") {
    c.codec = PageBlock::LZ4;
    return c;
  }
  if (spec == "zstd") {
    c.codec = PageBlock::ZSTD;
    c.level = 3;
    return c;
  }
  if (spec.rfind("zstd:", 0) == 0) {
    c.codec = PageBlock::ZSTD;
    if (!absl::SimpleAtoi(spec.substr(5), &c.level) || c.level < 1 || c.level > ZSTD_maxCLevel()) {
      return absl::InvalidArgumentError(absl::StrCat("--compress ", spec, ": the zstd level must be 1..",
                                                     ZSTD_maxCLevel()));
    }
    return c;
  }
  return absl::InvalidArgumentError(absl::StrCat("--compress ", spec, ": give lz4, zstd or zstd:LEVEL"));
}

bool Compress(const Compression& c, const char* data, size_t len, std::string* out) {
  size_t got = 0;
  if (c.codec == PageBlock::LZ4) {
    out->resize(static_cast<size_t>(LZ4_compressBound(static_cast<int>(len))));
    int n = LZ4_compress_default(data, out->data(), static_cast<int>(len), static_cast<int>(out->size()));
    if (n <= 0) return false;
    got = static_cast<size_t>(n);
  } else if (c.codec == PageBlock::ZSTD) {
    out->resize(ZSTD_compressBound(len));
    size_t n = ZSTD_compress(out->data(), out->size(), data, len, c.level);
    if (ZSTD_isError(n)) return false;
    got = n;
  } else {
    return false;
  }
  if (got + 4096 > len) return false;
  out->resize(got);
  return true;
}

absl::Status Decompress(PageBlock::Codec codec, const char* stored, size_t stored_len, char* out, size_t len) {
  if (codec == PageBlock::LZ4) {
    int n = LZ4_decompress_safe(stored, out, static_cast<int>(stored_len), static_cast<int>(len));
    if (n < 0 || static_cast<size_t>(n) != len) return absl::DataLossError("lz4 block does not decompress to its size");
    return absl::OkStatus();
  }
  if (codec == PageBlock::ZSTD) {
    size_t n = ZSTD_decompress(out, len, stored, stored_len);
    if (ZSTD_isError(n) || n != len) return absl::DataLossError("zstd block does not decompress to its size");
    return absl::OkStatus();
  }
  return absl::DataLossError(absl::StrCat("unknown block codec ", static_cast<int>(codec)));
}

}  // namespace cairn::image
