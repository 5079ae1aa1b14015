#include "engine/image/image.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <xxhash.h>

#include <cstring>
#include <filesystem>
#include <vector>

#include "absl/strings/str_format.h"
#include "common/file_util.h"
#include "common/status.h"
#include "engine/image/format.h"

namespace cairn::image {
namespace {

std::string ParentDir(const std::string& dir) {
  std::filesystem::path p = std::filesystem::absolute(dir).lexically_normal();
  if (!p.has_filename()) p = p.parent_path();
  return p.parent_path().string();
}

absl::Status WriteHeader(int fd, const FileHeader& h, const std::string& what) {
  std::vector<char> page(kHeaderSize, 0);
  std::memcpy(page.data(), &h, sizeof h);
  if (::pwrite(fd, page.data(), page.size(), 0) != static_cast<ssize_t>(page.size())) {
    return ErrnoStatus("write header of " + what);
  }
  return absl::OkStatus();
}

absl::StatusOr<UniqueFd> OpenFile(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return ErrnoStatus("open " + path);
  return fd;
}

absl::StatusOr<UniqueFd> CheckDataFile(UniqueFd fd, const std::string& path, const char (&magic)[8],
                                       size_t expected_size, size_t* size_out) {
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return ErrnoStatus("stat " + path);
  FileHeader h{};
  if (static_cast<size_t>(st.st_size) < kHeaderSize) {
    return absl::DataLossError(path + ": file is truncated (no header)");
  }
  std::vector<char> page(kHeaderSize);
  RETURN_IF_ERROR(PreadAll(fd.get(), page.data(), page.size(), 0, path));
  std::memcpy(&h, page.data(), sizeof h);
  RETURN_IF_ERROR(CheckHeader(h, magic, path));
  for (size_t i = sizeof h; i < page.size(); ++i) {
    if (page[i] != 0) return absl::DataLossError(path + ": header padding is not zero (file is corrupt)");
  }
  if (static_cast<size_t>(st.st_size) != expected_size) {
    return absl::DataLossError(absl::StrFormat("%s: size is %d bytes, the metadata says %d (truncated or damaged)",
                                               path, st.st_size, expected_size));
  }
  *size_out = static_cast<size_t>(st.st_size);
  return fd;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ImageWriter>> ImageWriter::Create(const std::string& dir) {
  std::error_code ec;
  if (std::filesystem::exists(dir, ec)) {
    if (!std::filesystem::is_directory(dir, ec) || !std::filesystem::is_empty(dir, ec)) {
      return absl::AlreadyExistsError(absl::StrCat(
          "checkpoint directory ", dir, " already exists and is not empty; choose a new --dir or remove it"));
    }
  }
  std::string partial = dir;
  while (partial.size() > 1 && partial.back() == '/') partial.pop_back();
  partial += ".partial";
  std::filesystem::remove_all(partial, ec);
  if (::mkdir(partial.c_str(), 0700) != 0) return ErrnoStatus("mkdir " + partial);
  std::unique_ptr<ImageWriter> w(new ImageWriter(dir, partial));
  w->pages_.Reset(::open((partial + "/" + kPagesFile).c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
  if (!w->pages_.valid()) return ErrnoStatus("create " + partial + "/" + kPagesFile);
  w->files_.Reset(::open((partial + "/" + kFilesFile).c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
  if (!w->files_.valid()) return ErrnoStatus("create " + partial + "/" + kFilesFile);
  return w;
}

ImageWriter::~ImageWriter() {
  if (!committed_) Abort();
}

void ImageWriter::Abort() {
  pages_.Reset();
  files_.Reset();
  std::error_code ec;
  std::filesystem::remove_all(partial_, ec);
}

absl::StatusOr<PageBlock> ImageWriter::AppendPages(uint64_t vaddr, const void* data, size_t len) {
  std::string chunks;
  uint64_t sum = ChunkedChecksum(data, len, &chunks);
  return AppendPages(vaddr, data, len, sum, std::move(chunks));
}

absl::Status ImageWriter::WriteAt(const char* p, size_t left, uint64_t off) {
  while (left > 0) {
    ssize_t n = ::pwrite(pages_.get(), p, left, static_cast<off_t>(off));
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus(absl::StrCat("write ", partial_, "/", kPagesFile));
    }
    p += n;
    off += static_cast<uint64_t>(n);
    left -= static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

absl::StatusOr<PageBlock> ImageWriter::AppendPages(uint64_t vaddr, const void* data, size_t len, uint64_t xxh3,
                                                   std::string chunks) {
  // Uncompressed blocks stay page-aligned (compressed ones before may have left a gap).
  pages_off_ = (pages_off_ + kPageSize - 1) / kPageSize * kPageSize;
  PageBlock b;
  b.set_vaddr(vaddr);
  b.set_length(len);
  b.set_file_offset(pages_off_);
  b.set_xxh3(xxh3);
  if (!chunks.empty()) b.set_chunk_xxh3(std::move(chunks));
  RETURN_IF_ERROR(WriteAt(static_cast<const char*>(data), len, pages_off_));
  pages_off_ += len;
  if (sealer_) sealer_->Advance(pages_off_);
  StartWriteback();
  return b;
}

absl::Status ImageWriter::SetSealKey(const ImageKey* key) {
  seal_key_ = key;
  if (key == nullptr) return absl::OkStatus();
  // The header now (Commit writes the same bytes again), so that the MAC can follow the
  // file from its first byte.
  RETURN_IF_ERROR(WriteHeader(pages_.get(), MakeHeader(kPagesMagic, 0, 0), kPagesFile));
  ASSIGN_OR_RETURN(sealer_, PagesSealer::Start(*key, pages_.get(), partial_ + "/" + kPagesFile));
  sealer_->Advance(pages_off_);
  return absl::OkStatus();
}

void ImageWriter::StartWriteback() {
  constexpr uint64_t kWritebackChunk = 8 << 20;
  if (!early_writeback_ || pages_off_ - writeback_from_ < kWritebackChunk) return;
  // Asynchronous (no wait for completion); a no-op on tmpfs. A failure here only means
  // the fsync at Commit does all the work, as it would without this.
  (void)::sync_file_range(pages_.get(), static_cast<off_t>(writeback_from_),
                          static_cast<off_t>(pages_off_ - writeback_from_), SYNC_FILE_RANGE_WRITE);
  writeback_from_ = pages_off_;
}

absl::StatusOr<PageBlock> ImageWriter::AppendStored(uint64_t vaddr, uint64_t len, const void* stored,
                                                    size_t stored_len, uint64_t xxh3, PageBlock::Codec codec) {
  PageBlock b;
  b.set_vaddr(vaddr);
  b.set_length(len);
  b.set_file_offset(pages_off_);
  b.set_xxh3(xxh3);
  b.set_codec(codec);
  b.set_stored_length(stored_len);
  RETURN_IF_ERROR(WriteAt(static_cast<const char*>(stored), stored_len, pages_off_));
  pages_off_ += stored_len;
  if (sealer_) sealer_->Advance(pages_off_);
  StartWriteback();
  return b;
}

absl::StatusOr<ImageWriter::Blob> ImageWriter::AppendExtents(int fd, const SavedFile& layout, const std::string& what) {
  Blob blob;
  blob.offset = files_off_;
  std::vector<char> buf(1 << 20);
  XXH3_state_t* st = XXH3_createState();
  XXH3_64bits_reset(st);
  uint64_t done = 0;  // bytes appended
  for (const Extent& e : layout.extents()) {
    for (uint64_t at = 0; at < e.length();) {
      size_t want = static_cast<size_t>(std::min<uint64_t>(buf.size(), e.length() - at));
      absl::Status s = PreadAll(fd, buf.data(), want, static_cast<off_t>(e.offset() + at), what);
      if (!s.ok()) {
        XXH3_freeState(st);
        return s;
      }
      XXH3_64bits_update(st, buf.data(), want);
      if (::pwrite(files_.get(), buf.data(), want, static_cast<off_t>(files_off_ + done)) !=
          static_cast<ssize_t>(want)) {
        XXH3_freeState(st);
        return ErrnoStatus(absl::StrCat("write ", partial_, "/", kFilesFile));
      }
      at += want;
      done += want;
    }
  }
  blob.size = done;
  blob.xxh3 = XXH3_64bits_digest(st);
  XXH3_freeState(st);
  files_off_ += done;
  return blob;
}

absl::StatusOr<ImageWriter::Blob> ImageWriter::AppendSparseFile(int fd, uint64_t size, const std::string& what,
                                                                SavedFile* saved) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return ErrnoStatus("stat " + what);
  saved->set_sparse(true);
  saved->set_size(size);
  saved->set_uid(st.st_uid);
  saved->set_gid(st.st_gid);
  saved->set_mode(st.st_mode);
  saved->set_atime_ns(st.st_atim.tv_sec * 1000000000LL + st.st_atim.tv_nsec);
  saved->set_mtime_ns(st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec);
  saved->clear_extents();
  for (off_t at = 0; static_cast<uint64_t>(at) < size;) {
    off_t data = ::lseek(fd, at, SEEK_DATA);
    if (data < 0 && errno == ENXIO) break;  // holes to the end
    if (data < 0) return ErrnoStatus("lseek(SEEK_DATA) in " + what);
    off_t hole = ::lseek(fd, data, SEEK_HOLE);
    if (hole < 0) return ErrnoStatus("lseek(SEEK_HOLE) in " + what);
    hole = std::min<off_t>(hole, static_cast<off_t>(size));
    if (hole <= data) break;
    Extent* e = saved->add_extents();
    e->set_offset(static_cast<uint64_t>(data));
    e->set_length(static_cast<uint64_t>(hole - data));
    at = hole;
  }
  return AppendExtents(fd, *saved, what);
}

absl::StatusOr<ImageWriter::Blob> ImageWriter::AppendBytes(absl::string_view data) {
  Blob blob{files_off_, data.size(), Checksum(data.data(), data.size())};
  if (!data.empty() && ::pwrite(files_.get(), data.data(), data.size(), static_cast<off_t>(files_off_)) !=
                           static_cast<ssize_t>(data.size())) {
    return ErrnoStatus(absl::StrCat("write ", partial_, "/", kFilesFile));
  }
  files_off_ += data.size();
  return blob;
}

absl::Status ImageWriter::Commit(Checkpoint& meta) {
  meta.set_format_version(WriterFormatVersion());
  meta.set_pages_bytes(pages_off_);
  meta.set_files_bytes(files_off_);
  RETURN_IF_ERROR(WriteHeader(pages_.get(), MakeHeader(kPagesMagic, 0, 0), kPagesFile));
  RETURN_IF_ERROR(WriteHeader(files_.get(), MakeHeader(kFilesMagic, 0, 0), kFilesFile));
  if (::ftruncate(pages_.get(), static_cast<off_t>(pages_off_)) != 0) return ErrnoStatus("truncate pages.img");
  if (::ftruncate(files_.get(), static_cast<off_t>(files_off_)) != 0) return ErrnoStatus("truncate files.img");

  std::string payload;
  if (!meta.SerializeToString(&payload)) return absl::InternalError("cannot encode checkpoint metadata");
  FileHeader h = MakeHeader(kMetaMagic, payload.size(), Checksum(payload.data(), payload.size()));
  std::string meta_path = partial_ + "/" + kMetaFile;
  UniqueFd mf(::open(meta_path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
  if (!mf.valid()) return ErrnoStatus("create " + meta_path);
  RETURN_IF_ERROR(WriteAll(mf.get(), absl::string_view(reinterpret_cast<const char*>(&h), sizeof h), meta_path));
  RETURN_IF_ERROR(WriteAll(mf.get(), payload, meta_path));
  if (seal_key_ != nullptr) RETURN_IF_ERROR(SealImage(partial_, *seal_key_, sealer_.get()));

  for (int fd : {pages_.get(), files_.get(), mf.get()}) {
    if (::fsync(fd) != 0) return ErrnoStatus("fsync checkpoint file in " + partial_);
  }
  RETURN_IF_ERROR(SyncDir(partial_));
  // rename(2) also atomically replaces an empty directory the user created for us.
  if (::rename(partial_.c_str(), dir_.c_str()) != 0) {
    return ErrnoStatus(absl::StrCat("rename ", partial_, " to ", dir_));
  }
  committed_ = true;
  return SyncDir(ParentDir(dir_));
}

absl::Status ImageReader::ParseMeta(const std::string& file, const std::string& what) {
  FileHeader h{};
  if (file.size() < sizeof h) return absl::DataLossError(what + ": file is truncated (no header)");
  std::memcpy(&h, file.data(), sizeof h);
  RETURN_IF_ERROR(CheckHeader(h, kMetaMagic, what));
  if (static_cast<uint64_t>(file.size()) != sizeof h + h.payload_len) {
    return absl::DataLossError(absl::StrFormat("%s: size is %d bytes, the header says %d (truncated or damaged)",
                                               what, file.size(), sizeof h + h.payload_len));
  }
  absl::string_view payload(file.data() + sizeof h, h.payload_len);
  if (Checksum(payload.data(), payload.size()) != h.payload_xxh3) {
    return absl::DataLossError(what + ": metadata checksum mismatch (file is corrupt)");
  }
  if (!meta_.ParseFromArray(payload.data(), static_cast<int>(payload.size()))) {
    return absl::DataLossError(what + ": metadata does not decode");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<ImageReader>> ImageReader::Open(const std::string& dir) {
  std::unique_ptr<ImageReader> r(new ImageReader());
  r->dir_ = dir;
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) {
    if (errno == ENOENT) {
      return absl::NotFoundError(absl::StrCat("checkpoint directory ", dir, " does not exist"));
    }
    return ErrnoStatus("stat " + dir);
  }
  if (!S_ISDIR(st.st_mode)) return absl::InvalidArgumentError(dir + " is not a directory");
  std::string meta_path = dir + "/" + kMetaFile;
  UniqueFd mf(::open(meta_path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!mf.valid()) {
    if (errno == ENOENT) {
      return absl::NotFoundError(absl::StrCat(dir, " is not a complete checkpoint: ", kMetaFile, " is missing"));
    }
    return ErrnoStatus("open " + meta_path);
  }
  if (::fstat(mf.get(), &st) != 0) return ErrnoStatus("stat " + meta_path);
  if (st.st_size > (1ll << 31)) return absl::DataLossError(meta_path + ": impossibly large (file is corrupt)");
  std::string file(static_cast<size_t>(st.st_size), '\0');
  RETURN_IF_ERROR(PreadAll(mf.get(), file.data(), file.size(), 0, meta_path));
  RETURN_IF_ERROR(r->ParseMeta(file, meta_path));
  ASSIGN_OR_RETURN(UniqueFd pages, OpenFile(dir + "/" + kPagesFile));
  ASSIGN_OR_RETURN(r->pages_fd_, CheckDataFile(std::move(pages), dir + "/" + kPagesFile, kPagesMagic,
                                               r->meta_.pages_bytes(), &r->pages_size_));
  ASSIGN_OR_RETURN(UniqueFd files, OpenFile(dir + "/" + kFilesFile));
  ASSIGN_OR_RETURN(r->files_fd_, CheckDataFile(std::move(files), dir + "/" + kFilesFile, kFilesMagic,
                                               r->meta_.files_bytes(), &r->files_size_));
  return r;
}

absl::StatusOr<std::unique_ptr<ImageReader>> ImageReader::FromParts(const std::string& label,
                                                                    const std::string& meta_file, UniqueFd files_fd,
                                                                    std::unique_ptr<PageSource> pages) {
  std::unique_ptr<ImageReader> r(new ImageReader());
  r->dir_ = label;
  RETURN_IF_ERROR(r->ParseMeta(meta_file, label + "/" + kMetaFile));
  ASSIGN_OR_RETURN(r->files_fd_, CheckDataFile(std::move(files_fd), label + "/" + kFilesFile, kFilesMagic,
                                               r->meta_.files_bytes(), &r->files_size_));
  if (r->meta_.pages_bytes() < kHeaderSize) {
    return absl::DataLossError(absl::StrCat(label, "/", kPagesFile, ": the metadata gives it no header (corrupt)"));
  }
  r->pages_size_ = r->meta_.pages_bytes();
  r->page_source_ = std::move(pages);
  return r;
}

absl::Status ImageReader::ReadStored(char* buf, uint64_t len, uint64_t offset) const {
  if (page_source_) return page_source_->Read(offset, len, buf);
  return PreadAll(pages_fd_.get(), buf, len, static_cast<off_t>(offset), dir_ + "/" + kPagesFile);
}

ImageReader::~ImageReader() = default;

absl::Status ImageReader::VerifyBlock(const PageBlock& b) const {
  if (b.zero()) return absl::OkStatus();
  uint64_t limit = b.codec() != PageBlock::NONE ? kMaxBlockBytes : pages_size_;
  std::vector<char> buf(b.length() <= limit ? b.length() : 0);
  return ReadBlock(b, buf.data());
}

absl::Status ImageReader::ReadBlock(const PageBlock& b, char* buf) const {
  if (b.zero()) {
    std::memset(buf, 0, b.length());
    return absl::OkStatus();
  }
  RETURN_IF_ERROR(CheckPlace(b));
  bool compressed = b.codec() != PageBlock::NONE;
  uint64_t stored = compressed ? b.stored_length() : b.length();
  if (compressed) {
    if (b.length() > kMaxBlockBytes || b.length() % kPageSize != 0) {
      return absl::DataLossError(absl::StrFormat("%s/%s: compressed block for %#x has an impossible size %d", dir_,
                                                 kPagesFile, b.vaddr(), b.length()));
    }
    thread_local std::vector<char> packed;
    packed.resize(stored);
    RETURN_IF_ERROR(ReadStored(packed.data(), stored, b.file_offset()));
    if (Checksum(packed.data(), stored) != b.xxh3()) {
      return absl::DataLossError(absl::StrFormat(
          "%s/%s: checksum mismatch in the compressed block at file offset %d (memory at %#x, %d bytes): the image "
          "is corrupt", dir_, kPagesFile, b.file_offset(), b.vaddr(), b.length()));
    }
    absl::Status s = Decompress(b.codec(), packed.data(), stored, buf, b.length());
    if (!s.ok()) {
      return absl::DataLossError(absl::StrFormat("%s/%s: block at file offset %d (memory at %#x): %s", dir_,
                                                 kPagesFile, b.file_offset(), b.vaddr(), s.message()));
    }
    return absl::OkStatus();
  }
  RETURN_IF_ERROR(ReadStored(buf, b.length(), b.file_offset()));
  return CheckBlock(b, buf);
}

absl::Status ImageReader::CheckBlock(const PageBlock& b, const char* data) const {
  bool good;
  if (b.chunk_xxh3().empty()) {
    good = Checksum(data, b.length()) == b.xxh3();
  } else {
    thread_local std::string chunks;
    good = ChunkedChecksum(data, b.length(), &chunks) == b.xxh3() && chunks == b.chunk_xxh3();
  }
  if (!good) {
    return absl::DataLossError(absl::StrFormat(
        "%s/%s: checksum mismatch in the block at file offset %d (memory at %#x, %d bytes): the image is corrupt",
        dir_, kPagesFile, b.file_offset(), b.vaddr(), b.length()));
  }
  return absl::OkStatus();
}

bool ImageReader::HasChunks(const PageBlock& b) {
  return b.codec() == PageBlock::NONE && !b.zero() &&
         b.chunk_xxh3().size() == (b.length() + kChecksumChunk - 1) / kChecksumChunk * sizeof(uint64_t);
}

absl::StatusOr<uint64_t> ImageReader::ReadChunk(const PageBlock& b, uint64_t k, char* buf) const {
  uint64_t off = k * kChecksumChunk;
  if (!HasChunks(b) || off >= b.length()) {
    return absl::InternalError(absl::StrFormat("chunk %d of the block for %#x cannot be read alone", k, b.vaddr()));
  }
  uint64_t len = std::min<uint64_t>(kChecksumChunk, b.length() - off);
  RETURN_IF_ERROR(CheckPlace(b));
  const std::string& list = b.chunk_xxh3();
  uint64_t want = 0;
  for (size_t i = 0; i < sizeof want; ++i) want |= static_cast<uint64_t>(static_cast<unsigned char>(list[k * 8 + i])) << (8 * i);
  RETURN_IF_ERROR(ReadStored(buf, len, b.file_offset() + off));
  if (Checksum(list.data(), list.size()) != b.xxh3() || Checksum(buf, len) != want) {
    return absl::DataLossError(absl::StrFormat(
        "%s/%s: checksum mismatch in the block at file offset %d (memory at %#x, %d bytes), its bytes %d-%d: the "
        "image is corrupt",
        dir_, kPagesFile, b.file_offset(), b.vaddr(), b.length(), off, off + len));
  }
  return len;
}

absl::Status ImageReader::CheckPlace(const PageBlock& b) const {
  bool compressed = b.codec() != PageBlock::NONE;
  uint64_t stored = compressed ? b.stored_length() : b.length();
  if (b.file_offset() < kHeaderSize || stored > pages_size_ || b.file_offset() > pages_size_ - stored ||
      (!compressed && b.file_offset() % kPageSize != 0)) {
    return absl::DataLossError(absl::StrFormat("%s/%s: block for %#x lies outside the file", dir_,
                                               kPagesFile, b.vaddr()));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ImageReader::Blob(uint64_t offset, uint64_t size, uint64_t xxh3,
                                              const std::string& what) const {
  if (offset < kHeaderSize || size > files_size_ || offset > files_size_ - size) {
    return absl::DataLossError(absl::StrCat(dir_, "/", kFilesFile, ": the saved content of ", what,
                                            " lies outside the file"));
  }
  std::string out(size, '\0');
  RETURN_IF_ERROR(PreadAll(files_fd_.get(), out.data(), out.size(), static_cast<off_t>(offset), dir_ + "/" + kFilesFile));
  if (Checksum(out.data(), out.size()) != xxh3) {
    return absl::DataLossError(absl::StrCat(dir_, "/", kFilesFile, ": checksum mismatch in the saved content of ",
                                            what, ": the image is corrupt"));
  }
  return out;
}

absl::StatusOr<std::string> ImageReader::FileContent(const Fd& fd) const {
  if (fd.content_xxh3() == 0 && fd.content_size() == 0) return std::string();  // nothing saved with this record
  return Blob(fd.content_offset(), fd.content_size(), fd.content_xxh3(),
              absl::StrCat("fd ", fd.fd(), " (", fd.path(), ")"));
}

absl::StatusOr<std::string> ImageReader::FileContent(const Vma& v) const {
  return Blob(v.content_offset(), v.content_size(), v.content_xxh3(), absl::StrCat("mapped file ", v.path()));
}

absl::StatusOr<std::string> ImageReader::FileContent(const SysvShm& s) const {
  return Blob(s.content_offset(), s.content_size(), s.content_xxh3(),
              absl::StrCat("System V segment ", s.perm().id()));
}

absl::StatusOr<std::string> ImageReader::SendQueue(const TcpConnection& t) const {
  return Blob(t.send_offset(), t.send_size(), t.send_xxh3(), "a TCP connection's send queue");
}

absl::StatusOr<std::string> ImageReader::ReceiveQueue(const TcpConnection& t) const {
  return Blob(t.recv_offset(), t.recv_size(), t.recv_xxh3(), "a TCP connection's receive queue");
}

absl::Status ImageReader::VerifyAll() const {
  std::vector<const Process*> procs = {&meta_.process()};
  for (const Process& d : meta_.descendants()) procs.push_back(&d);
  if (meta_.has_in_flight()) procs.push_back(&meta_.in_flight());
  for (const Process* p : procs) {
    for (const Vma& v : p->vmas()) {
      for (const PageBlock& b : v.blocks()) RETURN_IF_ERROR(VerifyBlock(b));
      if (v.content_xxh3() != 0 || v.content_size() != 0) RETURN_IF_ERROR(FileContent(v).status());
    }
    for (const Fd& fd : p->fds()) {
      if (fd.content_xxh3() != 0 || fd.content_size() != 0) RETURN_IF_ERROR(FileContent(fd).status());
      if (fd.socket().has_tcp()) {
        RETURN_IF_ERROR(SendQueue(fd.socket().tcp()).status());
        RETURN_IF_ERROR(ReceiveQueue(fd.socket().tcp()).status());
      }
    }
  }
  for (const SysvShm& s : meta_.ipc().shm()) RETURN_IF_ERROR(FileContent(s).status());
  return absl::OkStatus();
}

}  // namespace cairn::image
