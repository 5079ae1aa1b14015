#include "engine/image/compact.h"

#include <fcntl.h>
#include <linux/fs.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "engine/image/chain.h"
#include "engine/image/image.h"

namespace cairn::image {
namespace {

// Copies the resolved pages of every area of `proc` (from `img`'s chain) into `writer`,
// replacing the record's blocks.
absl::Status CopyPages(const ImageReader& img, const Process& src, Process* dst, ImageWriter& writer,
                       uint64_t* bytes) {
  for (int i = 0; i < src.vmas_size(); ++i) {
    const Vma& v = src.vmas(i);
    std::vector<Piece> pieces = ResolveArea(img, src, v);
    Vma* out = dst->mutable_vmas(i);
    out->clear_blocks();
    out->set_inherits(false);
    // Each stored block is read (and verified) once for all its pieces.
    std::map<const PageBlock*, std::vector<const Piece*>> by_block;
    for (const Piece& p : pieces) by_block[p.block].push_back(&p);
    std::vector<PageBlock> blocks;
    std::vector<char> buf;
    for (const auto& [b, ps] : by_block) {
      buf.resize(b->length());
      RETURN_IF_ERROR(ps.front()->image->ReadBlock(*b, buf.data()));
      for (const Piece* p : ps) {
        ASSIGN_OR_RETURN(PageBlock nb, writer.AppendPages(b->vaddr() + p->offset, buf.data() + p->offset, p->len));
        blocks.push_back(std::move(nb));
        *bytes += p->len;
      }
    }
    std::sort(blocks.begin(), blocks.end(), [](const PageBlock& a, const PageBlock& b) { return a.vaddr() < b.vaddr(); });
    for (auto& b : blocks) *out->add_blocks() = std::move(b);
  }
  return absl::OkStatus();
}

// Copies the saved file contents `proc` refers to (from the newest image's files.img).
absl::Status CopyFiles(const ImageReader& img, Process* proc, ImageWriter& writer) {
  for (Vma& v : *proc->mutable_vmas()) {
    if (!v.file_deleted() || v.content_size() == 0) continue;
    ASSIGN_OR_RETURN(std::string content, img.FileContent(v));
    ASSIGN_OR_RETURN(auto blob, writer.AppendBytes(content));
    v.set_content_offset(blob.offset);
  }
  for (Fd& fd : *proc->mutable_fds()) {
    if (!fd.deleted() && fd.content_size() == 0) continue;
    ASSIGN_OR_RETURN(std::string content, img.FileContent(fd));
    ASSIGN_OR_RETURN(auto blob, writer.AppendBytes(content));
    fd.set_content_offset(blob.offset);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<CompactResult> Compact(const std::string& dir, const std::string& out, const ImageKey* check,
                                      const ImageKey* seal) {
  ASSIGN_OR_RETURN(std::unique_ptr<ImageReader> img, OpenChain(dir));
  CompactResult result;
  for (const ImageReader* l = img.get(); l != nullptr; l = l->parent()) {
    ++result.links;
    if (check != nullptr) RETURN_IF_ERROR(Annotate(CheckSeal(l->dir(), *check), absl::StrCat("compact ", dir)));
  }
  std::string base = dir;
  while (base.size() > 1 && base.back() == '/') base.pop_back();
  std::string target = out.empty() ? base + ".compact" : out;
  ASSIGN_OR_RETURN(std::unique_ptr<ImageWriter> writer, ImageWriter::Create(target));
  RETURN_IF_ERROR(writer->SetSealKey(seal));
  Checkpoint meta = img->meta();
  meta.clear_parent();
  std::vector<std::pair<const Process*, Process*>> procs = {{&img->meta().process(), meta.mutable_process()}};
  for (int i = 0; i < meta.descendants_size(); ++i) {
    procs.push_back({&img->meta().descendants(i), meta.mutable_descendants(i)});
  }
  if (meta.has_in_flight()) procs.push_back({&img->meta().in_flight(), meta.mutable_in_flight()});
  for (auto [src, dst] : procs) {
    RETURN_IF_ERROR(Annotate(CopyPages(*img, *src, dst, *writer, &result.bytes), absl::StrCat("compact ", dir)));
    RETURN_IF_ERROR(Annotate(CopyFiles(*img, dst, *writer), absl::StrCat("compact ", dir)));
  }
  RETURN_IF_ERROR(writer->Commit(meta));
  if (!out.empty()) return result;
  // Swap the standalone image in; the chain's old top ends up at DIR.compact, then goes.
  if (::syscall(SYS_renameat2, AT_FDCWD, target.c_str(), AT_FDCWD, base.c_str(), RENAME_EXCHANGE) != 0) {
    absl::Status s = ErrnoStatus(absl::StrCat("exchange ", target, " with ", base));
    std::error_code ec;
    std::filesystem::remove_all(target, ec);
    return s;
  }
  std::error_code ec;
  std::filesystem::remove_all(target, ec);
  return result;
}

}  // namespace cairn::image
