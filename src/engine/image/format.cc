#include "engine/image/format.h"

#include <xxhash.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace cairn::image {

uint64_t Checksum(const void* data, size_t len) { return XXH3_64bits(data, len); }

uint64_t ChunkedChecksum(const void* data, size_t len, std::string* chunks) {
  const char* p = static_cast<const char*>(data);
  size_t n = (len + kChecksumChunk - 1) / kChecksumChunk;
  chunks->resize(n * sizeof(uint64_t));
  for (size_t i = 0; i < n; ++i) {
    uint64_t sum = XXH3_64bits(p + i * kChecksumChunk, std::min(kChecksumChunk, len - i * kChecksumChunk));
    for (size_t k = 0; k < sizeof sum; ++k) (*chunks)[i * 8 + k] = static_cast<char>(sum >> (8 * k));
  }
  return XXH3_64bits(chunks->data(), chunks->size());
}

uint32_t WriterFormatVersion() {
  if (const char* v = std::getenv("CAIRN_TEST_FORMAT_VERSION")) {
    uint32_t n = 0;
    if (absl::SimpleAtoi(v, &n)) return n;
  }
  return kFormatVersion;
}

FileHeader MakeHeader(const char (&magic)[8], uint64_t payload_len, uint64_t payload_xxh3) {
  FileHeader h{};
  std::memcpy(h.magic, magic, sizeof h.magic);
  h.version = WriterFormatVersion();
  h.flags = 0;
  h.payload_len = payload_len;
  h.payload_xxh3 = payload_xxh3;
  h.header_xxh3 = Checksum(&h, offsetof(FileHeader, header_xxh3));
  return h;
}

absl::Status CheckHeader(const FileHeader& h, const char (&magic)[8], absl::string_view what) {
  if (std::memcmp(h.magic, magic, sizeof h.magic) != 0) {
    return absl::DataLossError(absl::StrCat(what, ": not a cairn image file (bad magic)"));
  }
  if (Checksum(&h, offsetof(FileHeader, header_xxh3)) != h.header_xxh3) {
    return absl::DataLossError(absl::StrCat(what, ": header checksum mismatch (file is corrupt)"));
  }
  if (h.version > kFormatVersion) {
    return absl::FailedPreconditionError(absl::StrCat(
        what, ": image format version ", h.version, " is newer than this cairn supports (",
        kFormatVersion, "); upgrade cairn to read it"));
  }
  if (h.version == 0) {
    return absl::DataLossError(absl::StrCat(what, ": invalid format version 0"));
  }
  return absl::OkStatus();
}

}  // namespace cairn::image
