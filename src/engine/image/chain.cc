#include "engine/image/chain.h"

#include <filesystem>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace cairn::image {
namespace {

// Disjoint half-open ranges [start, end), keyed by start.
using Ranges = std::map<uint64_t, uint64_t>;

// Removes [a, b) from `r`, calling `take(start, end)` for each part that was in it.
template <typename F>
void Take(Ranges& r, uint64_t a, uint64_t b, F take) {
  auto it = r.upper_bound(a);
  if (it != r.begin()) --it;
  while (it != r.end() && it->first < b) {
    uint64_t s = it->first, e = it->second;
    if (e <= a) {
      ++it;
      continue;
    }
    uint64_t cs = std::max(s, a), ce = std::min(e, b);
    take(cs, ce);
    it = r.erase(it);  // the next range; the emplaces below do not move it
    if (s < cs) r.emplace(s, cs);
    if (ce < e) r.emplace(ce, e);  // ce == b: the loop ends
  }
}

// Keeps only the parts of `r` inside `keep` (disjoint ranges).
Ranges Intersect(const Ranges& r, const Ranges& keep) {
  Ranges out;
  for (const auto& [ks, ke] : keep) {
    Ranges copy = r;
    Take(copy, ks, ke, [&](uint64_t s, uint64_t e) { out.emplace(s, e); });
  }
  return out;
}

// A link of the chain reached through a symbolic link (criu-compat's cairn.parent: a runtime
// keeps each dump in a directory of its own) is where the link leads: its own parent is named
// next to that. Every link is still checked by its id (and, at restore, its seal).
std::string Followed(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_symlink(path, ec)) return path;
  std::filesystem::path real = std::filesystem::canonical(path, ec);
  return ec ? path : real.string();
}

}  // namespace

absl::Status CheckParentName(const std::string& name) {
  if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos ||
      name.find('\0') != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        "parent checkpoint '", name, "' must be a directory next to the new checkpoint, named without any '/' "
        "(chains live in one folder so that they move together)"));
  }
  return absl::OkStatus();
}

std::string ParentPath(const std::string& dir, const std::string& name) {
  std::filesystem::path p = std::filesystem::absolute(dir).lexically_normal();
  if (!p.has_filename()) p = p.parent_path();
  return (p.parent_path() / name).string();
}

absl::StatusOr<std::unique_ptr<ImageReader>> OpenChain(const std::string& dir) {
  ASSIGN_OR_RETURN(std::unique_ptr<ImageReader> top, ImageReader::Open(Followed(dir)));
  ImageReader* link = top.get();
  std::set<std::string> ids = {link->meta().id()};
  for (int depth = 1; link->meta().has_parent(); ++depth) {
    const ParentRef& ref = link->meta().parent();
    RETURN_IF_ERROR(Annotate(CheckParentName(ref.dir()), absl::StrCat("checkpoint ", link->dir())));
    if (depth >= kMaxChainLength) {
      return absl::FailedPreconditionError(absl::StrCat("checkpoint ", dir, ": chain longer than ", kMaxChainLength,
                                                        " links; fold it with `cairn compact`"));
    }
    std::string path = Followed(ParentPath(link->dir(), ref.dir()));
    auto parent = ImageReader::Open(path);
    if (!parent.ok()) {
      return Annotate(parent.status(), absl::StrCat("checkpoint ", link->dir(), " is incremental and needs its parent ",
                                                    path));
    }
    if ((*parent)->meta().id() != ref.id() || ref.id().empty()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "checkpoint ", link->dir(), " builds on parent ", path, " (id ", ref.id(), "), but that directory now holds "
          "another checkpoint (id ", (*parent)->meta().id(), "): the parent was replaced; put the original back"));
    }
    if (!ids.insert(ref.id()).second) {
      return absl::DataLossError(absl::StrCat("checkpoint ", dir, ": its chain of parents loops (corrupt image)"));
    }
    ImageReader* next = parent->get();
    link->set_parent(std::move(*parent));
    link = next;
  }
  return top;
}

const Process* FindProcess(const Checkpoint& meta, int pid) {
  if (meta.process().pid() == pid) return &meta.process();
  for (const Process& d : meta.descendants()) {
    if (d.pid() == pid && !d.zombie()) return &d;
  }
  return nullptr;
}

std::vector<Piece> ResolveArea(const ImageReader& img, const Process& proc, const Vma& v) {
  std::vector<Piece> pieces;
  Ranges want = {{v.start(), v.end()}};
  const ImageReader* cur = &img;
  const Process* p = &proc;
  std::vector<const Vma*> level = {&v};
  while (!want.empty()) {
    Ranges inherit;  // the parts of areas at this level that take older pages
    for (const Vma* a : level) {
      for (int i = a->blocks_size() - 1; i >= 0; --i) {  // newest block first
        const PageBlock& b = a->blocks(i);
        uint64_t bs = std::max(b.vaddr(), a->start());
        uint64_t be = std::min(b.vaddr() + b.length(), a->end());
        if (bs >= be) continue;
        Take(want, bs, be, [&](uint64_t s, uint64_t e) {
          if (!b.zero()) pieces.push_back({cur, &b, s - b.vaddr(), e - s});
        });
      }
      if (a->inherits()) inherit.emplace(a->start(), a->end());
    }
    want = Intersect(want, inherit);
    cur = cur->parent();
    if (want.empty() || cur == nullptr) break;
    p = FindProcess(cur->meta(), p->pid());
    if (p == nullptr) break;
    level.clear();
    for (const Vma& a : p->vmas()) {
      auto it = want.upper_bound(a.start());
      bool overlaps = (it != want.end() && it->first < a.end());
      if (it != want.begin()) overlaps = overlaps || std::prev(it)->second > a.start();
      if (overlaps) level.push_back(&a);
    }
  }
  return pieces;
}

uint64_t PieceBytes(const std::vector<Piece>& pieces) {
  uint64_t n = 0;
  for (const Piece& p : pieces) n += p.len;
  return n;
}

}  // namespace cairn::image
