#include "engine/dump/memory.h"
#include "engine/dump/aio.h"
#include "engine/dump/scratch_files.h"

#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/sysmacros.h>

#include <algorithm>
#include <chrono>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "common/log.h"
#include "common/thread_nice.h"
#include "common/status.h"
#include "common/unique_fd.h"
#include "engine/image/format.h"
#include "common/stop_points.h"
#include "engine/inject/injector.h"
#include "engine/proc/pagemap_scan.h"

namespace cairn::dump {
namespace {

constexpr uint64_t kPage = 4096;
constexpr uint64_t kPmPresent = 1ULL << 63;
constexpr uint64_t kPmSwapped = 1ULL << 62;
constexpr uint64_t kPmGuardRegion = 1ULL << 58;  // Linux 6.14+: a MADV_GUARD_INSTALL marker
constexpr uint64_t kPmFileOrShared = 1ULL << 61;

// One read batch. Small enough that a buffer is still in the caches when the writer
// copies it into the file (8 MiB buffers made a 256 MiB dump ~20% slower), large enough
// that handing buffers between the threads costs nothing.
constexpr size_t kBufferBytes = 1 << 20;
// dump --compress: each buffer is cut into blocks compressed on every core, so it must
// hold several of them.
constexpr size_t kCompressBufferBytes = 8 << 20;
constexpr size_t kBuffers = 4;  // in flight: the dumper's buffers take 4 MiB (32 MiB with --compress)
constexpr uint64_t kPagemapBatch = 65536; // pages per pagemap read (512 KiB of entries)
constexpr uint64_t kCompressChunk = 1 << 20;  // dump --compress: largest compressed block

bool IsZeroPage(const char* p) {
  const uint64_t* w = reinterpret_cast<const uint64_t*>(p);
  if (w[0] != 0 || w[kPage / 8 - 1] != 0) return false;
  for (size_t i = 0; i < kPage / 8; ++i) {
    if (w[i] != 0) return false;
  }
  return true;
}

// A run of pages to copy: [start, start + len).
struct Run {
  size_t vma;
  uint64_t start;
  uint64_t len;
  bool keep_zero = false;  // zero pages are recorded as zero blocks, not skipped
};

bool NeedsPage(image::Vma::Kind kind, uint64_t pm) {
  if (pm & kPmGuardRegion) return false;  // no page: a marker (RecordGuards), shown as swapped
  switch (kind) {
    case image::Vma::ANON:
    case image::Vma::SHARED_ANON:
      return (pm & (kPmPresent | kPmSwapped)) != 0;
    case image::Vma::FILE_PRIVATE:
      // A present page that is not a file page is the process's private copy.
      return (pm & kPmSwapped) != 0 || ((pm & kPmPresent) != 0 && (pm & kPmFileOrShared) == 0);
    default:
      return false;
  }
}

// PAGEMAP_SCAN (engine/proc/pagemap_scan.h)
using proc::PmScanArg;
using proc::PageRegion;
using proc::kPagemapScan;
using proc::kPageIsFile;
using proc::kPageIsPresent;
using proc::kPageIsSwapped;
using proc::kPageIsPfnZero;

// Appends the runs of area `v` (index `vi`) that need saving, found with PAGEMAP_SCAN.
// Returns false when the kernel lacks the ioctl (the caller reads pagemap instead).
bool ScanArea(int pagemap_fd, const image::Vma& v, size_t vi, std::vector<Run>* runs) {
  PmScanArg arg{};
  arg.size = sizeof arg;
  arg.category_anyof_mask = kPageIsPresent | kPageIsSwapped;
  arg.return_mask = kPageIsPresent | kPageIsSwapped | kPageIsFile;
  if (v.kind() == image::Vma::FILE_PRIVATE) {
    // Only the process's own copies: not file pages.
    arg.category_inverted = kPageIsFile;
    arg.category_mask = kPageIsFile;
  } else {
    // The shared zero page reads back as zeros anyway.
    arg.category_inverted = kPageIsPfnZero;
    arg.category_mask = kPageIsPfnZero;
  }
  if (proc::PagemapKnowsGuards()) {
    // Guard markers count as swapped, but there is nothing to read (RecordGuards).
    arg.category_inverted |= proc::kPageIsGuard;
    arg.category_mask |= proc::kPageIsGuard;
  }
  std::vector<PageRegion> regions(512);
  size_t before = runs->size();
  for (uint64_t addr = v.start(); addr < v.end();) {
    arg.start = addr;
    arg.end = v.end();
    arg.vec = reinterpret_cast<uint64_t>(regions.data());
    arg.vec_len = regions.size();
    long n = ::ioctl(pagemap_fd, kPagemapScan, &arg);
    if (n < 0) {
      runs->resize(before);  // the caller starts this area over with pagemap reads
      return false;
    }
    for (long k = 0; k < n; ++k) {
      const PageRegion& r = regions[static_cast<size_t>(k)];
      if (!runs->empty() && runs->back().vma == vi && runs->back().start + runs->back().len == r.start) {
        runs->back().len += r.end - r.start;
      } else {
        runs->push_back({vi, r.start, r.end - r.start});
      }
    }
    if (arg.walk_end <= addr) break;
    addr = arg.walk_end;
  }
  return true;
}

// Appends the runs of shared anonymous area `v` (index `vi`) that hold data. Its pages may
// have been touched only by other processes of the tree, so the page tables of `pid` do not
// show them; the object itself does: /proc/PID/map_files opens it, and SEEK_DATA/SEEK_HOLE
// walk its pages (in memory or swapped out). Returns false when that is not possible (the
// caller scans the page tables instead).
bool ShmemDataRuns(pid_t pid, const image::Vma& v, size_t vi, std::vector<Run>* runs) {
  std::string link = absl::StrFormat("/proc/%d/map_files/%x-%x", pid, v.start(), v.end());
  UniqueFd fd(::open(link.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) {
    CAIRN_LOG_DEBUG("event=shmem_seek_unavailable path={} errno={}", link, errno);
    return false;
  }
  size_t before = runs->size();
  off_t len = static_cast<off_t>(v.end() - v.start());
  off_t off = 0;
  while (off < len) {
    off_t data = ::lseek(fd.get(), off, SEEK_DATA);
    if (data < 0 && errno == ENXIO) break;  // no data past off
    if (data < 0) {
      runs->resize(before);
      return false;
    }
    if (data >= len) break;
    off_t hole = ::lseek(fd.get(), data, SEEK_HOLE);
    if (hole < 0) {
      runs->resize(before);
      return false;
    }
    off_t start = data / static_cast<off_t>(kPage) * static_cast<off_t>(kPage);
    off_t end = std::min(len, (hole + static_cast<off_t>(kPage) - 1) / static_cast<off_t>(kPage) * static_cast<off_t>(kPage));
    if (end > start) runs->push_back({vi, v.start() + static_cast<uint64_t>(start), static_cast<uint64_t>(end - start)});
    off = end > start ? end : start + static_cast<off_t>(kPage);
  }
  return true;
}

// Calls fn(page address, pagemap entry) for each page of [start, end), reading /proc/PID/
// pagemap (`pm_fd`, named `path` in errors) in batches through `buf`.
template <typename Fn>
absl::Status ForEachPagemapEntry(int pm_fd, const std::string& path, uint64_t start, uint64_t end,
                                 std::vector<uint64_t>& buf, Fn fn) {
  for (uint64_t addr = start; addr < end;) {
    uint64_t n = std::min<uint64_t>((end - addr) / kPage, kPagemapBatch);
    buf.resize(n);
    ssize_t got = ::pread(pm_fd, buf.data(), n * 8, static_cast<off_t>(addr / kPage * 8));
    if (got != static_cast<ssize_t>(n * 8)) return ErrnoStatus("read " + path, got < 0 ? errno : EIO);
    for (uint64_t k = 0; k < n; ++k) fn(addr + k * kPage, buf[k]);
    addr += n * kPage;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<Run>> FindRuns(pid_t pid, const std::vector<image::Vma>& vmas,
                                          std::set<uint64_t>* saved_shmem, const WrittenPages* written,
                                          std::vector<std::vector<image::PageBlock>>* zero_blocks) {
  std::string path = absl::StrCat("/proc/", pid, "/pagemap");
  UniqueFd pm(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!pm.valid()) return ErrnoStatus("open " + path);
  std::vector<uint64_t> entries;
  std::vector<Run> runs;
  for (size_t i = 0; i < vmas.size(); ++i) {
    const image::Vma& v = vmas[i];
    if (v.kind() != image::Vma::ANON && v.kind() != image::Vma::SHARED_ANON &&
        v.kind() != image::Vma::FILE_PRIVATE) {
      continue;
    }
    if (v.kind() == image::Vma::SHARED_ANON && !saved_shmem->insert(v.shmem_id()).second) continue;
    if (written != nullptr) {
      if (auto w = written->find(i); w != written->end()) {
        // Only the pages written since the parent; discarded ones become zero blocks.
        for (const WrittenRun& r : w->second) {
          if (r.present) {
            runs.push_back({i, r.start, r.len, true});
          } else {
            image::PageBlock b;
            b.set_vaddr(r.start);
            b.set_length(r.len);
            b.set_zero(true);
            (*zero_blocks)[i].push_back(std::move(b));
          }
        }
        continue;
      }
    }
    // PAGEMAP_SCAN reports only the ranges that hold pages, so a huge sparse reservation
    // (a JVM heap, a Go arena, a sanitizer's shadow) costs nothing; older kernels fall back
    // to reading pagemap entry by entry.
    if (v.kind() == image::Vma::SHARED_ANON && ShmemDataRuns(pid, v, i, &runs)) continue;
    if (ScanArea(pm.get(), v, i, &runs)) continue;
    RETURN_IF_ERROR(ForEachPagemapEntry(pm.get(), path, v.start(), v.end(), entries, [&](uint64_t page, uint64_t pme) {
      if (!NeedsPage(v.kind(), pme)) return;
      if (!runs.empty() && runs.back().vma == i && runs.back().start + runs.back().len == page) {
        runs.back().len += kPage;
      } else {
        runs.push_back({i, page, kPage});
      }
    }));
  }
  return runs;
}

// A run of non-zero pages inside a filled buffer, with its checksum; or, with `zero`, a
// run of zero pages to record as such. `vma` and `vaddr` say whose pages they are.
struct Segment {
  uint64_t offset = 0;  // in the buffer
  uint64_t len = 0;
  uint64_t xxh3 = 0;
  bool zero = false;
  size_t vma = 0;
  uint64_t vaddr = 0;
  std::string chunks;  // the checksum's chunks (image::ChunkedChecksum)
};

// A filled buffer waiting to be written: pages of one or more runs, in the order of their
// segments.
struct Batch {
  std::vector<Segment> segments;
  char* buf = nullptr;
};

// A piece of a run placed in a buffer: `len` bytes of area `vma` at `vaddr`, read to
// `offset` of the buffer.
struct Piece {
  size_t vma = 0;
  uint64_t vaddr = 0;
  uint64_t len = 0;
  uint64_t offset = 0;
  bool keep_zero = false;
};

constexpr size_t kMaxRemoteIovecs = 1024;  // UIO_MAXIOV

// Reads `pieces` (laid out one after another in `buf`) with as few process_vm_readv calls as
// it takes, one per kMaxRemoteIovecs pieces: the last round of a pre-copy or an incremental
// dump is thousands of scattered single pages. False on any failure or short read: the
// caller then reads the pieces one by one (ReadRemote's /proc/PID/mem fallback, and an error
// naming the piece that cannot be read).
bool ReadPieces(pid_t pid, const std::vector<Piece>& pieces, char* buf) {
  std::vector<iovec> remote;
  for (size_t first = 0; first < pieces.size(); first += kMaxRemoteIovecs) {
    size_t n = std::min(kMaxRemoteIovecs, pieces.size() - first);
    remote.clear();
    uint64_t want = 0;
    for (size_t k = first; k < first + n; ++k) {
      remote.push_back({reinterpret_cast<void*>(pieces[k].vaddr), pieces[k].len});
      want += pieces[k].len;
    }
    iovec local{buf + pieces[first].offset, want};
    if (::process_vm_readv(pid, &local, 1, remote.data(), remote.size(), 0) != static_cast<ssize_t>(want)) {
      return false;
    }
  }
  return true;
}

image::PageBlock ZeroBlock(uint64_t vaddr, uint64_t len) {
  image::PageBlock b;
  b.set_vaddr(vaddr);
  b.set_length(len);
  b.set_zero(true);
  return b;
}

// Splits a piece of a buffer into runs of pages to save, dropping zero pages when
// `skip_zero` (a missing anonymous page reads back as zeros), or recording them as zero runs
// when the piece says `keep_zero`, and checksums each run of data. Appends them to `out`.
void AddSegments(const char* buf, const Piece& piece, bool skip_zero, bool checksum, std::vector<Segment>* out) {
  const char* data = buf + piece.offset;
  auto add = [&](uint64_t i, uint64_t j, bool zero) {
    std::string chunks;
    uint64_t sum = zero || !checksum ? 0 : image::ChunkedChecksum(data + i, j - i, &chunks);
    out->push_back({piece.offset + i, j - i, sum, zero, piece.vma, piece.vaddr + i, std::move(chunks)});
  };
  uint64_t i = 0;
  while (i < piece.len) {
    if (skip_zero && IsZeroPage(data + i)) {
      uint64_t j = i + kPage;
      while (j < piece.len && IsZeroPage(data + j)) j += kPage;
      if (piece.keep_zero) add(i, j, true);
      i = j;
      continue;
    }
    uint64_t j = i + kPage;
    while (j < piece.len && !(skip_zero && IsZeroPage(data + j))) j += kPage;
    add(i, j, false);
    i = j;
  }
}

// dump --compress: cuts the segments of one buffer into blocks of at most kCompressChunk,
// compresses them on every core, and appends them in order (a block that does not shrink
// is stored as it is). Zero segments become zero blocks.
absl::Status AppendCompressed(image::ImageWriter& writer, const image::Compression& comp, const char* data,
                              const std::vector<Segment>& segments, std::vector<std::vector<image::PageBlock>>* blocks,
                              MemoryStats* stats) {
  struct Chunk {
    const Segment* seg = nullptr;
    uint64_t off = 0, len = 0;  // within the segment
    bool packed = false;
    std::string stored;
    uint64_t xxh3 = 0;
    std::string chunks;  // of a block stored uncompressed
  };
  std::vector<Chunk> chunks;
  for (const Segment& seg : segments) {
    if (seg.zero) {
      chunks.push_back({&seg, 0, seg.len, false, {}, 0, {}});
      continue;
    }
    for (uint64_t o = 0; o < seg.len; o += kCompressChunk) {
      chunks.push_back({&seg, o, std::min<uint64_t>(kCompressChunk, seg.len - o), false, {}, 0, {}});
    }
  }
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i; (i = next.fetch_add(1)) < chunks.size();) {
      Chunk& c = chunks[i];
      if (c.seg->zero) continue;
      const char* at = data + c.seg->offset + c.off;
      c.packed = image::Compress(comp, at, c.len, &c.stored);
      c.xxh3 = c.packed ? image::Checksum(c.stored.data(), c.stored.size()) : image::ChunkedChecksum(at, c.len, &c.chunks);
    }
  };
  size_t threads = std::min<size_t>(std::max(1u, std::thread::hardware_concurrency()), chunks.size());
  std::vector<std::thread> pool;
  const int nice = ThreadNice::Current();  // the helpers copy at the dump's priority (thread_nice.h)
  for (size_t t = 1; t < threads; ++t) {
    pool.emplace_back([&work, nice] {
      ThreadNice same(nice);
      work();
    });
  }
  work();
  for (auto& t : pool) t.join();
  for (const Chunk& c : chunks) {
    uint64_t vaddr = c.seg->vaddr + c.off;
    std::vector<image::PageBlock>& out = (*blocks)[c.seg->vma];
    if (c.seg->zero) {
      out.push_back(ZeroBlock(vaddr, c.len));
      continue;
    }
    auto block = c.packed ? writer.AppendStored(vaddr, c.len, c.stored.data(), c.stored.size(), c.xxh3, comp.codec)
                          : writer.AppendPages(vaddr, data + c.seg->offset + c.off, c.len, c.xxh3, c.chunks);
    if (!block.ok()) return block.status();
    out.push_back(std::move(*block));
    stats->pages += c.len / kPage;
    stats->bytes += c.len;
  }
  return absl::OkStatus();
}

// Appends the segments of one filled buffer as they are (no compression).
absl::Status AppendPlain(image::ImageWriter& writer, const char* data, const std::vector<Segment>& segments,
                         std::vector<std::vector<image::PageBlock>>* blocks, MemoryStats* stats) {
  for (const Segment& seg : segments) {
    std::vector<image::PageBlock>& out = (*blocks)[seg.vma];
    if (seg.zero) {
      out.push_back(ZeroBlock(seg.vaddr, seg.len));
      continue;
    }
    ASSIGN_OR_RETURN(image::PageBlock block,
                     writer.AppendPages(seg.vaddr, data + seg.offset, seg.len, seg.xxh3, seg.chunks));
    out.push_back(std::move(block));
    stats->pages += seg.len / kPage;
    stats->bytes += seg.len;
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<image::Vma>> DescribeAreas(pid_t pid, const std::vector<proc::MapEntry>& maps) {
  std::vector<image::Vma> out;
  for (const proc::MapEntry& m : maps) {
    image::Vma v;
    v.set_start(m.start);
    v.set_end(m.end);
    v.set_prot(m.prot);
    v.set_shared(m.shared);
    v.set_pgoff(m.offset);
    v.set_path(m.path);
    for (const std::string& f : m.vm_flags) v.add_vm_flags(f);
    const std::string& p = m.path;
    if (p == "[vsyscall]") continue;  // a fixed kernel page, present in every process
    auto unsupported = [&](absl::string_view what) {
      return absl::UnimplementedError(absl::StrFormat(
          "pid %d maps %s at %#x-%#x (%s); this is not supported yet", pid, what, m.start, m.end, p));
    };
    if (p == "[vvar]" || p == "[vvar_vclock]") {
      v.set_kind(image::Vma::VVAR);
    } else if (p == "[vdso]") {
      v.set_kind(image::Vma::VDSO);
    } else if (m.inode == 0 && (p.empty() || p == "[heap]" || p == "[stack]" || absl::StartsWith(p, "[anon:"))) {
      if (m.shared) return unsupported("shared anonymous memory without a backing object");
      v.set_kind(image::Vma::ANON);
    } else if (m.shared && absl::StartsWith(p, "/dev/zero")) {
      v.set_kind(image::Vma::SHARED_ANON);
      v.set_shmem_id(m.inode);
      if (m.offset != 0) return unsupported("a part of a shared anonymous object (mapped at an offset)");
    } else if (absl::StartsWith(p, "/SYSV")) {
      // An attached System V segment (the inode is its id). Its content is saved with the
      // segment; restore attaches it whole, so the area must be the whole segment.
      v.set_kind(image::Vma::SYSV_SHM);
      v.set_shmem_id(m.inode);
      std::string link = absl::StrFormat("/proc/%d/map_files/%x-%x", pid, m.start, m.end);
      struct stat st {};
      if (::stat(link.c_str(), &st) != 0) return ErrnoStatus("stat " + link + " (" + p + ")");
      uint64_t size = (static_cast<uint64_t>(st.st_size) + kPage - 1) / kPage * kPage;
      if (m.offset != 0 || m.end - m.start != size) {
        return unsupported("a part of a System V shared memory segment (partly unmapped or with mixed protections)");
      }
    } else if (p == "/[aio] (deleted)") {
      RETURN_IF_ERROR(DescribeAioRing(pid, m, &v));  // aio.h
    } else if (absl::StartsWith(p, "/memfd:") &&
               std::find(m.vm_flags.begin(), m.vm_flags.end(), "ht") != m.vm_flags.end()) {
      return unsupported("a hugetlb memfd");
    } else if (!p.empty() && p[0] == '/') {
      v.set_kind(m.shared ? image::Vma::FILE_SHARED : image::Vma::FILE_PRIVATE);
      if (absl::EndsWith(p, " (deleted)")) {
        // A mapping of a deleted file (a POSIX semaphore or shm object unlinked after
        // opening, a memfd): the file's content is saved and the file made again on restore.
        v.set_file_deleted(true);
        v.set_path(p.substr(0, p.size() - 10));
        v.set_shmem_id(m.inode);
        v.set_memfd(absl::StartsWith(p, "/memfd:"));
      }
      std::string link = absl::StrFormat("/proc/%d/map_files/%x-%x", pid, m.start, m.end);
      struct stat st {};
      if (::stat(link.c_str(), &st) != 0) return ErrnoStatus("stat " + link + " (" + p + ")");
      image::FileId* id = v.mutable_file();
      id->set_dev(st.st_dev);
      id->set_ino(st.st_ino);
      id->set_size(static_cast<uint64_t>(st.st_size));
      id->set_mtime_ns(st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec);
      if (!v.file_deleted() && IsScratchFile(p, st)) v.set_scratch(true);  // scratch_files.h
    } else {
      return unsupported("a special mapping");
    }
    out.push_back(std::move(v));
  }
  return out;
}

absl::Status SaveDeletedMappedFiles(pid_t pid, std::vector<image::Vma>& vmas, image::ImageWriter& writer,
                                    std::set<std::pair<uint64_t, uint64_t>>* saved) {
  for (image::Vma& v : vmas) {
    if (!v.file_deleted() && !v.scratch()) continue;
    std::string link = absl::StrFormat("/proc/%d/map_files/%x-%x", pid, v.start(), v.end());
    UniqueFd f(::open(link.c_str(), O_RDONLY | O_CLOEXEC));
    if (!f.valid()) return ErrnoStatus("open " + link + " (" + v.path() + (v.scratch() ? ")" : ", deleted)"));
    if (v.memfd()) {
      int seals = ::fcntl(f.get(), F_GET_SEALS);
      if (seals < 0) return ErrnoStatus("F_GET_SEALS on " + link + " (" + v.path() + ")");
      v.set_seals(static_cast<uint32_t>(seals));
    }
    if (!saved->insert({v.file().dev(), v.file().ino()}).second) continue;
    struct stat st {};
    if (::fstat(f.get(), &st) != 0) return ErrnoStatus("stat " + link);
    ASSIGN_OR_RETURN(auto blob,
                     writer.AppendSparseFile(f.get(), static_cast<uint64_t>(st.st_size), v.path(), v.mutable_saved_file()));
    v.set_content_offset(blob.offset);
    v.set_content_size(blob.size);
    v.set_content_xxh3(blob.xxh3);
  }
  return absl::OkStatus();
}

// Guard regions (madvise MADV_GUARD_INSTALL) of private areas, recorded in each area's
// `guards`: restore installs them again. Without PAGEMAP_SCAN's guard category, pagemap's
// bit 58 says it page by page (Linux 6.14+; before, guards were not shown at all).
absl::Status RecordGuards(pid_t pid, std::vector<image::Vma>& vmas) {
  std::string path = absl::StrCat("/proc/", pid, "/pagemap");
  UniqueFd pm(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!pm.valid()) return ErrnoStatus("open " + path);
  bool scan = proc::PagemapKnowsGuards();
  std::vector<PageRegion> regions(256);
  std::vector<uint64_t> entries;
  for (image::Vma& v : vmas) {
    if (v.kind() != image::Vma::ANON && v.kind() != image::Vma::FILE_PRIVATE) continue;
    v.clear_guards();
    auto add = [&](uint64_t start, uint64_t end) {
      if (v.guards_size() > 0 && v.guards(v.guards_size() - 1).offset() + v.guards(v.guards_size() - 1).length() == start) {
        image::Extent* last = v.mutable_guards(v.guards_size() - 1);
        last->set_length(last->length() + (end - start));
        return;
      }
      image::Extent* e = v.add_guards();
      e->set_offset(start);
      e->set_length(end - start);
    };
    if (scan) {
      PmScanArg arg{};
      arg.size = sizeof arg;
      arg.category_anyof_mask = proc::kPageIsGuard;
      arg.return_mask = proc::kPageIsGuard;
      for (uint64_t addr = v.start(); addr < v.end();) {
        arg.start = addr;
        arg.end = v.end();
        arg.vec = reinterpret_cast<uint64_t>(regions.data());
        arg.vec_len = regions.size();
        long n = ::ioctl(pm.get(), kPagemapScan, &arg);
        if (n < 0) return ErrnoStatus(absl::StrFormat("PAGEMAP_SCAN (guard regions) %#x-%#x", addr, v.end()));
        for (long k = 0; k < n; ++k) add(regions[static_cast<size_t>(k)].start, regions[static_cast<size_t>(k)].end);
        if (arg.walk_end <= addr) break;
        addr = arg.walk_end;
      }
      continue;
    }
    RETURN_IF_ERROR(ForEachPagemapEntry(pm.get(), path, v.start(), v.end(), entries, [&](uint64_t page, uint64_t pme) {
      if (pme & kPmGuardRegion) add(page, page + kPage);
    }));
  }
  return absl::OkStatus();
}

absl::StatusOr<MemoryStats> DumpPages(pid_t pid, std::vector<image::Vma>& vmas, image::ImageWriter& writer,
                                      const ProgressFn& progress, std::set<uint64_t>* saved_shmem,
                                      const WrittenPages* written,
                                      std::vector<std::pair<uint64_t, uint64_t>>* unread,
                                      std::pair<uint64_t, uint64_t> zeroed) {
  std::vector<std::vector<image::PageBlock>> blocks(vmas.size());
  auto t_start = std::chrono::steady_clock::now();
  RETURN_IF_ERROR(RecordGuards(pid, vmas));
  ASSIGN_OR_RETURN(std::vector<Run> runs, FindRuns(pid, vmas, saved_shmem, written, &blocks));
  auto t_found = std::chrono::steady_clock::now();
  uint64_t total = 0;
  for (const Run& r : runs) total += r.len;

  MemoryStats stats;
  const image::Compression comp = writer.compression();
  const bool compress = comp.codec != image::PageBlock::NONE;
  const size_t buffer_bytes = compress ? kCompressBufferBytes : kBufferBytes;
  // Left uninitialised: a small dump touches only what it reads (zeroing 32 MiB would
  // cost more than the whole dump of a small process).
  std::vector<std::unique_ptr<char[]>> buffers;
  for (size_t i = 0; i < kBuffers; ++i) buffers.emplace_back(new char[buffer_bytes]);
  std::mutex mu;
  std::condition_variable cv;
  std::deque<char*> free_bufs;  // GUARDED_BY(mu)
  std::deque<Batch> full;                    // GUARDED_BY(mu)
  bool reader_done = false;                  // GUARDED_BY(mu)
  absl::Status writer_status;                // GUARDED_BY(mu)
  for (auto& b : buffers) free_bufs.push_back(b.get());

  // The writer appends what the reader prepared; reading, zero detection and checksums
  // happen on the reader's side so the two threads carry about equal work.
  const int nice = ThreadNice::Current();  // the writer runs at the dump's priority (thread_nice.h)
  std::thread writer_thread([&, nice] {
    ThreadNice same(nice);
    for (;;) {
      Batch b;
      {
        std::unique_lock lock(mu);
        cv.wait(lock, [&] { return !full.empty() || reader_done; });
        if (full.empty()) return;
        b = std::move(full.front());
        full.pop_front();
      }
      absl::Status s = compress ? AppendCompressed(writer, comp, b.buf, b.segments, &blocks, &stats)
                                : AppendPlain(writer, b.buf, b.segments, &blocks, &stats);
      std::lock_guard lock(mu);
      free_bufs.push_back(b.buf);
      if (!s.ok() && writer_status.ok()) writer_status = s;
      cv.notify_all();
    }
  });

  // The reader fills each buffer with as many runs (or pieces of a run) as fit, and reads
  // them with one system call.
  absl::Status read_status;
  uint64_t done = 0;
  size_t next_run = 0;
  uint64_t run_off = 0;  // in runs[next_run]
  std::vector<Piece> pieces;
  while (next_run < runs.size()) {
    char* buf;
    {
      std::unique_lock lock(mu);
      cv.wait(lock, [&] { return !free_bufs.empty() || !writer_status.ok(); });
      if (!writer_status.ok()) break;
      buf = free_bufs.front();
      free_bufs.pop_front();
    }
    pieces.clear();
    uint64_t used = 0;
    while (next_run < runs.size() && used < buffer_bytes) {
      const Run& r = runs[next_run];
      uint64_t len = std::min<uint64_t>(r.len - run_off, buffer_bytes - used);
      pieces.push_back({r.vma, r.start + run_off, len, used, r.keep_zero});
      used += len;
      run_off += len;
      if (run_off == r.len) ++next_run, run_off = 0;
    }
    std::vector<bool> skipped(pieces.size(), false);
    if (!ReadPieces(pid, pieces, buf)) {
      for (size_t k = 0; k < pieces.size() && read_status.ok(); ++k) {
        const Piece& piece = pieces[k];
        absl::Status s = inject::ReadRemote(pid, piece.vaddr, buf + piece.offset, piece.len);
        if (s.ok()) continue;
        if (unread != nullptr) {
          // A running process may have unmapped the area meanwhile: the caller copies
          // these pages again once the process is frozen, if they still exist then.
          unread->emplace_back(piece.vaddr, piece.vaddr + piece.len);
          skipped[k] = true;
          continue;
        }
        read_status = Annotate(s, absl::StrFormat("read memory of pid %d at %#x", pid, piece.vaddr));
      }
    }
    if (!read_status.ok()) {
      std::lock_guard lock(mu);
      free_bufs.push_back(buf);
      break;
    }
    Batch batch{{}, buf};
    for (size_t k = 0; k < pieces.size(); ++k) {
      if (skipped[k]) continue;
      uint64_t z0 = std::max(zeroed.first, pieces[k].vaddr), z1 = std::min(zeroed.second, pieces[k].vaddr + pieces[k].len);
      if (z0 < z1) std::memset(buf + pieces[k].offset + (z0 - pieces[k].vaddr), 0, z1 - z0);
      bool skip_zero = vmas[pieces[k].vma].kind() != image::Vma::FILE_PRIVATE;
      AddSegments(buf, pieces[k], skip_zero, /*checksum=*/!compress, &batch.segments);
    }
    {
      std::lock_guard lock(mu);
      full.push_back(std::move(batch));
    }
    cv.notify_all();
    done += used;
    if (progress) progress(done, total);
    if (done == used) FaultPoint("pages");  // the first buffer is on its way to the image
    read_status = CheckCancelled();
    if (!read_status.ok()) break;
  }
  {
    std::lock_guard lock(mu);
    reader_done = true;
  }
  cv.notify_all();
  writer_thread.join();
  RETURN_IF_ERROR(read_status);
  RETURN_IF_ERROR(writer_status);
  auto t_copied = std::chrono::steady_clock::now();
  for (size_t i = 0; i < vmas.size(); ++i) {
    for (auto& b : blocks[i]) *vmas[i].add_blocks() = std::move(b);
  }
  CAIRN_LOG_DEBUG("event=dump_pages pid={} runs={} bytes={} find_ms={:.2f} copy_ms={:.2f} record_ms={:.2f}", pid,
                  runs.size(), stats.bytes, std::chrono::duration<double>(t_found - t_start).count() * 1e3,
                  std::chrono::duration<double>(t_copied - t_found).count() * 1e3,
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - t_copied).count() * 1e3);
  return stats;
}

}  // namespace cairn::dump
