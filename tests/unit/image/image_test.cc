#include "engine/image/image.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "engine/image/format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "image.pb.h"
#include "testing/temp_dir.h"

namespace cairn::image {
namespace {

using ::testing::HasSubstr;
namespace fs = std::filesystem;

constexpr char kPipeBytes[] = "bytes queued in a pipe";

// Page contents that differ per page and per byte, so a swapped or shifted block shows.
std::string Pattern(size_t pages, char seed) {
  std::string s(pages * kPageSize, '\0');
  for (size_t i = 0; i < s.size(); ++i) s[i] = static_cast<char>(seed + i * 7 + i / kPageSize);
  return s;
}

struct Sample {
  std::vector<std::string> blocks;  // contents, in the order of vmas[0].blocks
};

// Writes a small complete checkpoint into `dir`: one VMA with three page blocks and one
// pipe fd whose queued bytes are in files.img.
Sample WriteSample(const std::string& dir) {
  Sample s;
  s.blocks = {Pattern(1, 'a'), Pattern(3, 'q'), Pattern(2, 'z')};
  auto w = ImageWriter::Create(dir);
  EXPECT_TRUE(w.ok()) << w.status();
  if (!w.ok()) return s;

  Checkpoint meta;
  meta.set_hostname("unit-test-host");
  Process* p = meta.mutable_process();
  p->set_pid(4242);
  p->set_comm("sample");
  Vma* v = p->add_vmas();
  v->set_start(0x10000);
  v->set_end(0x10000 + 6 * kPageSize);
  v->set_path("[heap]");
  uint64_t vaddr = 0x10000;
  for (const std::string& b : s.blocks) {
    auto pb = (*w)->AppendPages(vaddr, b.data(), b.size());
    EXPECT_TRUE(pb.ok()) << pb.status();
    if (!pb.ok()) return s;
    *v->add_blocks() = *pb;
    vaddr += b.size();
  }
  auto blob = (*w)->AppendBytes(kPipeBytes);
  EXPECT_TRUE(blob.ok()) << blob.status();
  if (!blob.ok()) return s;
  Fd* fd = p->add_fds();
  fd->set_fd(5);
  fd->set_kind(Fd::PIPE);
  fd->set_content_offset(blob->offset);
  fd->set_content_size(blob->size);
  fd->set_content_xxh3(blob->xxh3);
  absl::Status st = (*w)->Commit(meta);
  EXPECT_TRUE(st.ok()) << st;
  return s;
}

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void FlipByte(const std::string& path, uint64_t offset) {
  int fd = ::open(path.c_str(), O_RDWR);
  ASSERT_GE(fd, 0) << path;
  unsigned char c = 0;
  ASSERT_EQ(::pread(fd, &c, 1, static_cast<off_t>(offset)), 1) << path << " @" << offset;
  c ^= 0x40;
  ASSERT_EQ(::pwrite(fd, &c, 1, static_cast<off_t>(offset)), 1);
  ::close(fd);
}

// Open and, when that works, VerifyAll: the status of the first failure.
absl::Status OpenAndVerify(const std::string& dir) {
  auto r = ImageReader::Open(dir);
  if (!r.ok()) return r.status();
  return (*r)->VerifyAll();
}

TEST(ImageTest, RoundTrip) {
  testing::TempDir tmp;
  const std::string dir = tmp.Sub("ckpt");
  Sample s = WriteSample(dir);
  ASSERT_FALSE(HasFailure());

  auto r = ImageReader::Open(dir);
  ASSERT_TRUE(r.ok()) << r.status();
  const Checkpoint& m = (*r)->meta();
  EXPECT_EQ((*r)->dir(), dir);
  EXPECT_EQ(m.format_version(), kFormatVersion);
  EXPECT_EQ(m.hostname(), "unit-test-host");
  EXPECT_EQ(m.process().pid(), 4242);
  EXPECT_EQ(m.process().comm(), "sample");
  EXPECT_EQ(m.pages_bytes(), kHeaderSize + 6 * kPageSize);
  EXPECT_EQ(m.files_bytes(), kHeaderSize + sizeof kPipeBytes - 1);
  EXPECT_EQ(fs::file_size(dir + "/" + kPagesFile), m.pages_bytes());
  EXPECT_EQ(fs::file_size(dir + "/" + kFilesFile), m.files_bytes());

  ASSERT_EQ(m.process().vmas_size(), 1);
  const Vma& v = m.process().vmas(0);
  ASSERT_EQ(v.blocks_size(), 3);
  uint64_t expect_off = kHeaderSize;
  uint64_t expect_vaddr = 0x10000;
  for (int i = 0; i < v.blocks_size(); ++i) {
    SCOPED_TRACE(i);
    const PageBlock& b = v.blocks(i);
    EXPECT_EQ(b.vaddr(), expect_vaddr);
    EXPECT_EQ(b.file_offset(), expect_off);
    EXPECT_EQ(b.file_offset() % kPageSize, 0u);
    ASSERT_EQ(b.length(), s.blocks[i].size());
    EXPECT_TRUE((*r)->VerifyBlock(b).ok());
    std::vector<char> data(b.length());
    ASSERT_TRUE((*r)->ReadBlock(b, data.data()).ok());
    EXPECT_EQ(std::memcmp(data.data(), s.blocks[i].data(), b.length()), 0);
    expect_off += b.length();
    expect_vaddr += b.length();
  }
  ASSERT_EQ(m.process().fds_size(), 1);
  auto content = (*r)->FileContent(m.process().fds(0));
  ASSERT_TRUE(content.ok()) << content.status();
  EXPECT_EQ(*content, kPipeBytes);
  EXPECT_TRUE((*r)->VerifyAll().ok());
}

TEST(ImageTest, CommitLeavesOnlyTheFinalDirectory) {
  testing::TempDir tmp;
  const std::string dir = tmp.Sub("ckpt");
  WriteSample(dir);
  ASSERT_FALSE(HasFailure());
  EXPECT_TRUE(fs::is_directory(dir));
  EXPECT_FALSE(fs::exists(dir + ".partial"));
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  EXPECT_THAT(names, ::testing::UnorderedElementsAre(kMetaFile, kPagesFile, kFilesFile));
  for (const char* f : {kMetaFile, kPagesFile, kFilesFile}) {
    EXPECT_EQ(fs::status(dir + "/" + f).permissions() & fs::perms::others_all, fs::perms::none) << f;
  }
}

TEST(ImageTest, WriterDestroyedWithoutCommitLeavesNothing) {
  testing::TempDir tmp;
  const std::string dir = tmp.Sub("ckpt");
  {
    auto w = ImageWriter::Create(dir);
    ASSERT_TRUE(w.ok()) << w.status();
    EXPECT_TRUE(fs::is_directory(dir + ".partial"));
    std::string page = Pattern(1, 'x');
    ASSERT_TRUE((*w)->AppendPages(0x1000, page.data(), page.size()).ok());
    ASSERT_TRUE((*w)->AppendBytes("abc").ok());
  }
  EXPECT_FALSE(fs::exists(dir));
  EXPECT_FALSE(fs::exists(dir + ".partial"));
}

TEST(ImageTest, AbortIsIdempotent) {
  testing::TempDir tmp;
  const std::string dir = tmp.Sub("ckpt");
  auto w = ImageWriter::Create(dir);
  ASSERT_TRUE(w.ok()) << w.status();
  (*w)->Abort();
  (*w)->Abort();
  EXPECT_FALSE(fs::exists(dir + ".partial"));
  EXPECT_FALSE(fs::exists(dir));
}

TEST(ImageTest, CreateRefusesNonEmptyDirectory) {
  testing::TempDir tmp;
  const std::string dir = tmp.Sub("ckpt");
  ASSERT_TRUE(fs::create_directory(dir));
  std::ofstream(dir + "/precious") << "keep me";
  auto w = ImageWriter::Create(dir);
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(std::string(w.status().message()), HasSubstr(dir));
  EXPECT_EQ(Slurp(dir + "/precious"), "keep me");
  EXPECT_FALSE(fs::exists(dir + ".partial"));
}

TEST(ImageTest, CreateRefusesExistingFile) {
  testing::TempDir tmp;
  const std::string path = tmp.Sub("ckpt");
  std::ofstream(path) << "x";
  EXPECT_FALSE(ImageWriter::Create(path).ok());
  EXPECT_EQ(Slurp(path), "x");
}

TEST(ImageTest, CommitReplacesEmptyDirectoryAndStalePartial) {
  testing::TempDir tmp;
  const std::string dir = tmp.Sub("ckpt");
  ASSERT_TRUE(fs::create_directory(dir));
  ASSERT_TRUE(fs::create_directory(dir + ".partial"));
  std::ofstream(dir + ".partial/leftover") << "stale";
  WriteSample(dir);
  ASSERT_FALSE(HasFailure());
  EXPECT_FALSE(fs::exists(dir + ".partial"));
  EXPECT_FALSE(fs::exists(dir + "/leftover"));
  EXPECT_TRUE(OpenAndVerify(dir).ok());
}

TEST(ImageReaderTest, MissingDirectoryIsNotFound) {
  testing::TempDir tmp;
  auto r = ImageReader::Open(tmp.Sub("nope"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound);
}

TEST(ImageReaderTest, PartialDirectoryWithoutMetaIsRejected) {
  testing::TempDir tmp;
  const std::string dir = tmp.Sub("ckpt");
  WriteSample(dir);
  ASSERT_FALSE(HasFailure());
  ASSERT_TRUE(fs::remove(dir + "/" + kMetaFile));
  auto r = ImageReader::Open(dir);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr(kMetaFile));
}

TEST(ImageReaderTest, MissingDataFileIsRejected) {
  for (const char* f : {kPagesFile, kFilesFile}) {
    SCOPED_TRACE(f);
    testing::TempDir tmp;
    const std::string dir = tmp.Sub("ckpt");
    WriteSample(dir);
    ASSERT_FALSE(HasFailure());
    ASSERT_TRUE(fs::remove(dir + "/" + f));
    EXPECT_FALSE(ImageReader::Open(dir).ok());
  }
}

TEST(ImageReaderTest, NotADirectoryIsRejected) {
  testing::TempDir tmp;
  std::ofstream(tmp.Sub("file")) << "x";
  EXPECT_FALSE(ImageReader::Open(tmp.Sub("file")).ok());
}

TEST(ImageReaderTest, TruncatedOrExtendedFilesAreDetected) {
  struct Case {
    const char* file;
    int64_t delta;  // new size relative to the real size; absolute when >= 0 and absolute is set
    bool absolute;
  };
  const Case cases[] = {
      {kMetaFile, 0, true},       {kMetaFile, 20, true},      {kMetaFile, -1, false},
      {kMetaFile, +1, false},     {kPagesFile, 0, true},      {kPagesFile, 4095, true},
      {kPagesFile, -1, false},    {kPagesFile, -4096, false}, {kPagesFile, +4096, false},
      {kFilesFile, 0, true},      {kFilesFile, 100, true},    {kFilesFile, 4096, true},
      {kFilesFile, -1, false},    {kFilesFile, +1, false},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message() << c.file << (c.absolute ? " size " : " delta ") << c.delta);
    testing::TempDir tmp;
    const std::string dir = tmp.Sub("ckpt");
    WriteSample(dir);
    ASSERT_FALSE(HasFailure());
    const std::string path = dir + "/" + c.file;
    auto size = static_cast<int64_t>(fs::file_size(path));
    ASSERT_EQ(::truncate(path.c_str(), c.absolute ? c.delta : size + c.delta), 0);
    absl::Status st = OpenAndVerify(dir);
    EXPECT_FALSE(st.ok());
    EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss) << st;
  }
}

TEST(ImageReaderTest, EveryFlippedByteIsDetected) {
  // Offsets chosen to hit each header field, the header padding, the metadata payload and
  // each page block (first, middle and last bytes).
  const uint64_t kEnd = ~uint64_t{0};  // stands for "the last byte"
  struct Case {
    const char* file;
    uint64_t offset;
  };
  const Case cases[] = {
      {kMetaFile, 0},    {kMetaFile, 7},    {kMetaFile, 8},     {kMetaFile, 12},
      {kMetaFile, 16},   {kMetaFile, 24},   {kMetaFile, 32},    {kMetaFile, 39},
      {kMetaFile, 40},   {kMetaFile, 45},   {kMetaFile, kEnd},
      {kPagesFile, 0},   {kPagesFile, 9},   {kPagesFile, 20},   {kPagesFile, 33},
      {kPagesFile, 40},  {kPagesFile, 4095},
      {kPagesFile, 4096},                   // block 0, first byte
      {kPagesFile, 2 * 4096 + 5000},        // block 1, middle
      {kPagesFile, 5 * 4096 - 1},           // block 1, last byte
      {kPagesFile, 5 * 4096},               // block 2, first byte
      {kPagesFile, kEnd},                   // block 2, last byte
      {kFilesFile, 0},   {kFilesFile, 8},   {kFilesFile, 32},   {kFilesFile, 2000},
      {kFilesFile, 4096}, {kFilesFile, 4100}, {kFilesFile, kEnd},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message() << c.file << " @" << (c.offset == kEnd ? -1 : static_cast<int64_t>(c.offset)));
    testing::TempDir tmp;
    const std::string dir = tmp.Sub("ckpt");
    WriteSample(dir);
    ASSERT_FALSE(HasFailure());
    const std::string path = dir + "/" + c.file;
    uint64_t off = c.offset == kEnd ? fs::file_size(path) - 1 : c.offset;
    ASSERT_LT(off, fs::file_size(path));
    FlipByte(path, off);
    absl::Status st = OpenAndVerify(dir);
    EXPECT_FALSE(st.ok()) << "corruption went unnoticed";
    EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss) << st;
  }
}

TEST(ImageReaderTest, CorruptBlockIsNamedByVerifyBlock) {
  testing::TempDir tmp;
  const std::string dir = tmp.Sub("ckpt");
  WriteSample(dir);
  ASSERT_FALSE(HasFailure());
  FlipByte(dir + "/" + kPagesFile, 2 * 4096);  // inside block 1
  auto r = ImageReader::Open(dir);
  ASSERT_TRUE(r.ok()) << r.status();  // block data is checked lazily
  const Vma& v = (*r)->meta().process().vmas(0);
  EXPECT_TRUE((*r)->VerifyBlock(v.blocks(0)).ok());
  absl::Status bad = (*r)->VerifyBlock(v.blocks(1));
  EXPECT_EQ(bad.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(bad.message()), HasSubstr("0x11000"));  // the block's vaddr
  EXPECT_TRUE((*r)->VerifyBlock(v.blocks(2)).ok());
  EXPECT_EQ((*r)->VerifyAll().code(), absl::StatusCode::kDataLoss);
}

TEST(ImageReaderTest, BlockOutsideTheFileIsRejected) {
  testing::TempDir tmp;
  const std::string dir = tmp.Sub("ckpt");
  WriteSample(dir);
  ASSERT_FALSE(HasFailure());
  auto r = ImageReader::Open(dir);
  ASSERT_TRUE(r.ok()) << r.status();
  const uint64_t size = (*r)->meta().pages_bytes();
  PageBlock b;
  b.set_length(kPageSize);
  for (uint64_t off : {uint64_t{0}, size, size - kPageSize + 512, ~uint64_t{0} - 100}) {
    SCOPED_TRACE(off);
    b.set_file_offset(off);
    EXPECT_EQ((*r)->VerifyBlock(b).code(), absl::StatusCode::kDataLoss);
  }
  b.set_file_offset(kHeaderSize);
  b.set_length(size);  // runs past the end
  EXPECT_EQ((*r)->VerifyBlock(b).code(), absl::StatusCode::kDataLoss);

  Fd fd;
  fd.set_deleted(true);
  fd.set_content_offset(kHeaderSize);
  fd.set_content_size(1 << 20);
  EXPECT_EQ((*r)->FileContent(fd).status().code(), absl::StatusCode::kDataLoss);
}

// Sets an environment variable for the scope of one test, whatever way it ends.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) { ::setenv(name, value, 1); }
  ~ScopedEnv() { ::unsetenv(name_); }

 private:
  const char* name_;
};

TEST(ImageReaderTest, NewerFormatVersionIsRefused) {
  testing::TempDir tmp;
  const std::string dir = tmp.Sub("ckpt");
  {
    ScopedEnv future("CAIRN_TEST_FORMAT_VERSION", "999");
    EXPECT_EQ(WriterFormatVersion(), 999u);
    WriteSample(dir);
  }
  ASSERT_FALSE(HasFailure());
  EXPECT_EQ(WriterFormatVersion(), kFormatVersion);
  auto r = ImageReader::Open(dir);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("newer"));
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("999"));
}

TEST(FormatTest, HeaderRoundTripAndChecks) {
  FileHeader h = MakeHeader(kPagesMagic, 0, 0);
  EXPECT_EQ(h.version, kFormatVersion);
  EXPECT_TRUE(CheckHeader(h, kPagesMagic, "pages").ok());
  EXPECT_EQ(CheckHeader(h, kFilesMagic, "pages").code(), absl::StatusCode::kDataLoss);  // wrong magic

  FileHeader tampered = h;
  tampered.payload_len = 1;
  EXPECT_EQ(CheckHeader(tampered, kPagesMagic, "pages").code(), absl::StatusCode::kDataLoss);

  FileHeader zero = h;
  zero.version = 0;
  zero.header_xxh3 = Checksum(&zero, offsetof(FileHeader, header_xxh3));
  EXPECT_EQ(CheckHeader(zero, kPagesMagic, "pages").code(), absl::StatusCode::kDataLoss);

  FileHeader newer = h;
  newer.version = kFormatVersion + 1;
  newer.header_xxh3 = Checksum(&newer, offsetof(FileHeader, header_xxh3));
  absl::Status st = CheckHeader(newer, kPagesMagic, "pages");
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(st.message()), HasSubstr("newer"));
}

TEST(FormatTest, ChecksumDependsOnEveryByte) {
  std::string a(100, 'x');
  std::string b = a;
  b[57] = 'y';
  EXPECT_EQ(Checksum(a.data(), a.size()), Checksum(a.data(), a.size()));
  EXPECT_NE(Checksum(a.data(), a.size()), Checksum(b.data(), b.size()));
  EXPECT_NE(Checksum(a.data(), a.size()), Checksum(a.data(), a.size() - 1));
}

}  // namespace
}  // namespace cairn::image

namespace cairn::image {
namespace {

// A block written now carries a checksum per 64 KiB chunk (PageBlock.chunk_xxh3): it reads back
// whole, and each chunk alone; a damaged chunk is refused alone, naming its bytes, while the
// others still read; the whole block is refused too. A block written the older way (one
// checksum of its bytes, no chunks) still reads, and cannot be read by chunk.
TEST(ImageChunkTest, ABlockReadsWholeAndByChunkAndADamagedChunkIsRefusedAlone) {
  testing::TempDir tmp;
  std::string dir = tmp.Sub("ckpt");
  std::string chunked = Pattern(50, 'c');  // 200 KiB: chunks of 64, 64, 64 and 8 KiB
  std::string plain = Pattern(20, 'p');
  auto w = ImageWriter::Create(dir);
  ASSERT_TRUE(w.ok()) << w.status();
  auto a = (*w)->AppendPages(0x100000, chunked.data(), chunked.size());
  ASSERT_TRUE(a.ok()) << a.status();
  auto b = (*w)->AppendPages(0x200000, plain.data(), plain.size(), Checksum(plain.data(), plain.size()));
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(a->chunk_xxh3().size(), 4 * sizeof(uint64_t));
  EXPECT_TRUE(b->chunk_xxh3().empty());
  Checkpoint meta;
  Vma* v = meta.mutable_process()->add_vmas();
  *v->add_blocks() = *a;
  *v->add_blocks() = *b;
  ASSERT_TRUE((*w)->Commit(meta).ok());

  auto r = ImageReader::Open(dir);
  ASSERT_TRUE(r.ok()) << r.status();
  std::vector<char> buf(chunked.size());
  ASSERT_TRUE((*r)->ReadBlock(*a, buf.data()).ok());
  EXPECT_EQ(std::string(buf.data(), buf.size()), chunked);
  ASSERT_TRUE(ImageReader::HasChunks(*a));
  std::vector<char> chunk(kChecksumChunk);
  for (uint64_t k = 0; k < 4; ++k) {
    auto n = (*r)->ReadChunk(*a, k, chunk.data());
    ASSERT_TRUE(n.ok()) << n.status();
    EXPECT_EQ(*n, k < 3 ? kChecksumChunk : 8 * 1024u);
    EXPECT_EQ(std::string(chunk.data(), *n), chunked.substr(k * kChecksumChunk, *n)) << "chunk " << k;
  }
  EXPECT_FALSE(ImageReader::HasChunks(*b));
  std::vector<char> pbuf(plain.size());
  ASSERT_TRUE((*r)->ReadBlock(*b, pbuf.data()).ok());
  EXPECT_EQ(std::string(pbuf.data(), pbuf.size()), plain);
  EXPECT_FALSE((*r)->ReadChunk(*b, 0, chunk.data()).ok());
  r->reset();

  FlipByte(dir + "/" + kPagesFile, a->file_offset() + 2 * kChecksumChunk + 100);
  auto damaged = ImageReader::Open(dir);
  ASSERT_TRUE(damaged.ok()) << damaged.status();
  auto bad = (*damaged)->ReadChunk(*a, 2, chunk.data());
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("bytes 131072-196608"));
  EXPECT_TRUE((*damaged)->ReadChunk(*a, 1, chunk.data()).ok());
  EXPECT_FALSE((*damaged)->ReadBlock(*a, buf.data()).ok());
}

}  // namespace
}  // namespace cairn::image
