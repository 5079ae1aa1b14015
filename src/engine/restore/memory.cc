#include "engine/restore/memory.h"

#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/shm.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <optional>
#include <mutex>
#include <set>
#include <thread>

#include "absl/strings/str_format.h"
#include "common/log.h"
#include "common/status.h"
#include "common/unique_fd.h"
#include "engine/image/chain.h"
#include "engine/image/format.h"
#include "engine/inject/stop_loop.h"
#include "engine/lazy/launch.h"
#include "engine/restore/file_identity.h"
#include "engine/machine/vdso.h"
#include "engine/proc/maps.h"
#include "engine/proc/pidfd.h"

namespace cairn::restore {
namespace {

constexpr int kMapDroppable = 0x08;       // Linux 6.11+, not in Debian 12's headers
constexpr uint64_t kMlockOnfault = 0x01;  // MLOCK_ONFAULT
constexpr uint64_t kMadvGuardInstall = 102;  // Linux 6.13+

constexpr uint64_t kPage = 4096;
constexpr size_t kScratchStructs = 1024;  // where syscall structures go in the scratch area

bool Overlaps(uint64_t a0, uint64_t a1, uint64_t b0, uint64_t b1) { return a0 < b1 && b0 < a1; }

bool IsKernelArea(const std::string& path) {
  return path == "[vdso]" || path == "[vvar]" || path == "[vvar_vclock]" || path == "[vsyscall]";
}

absl::Status CheckSameFile(pid_t pid, int remote_fd, const image::FileId& want, const std::string& path,
                           bool check_content) {
  std::string link = absl::StrCat("/proc/", pid, "/fd/", remote_fd);
  struct stat st {};
  if (::stat(link.c_str(), &st) != 0) return ErrnoStatus("stat " + link + " (" + path + ")");
  return restore::CheckSameFile(st, want, path, check_content);
}

bool HasFlag(const image::Vma& v, absl::string_view flag) {
  return std::find(v.vm_flags().begin(), v.vm_flags().end(), flag) != v.vm_flags().end();
}

int MadviseFor(const std::string& flag) {
  if (flag == "dd") return MADV_DONTDUMP;
  if (flag == "dc") return MADV_DONTFORK;
  if (flag == "wf") return MADV_WIPEONFORK;
  if (flag == "hg") return MADV_HUGEPAGE;
  if (flag == "nh") return MADV_NOHUGEPAGE;
  return -1;
}

// A userfaultfd created inside the task (so that it belongs to the task's address
// space), with the anonymous areas to fill registered in missing mode; returns the
// restorer's copy of it (pidfd_getfd). UFFDIO_COPY then allocates each page and copies
// into it directly, where a write through process_vm_writev would first fault the page
// in zeroed. Nothing is left behind: the task's descriptor is closed after the fill,
// which unregisters every range.
absl::StatusOr<UniqueFd> OpenFillUffd(inject::Injector& inj, inject::RemoteScratch& scratch,
                                      const std::vector<const image::Vma*>& areas, long* remote_fd) {
  if (areas.empty()) return absl::NotFoundError("no anonymous area to fill");
  ASSIGN_OR_RETURN(long rfd, inj.Call("userfaultfd", SYS_userfaultfd, O_CLOEXEC));
  *remote_fd = rfd;
  auto fail = [&](absl::Status s) {
    (void)inj.Call("close userfaultfd", SYS_close, static_cast<uint64_t>(rfd));
    *remote_fd = -1;
    return s;
  };
  uffdio_api api{};
  api.api = UFFD_API;
  auto addr = scratch.Put(kScratchStructs, &api, sizeof api);
  if (!addr.ok()) return fail(addr.status());
  if (auto rc = inj.Call("ioctl(UFFDIO_API)", SYS_ioctl, static_cast<uint64_t>(rfd), UFFDIO_API, *addr); !rc.ok()) {
    return fail(rc.status());
  }
  // One registration per run of adjacent areas (a process with 50,000 areas side by side
  // would otherwise take 50,000 injected calls): a range may span several areas when each of
  // them can take missing-page faults, which every area here can.
  std::vector<std::pair<uint64_t, uint64_t>> runs;
  for (const image::Vma* v : areas) runs.emplace_back(v->start(), v->end());
  std::sort(runs.begin(), runs.end());
  std::vector<std::pair<uint64_t, uint64_t>> merged;
  for (const auto& r : runs) {
    if (!merged.empty() && merged.back().second == r.first) {
      merged.back().second = r.second;
    } else {
      merged.push_back(r);
    }
  }
  for (const auto& [start, end] : merged) {
    uffdio_register reg{};
    reg.range.start = start;
    reg.range.len = end - start;
    reg.mode = UFFDIO_REGISTER_MODE_MISSING;
    addr = scratch.Put(kScratchStructs, &reg, sizeof reg);
    if (!addr.ok()) return fail(addr.status());
    auto rc = inj.Call("ioctl(UFFDIO_REGISTER)", SYS_ioctl, static_cast<uint64_t>(rfd), UFFDIO_REGISTER, *addr);
    if (!rc.ok()) return fail(rc.status());
  }
  auto local = proc::CopyFd(inj.tid(), rfd);
  if (!local.ok()) return fail(local.status());
  return local;
}

absl::Status UffdCopy(int uffd, uint64_t dst, const char* src, uint64_t len) {
  uint64_t done = 0;
  while (done < len) {
    uffdio_copy c{};
    c.dst = dst + done;
    c.src = reinterpret_cast<uint64_t>(src + done);
    c.len = len - done;
    if (::ioctl(uffd, UFFDIO_COPY, &c) == 0) {
      done = len;
      break;
    }
    if (c.copy > 0) {
      done += static_cast<uint64_t>(c.copy);
      continue;
    }
    if (errno == EAGAIN || errno == EINTR) continue;
    return ErrnoStatus(absl::StrFormat("UFFDIO_COPY to %#x", dst + done));
  }
  return absl::OkStatus();
}

// An area to fill and the pieces of stored blocks that make up its pages.
struct AreaFill {
  const image::Vma* vma;
  std::vector<image::Piece> pieces;
};

// Writes the saved pages of `areas` into the task, verifying every block, with `threads`
// parallel workers; each stored block is read once, for all of its pieces. Anonymous
// memory (private or shared) is filled with UFFDIO_COPY where the kernel allows it (see
// OpenFillUffd), the rest with process_vm_writev.
absl::Status FillAreas(inject::Injector& inj, inject::RemoteScratch& scratch, const std::string& what,
                       const std::vector<AreaFill>& areas, int threads) {
  pid_t pid = inj.tid();
  std::vector<const image::Vma*> uffd_areas;
  for (const AreaFill& a : areas) {
    if (a.vma->kind() == image::Vma::ANON || a.vma->kind() == image::Vma::SHARED_ANON) uffd_areas.push_back(a.vma);
  }
  long remote_uffd = -1;
  auto uffd = OpenFillUffd(inj, scratch, uffd_areas, &remote_uffd);
  if (!uffd.ok()) {
    CAIRN_LOG_DEBUG("event=uffd_fill_unavailable pid={} error=\"{}\"", pid, uffd.status().ToString());
  }
  struct Unit {
    const image::ImageReader* img = nullptr;
    const image::PageBlock* block = nullptr;
    bool by_uffd = false;
    std::vector<std::pair<uint64_t, uint64_t>> parts;  // (offset in block, length)
  };
  std::vector<Unit> units;
  std::map<const image::PageBlock*, size_t> unit_of;
  for (const AreaFill& a : areas) {
    const image::Vma* v = a.vma;
    bool anon = v->kind() == image::Vma::ANON || v->kind() == image::Vma::SHARED_ANON;
    for (const image::Piece& p : a.pieces) {
      const image::PageBlock& b = *p.block;
      if (b.length() % kPage != 0 || p.offset % kPage != 0 || p.len % kPage != 0 || p.offset + p.len > b.length() ||
          b.vaddr() + p.offset < v->start() || b.vaddr() + p.offset + p.len > v->end()) {
        return absl::DataLossError(absl::StrFormat("%s: block at %#x lies outside its area %#x-%#x (corrupt image)",
                                                   p.image->dir(), b.vaddr(), v->start(), v->end()));
      }
      auto [it, fresh] = unit_of.emplace(&b, units.size());
      if (fresh) units.push_back({p.image, &b, uffd.ok() && anon, {}});
      units[it->second].parts.emplace_back(p.offset, p.len);
    }
  }
  std::atomic<size_t> next{0};
  std::mutex mu;
  absl::Status fill_status;  // GUARDED_BY(mu)
  uint64_t max_block = 0;
  for (const Unit& u : units) max_block = std::max<uint64_t>(max_block, u.block->length());
  if (max_block > (64u << 20)) {
    return absl::DataLossError(absl::StrCat(what, ": a page block of ", max_block, " bytes is larger than any "
                                            "cairn writes (corrupt image)"));
  }
  auto worker = [&] {
    std::vector<char> buf(max_block);
    for (;;) {
      size_t i = next.fetch_add(1);
      if (i >= units.size()) return;
      const Unit& u = units[i];
      const image::PageBlock& b = *u.block;
      absl::Status s = u.img->ReadBlock(b, buf.data());
      for (size_t k = 0; s.ok() && k < u.parts.size(); ++k) {
        auto [off, len] = u.parts[k];
        s = u.by_uffd ? UffdCopy(uffd->get(), b.vaddr() + off, buf.data() + off, len)
                      : inject::WriteRemote(pid, b.vaddr() + off, buf.data() + off, len);
      }
      if (!s.ok()) {
        std::lock_guard lock(mu);
        if (fill_status.ok()) fill_status = s;
        next = units.size();
        return;
      }
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(worker);
  worker();
  for (auto& t : pool) t.join();
  if (remote_uffd >= 0) {
    // Closing the last reference unregisters every range.
    RETURN_IF_ERROR(inj.Call("close userfaultfd", SYS_close, static_cast<uint64_t>(remote_uffd)).status());
  }
  return fill_status;
}

}  // namespace

absl::StatusOr<uint64_t> FindFreeRange(const image::Process& proc, const std::vector<Range>& avoid, uint64_t len) {
  std::vector<Range> used = avoid;
  for (const image::Vma& v : proc.vmas()) used.push_back({v.start(), v.end()});
  // Keep a guard page on each side so the kernel never merges our area with a saved one.
  std::sort(used.begin(), used.end(), [](const Range& a, const Range& b) { return a.start < b.start; });
  uint64_t cand = 1 << 20;
  for (const Range& r : used) {
    if (r.end <= cand) continue;
    if (r.start >= cand + len + kPage) return cand;
    cand = std::max(cand, r.end + kPage);
  }
  if (cand + len < (1ULL << 47)) return cand;
  return absl::ResourceExhaustedError("no free address range for the restorer's work area");
}

namespace {

// `len` free bytes in the saved layout and `avoid`, as close to `near` as there are (a guard
// page on each side).
absl::StatusOr<uint64_t> FindFreeRangeNear(const image::Process& proc, const std::vector<Range>& avoid, uint64_t len,
                                           uint64_t near) {
  std::vector<Range> used = avoid;
  for (const image::Vma& v : proc.vmas()) used.push_back({v.start(), v.end()});
  std::sort(used.begin(), used.end(), [](const Range& a, const Range& b) { return a.start < b.start; });
  constexpr uint64_t kLow = 1 << 20, kHigh = 0x7ffffffff000;
  std::optional<uint64_t> best;
  auto dist = [&](uint64_t at) { return at > near ? at - near : near - at; };
  uint64_t from = kLow;  // the lowest free address of the current gap
  auto consider = [&](uint64_t to) {  // the gap [from, to)
    if (to < from + len + 2 * kPage) return;
    uint64_t at = std::clamp(near & ~(kPage - 1), from + kPage, to - kPage - len);
    if (!best || dist(at) < dist(*best)) best = at;
  };
  for (const Range& r : used) {
    if (r.start >= kHigh) break;
    if (r.start > from) consider(r.start);
    from = std::max(from, r.end);
  }
  consider(kHigh);
  if (!best) return absl::ResourceExhaustedError("no free address range for this kernel's vDSO");
  return *best;
}

}  // namespace

absl::Status ReplaceAddressSpace(inject::Injector& inj, const image::Process& proc, Range keep,
                                 const std::vector<Range>& staged, const std::string* old_vdso, bool skeleton) {
  pid_t pid = inj.tid();
  // The layout only (maps, not smaps: smaps walks every page table of the restorer's copy).
  ASSIGN_OR_RETURN(std::vector<proc::MapEntry> maps, proc::ReadMaps(pid));
  std::map<std::string, Range> cur_kernel;
  // What stays: the work area, the kernel's areas, the staging ranges (they hold only the shared
  // anonymous objects made for the tree). Everything else of the restorer's copy goes, in one
  // munmap per gap between those (munmap of an unmapped range is no error), not one per area.
  std::vector<Range> stays = {keep};
  for (const proc::MapEntry& m : maps) {
    if (IsKernelArea(m.path)) {
      cur_kernel[m.path] = {m.start, m.end};
      stays.push_back({m.start, m.end});
    }
  }
  for (const Range& r : staged) stays.push_back(r);
  std::sort(stays.begin(), stays.end(), [](const Range& a, const Range& b) { return a.start < b.start; });
  constexpr uint64_t kUserTop = 0x7ffffffff000;  // x86-64, 4-level page tables (the highest user page + 1)
  uint64_t lowest = UINT64_MAX, highest = 0;  // unmap only where the restorer's copy has areas
  for (const proc::MapEntry& m : maps) {
    if (m.end > kUserTop) continue;
    lowest = std::min(lowest, m.start);
    highest = std::max(highest, m.end);
  }
  uint64_t from = lowest;
  auto unmap_to = [&](uint64_t to) -> absl::Status {
    to = std::min(to, highest);
    if (from < to) {
      RETURN_IF_ERROR(inj.Call(absl::StrFormat("munmap restorer areas %#x-%#x", from, to), SYS_munmap, from, to - from)
                          .status());
    }
    return absl::OkStatus();
  };
  for (const Range& r : stays) {
    if (r.start >= kUserTop) continue;
    RETURN_IF_ERROR(unmap_to(r.start));
    from = std::max(from, r.end);
  }
  RETURN_IF_ERROR(unmap_to(kUserTop));
  // Saved kernel areas, keyed by name.
  std::map<std::string, Range> saved;
  for (const image::Vma& v : proc.vmas()) {
    if (v.kind() == image::Vma::VDSO || v.kind() == image::Vma::VVAR) saved[v.path()] = {v.start(), v.end()};
  }
  // A process that had unmapped its vDSO gets none (nor the areas it had unmapped with it).
  // (Areas missing from an image that has a vDSO mean another kernel: refused below, since the
  // vDSO's code may need them.)
  bool had_vdso = std::any_of(proc.vmas().begin(), proc.vmas().end(),
                              [](const image::Vma& v) { return v.kind() == image::Vma::VDSO; });
  for (auto it = cur_kernel.begin(); it != cur_kernel.end();) {
    const auto& [name, r] = *it;
    if (had_vdso || name == "[vsyscall]" || saved.count(name)) {
      ++it;
      continue;
    }
    if (!skeleton) {
      RETURN_IF_ERROR(inj.Call("munmap " + name + " (the process had unmapped it)", SYS_munmap, r.start,
                               r.end - r.start).status());
    }
    it = cur_kernel.erase(it);  // (the skeleton's: left where it is, for the tree's other processes)
  }
  // Where each of this kernel's areas goes: the saved place of the same area when the vDSO
  // is the checkpoint's; with a proxy, one block (their layout kept: the vDSO reads its vvar
  // pages at fixed offsets) in free space near the old vDSO, reachable by short jumps.
  bool proxy = old_vdso != nullptr && had_vdso;
  std::map<std::string, Range> dest;
  if (!proxy) {
    for (const auto& [name, r] : cur_kernel) {
      if (name == "[vsyscall]") continue;
      if (!saved.count(name)) {
        return absl::FailedPreconditionError(absl::StrCat(
            "this kernel has a ", name, " area the checkpointed process did not have: the checkpoint comes from "
            "another kernel, and this image predates cairn's vDSO redirection: restore it on a machine running "
            "the kernel it was taken on"));
      }
    }
    for (const auto& [name, r] : saved) {
      if (!cur_kernel.count(name) || cur_kernel[name].end - cur_kernel[name].start != r.end - r.start) {
        return absl::FailedPreconditionError(absl::StrCat(
            "the checkpoint's ", name, " area does not match this kernel's: the checkpoint comes from another "
            "kernel, and this image predates cairn's vDSO redirection: restore it on a machine running the kernel it "
            "was taken on"));
      }
    }
    dest = saved;
  } else {
    uint64_t lo = UINT64_MAX, hi = 0;
    for (const auto& [name, r] : cur_kernel) {
      if (name == "[vsyscall]") continue;
      lo = std::min(lo, r.start);
      hi = std::max(hi, r.end);
    }
    if (!saved.count("[vdso]") || !cur_kernel.count("[vdso]")) {
      return absl::FailedPreconditionError("the checkpoint or this kernel has no [vdso] area to redirect");
    }
    std::vector<Range> avoid = staged;
    avoid.push_back(keep);
    for (const auto& [name, r] : saved) avoid.push_back(r);
    ASSIGN_OR_RETURN(uint64_t base, FindFreeRangeNear(proc, avoid, hi - lo, saved["[vdso]"].start));
    for (const auto& [name, r] : cur_kernel) {
      if (name != "[vsyscall]") dest[name] = {base + (r.start - lo), base + (r.end - lo)};
    }
  }
  // Move each kernel area to its place. If a destination overlaps a current kernel area,
  // park everything out of the way first.
  bool clash = false;
  for (const auto& [name, dst] : dest) {
    for (const auto& [n2, src] : cur_kernel) {
      if (Overlaps(dst.start, dst.end, src.start, src.end) && dst.start != src.start) clash = true;
    }
  }
  if (clash) {
    uint64_t total = 0;
    for (const auto& [name, r] : cur_kernel) total += r.end - r.start + kPage;
    std::vector<Range> avoid = {keep};
    for (const auto& [name, r] : cur_kernel) avoid.push_back(r);
    for (const auto& [name, r] : dest) avoid.push_back(r);
    ASSIGN_OR_RETURN(uint64_t park, FindFreeRange(proc, avoid, total));
    for (auto& [name, r] : cur_kernel) {
      if (name == "[vsyscall]") continue;
      RETURN_IF_ERROR(inj.Call("mremap " + name, SYS_mremap, r.start, r.end - r.start, r.end - r.start,
                               MREMAP_MAYMOVE | MREMAP_FIXED, park).status());
      r = {park, park + (r.end - r.start)};
      park = r.end + kPage;
    }
  }
  for (const auto& [name, dst] : dest) {
    Range src = cur_kernel[name];
    if (src.start == dst.start) continue;
    RETURN_IF_ERROR(inj.Call("mremap " + name + " to its place", SYS_mremap, src.start, src.end - src.start,
                             src.end - src.start, MREMAP_MAYMOVE | MREMAP_FIXED, dst.start)
                        .status());
  }
  if (!proxy) {
    // The vDSO code must be the one the process was using.
    for (const image::Vma& v : proc.vmas()) {
      if (v.kind() != image::Vma::VDSO) continue;
      std::string bytes(v.end() - v.start(), '\0');
      RETURN_IF_ERROR(inject::ReadRemote(pid, v.start(), bytes.data(), bytes.size()));
      if (image::Checksum(bytes.data(), bytes.size()) != proc.vdso_xxh3()) {
        return absl::FailedPreconditionError(
            "this machine's vDSO differs from the checkpointed process's (another kernel, or the same kernel on "
            "another CPU model: the kernel patches CPU-specific code into it), and this image predates cairn's "
            "vDSO redirection: restore it on the machine it was taken on");
      }
    }
    return absl::OkStatus();
  }
  // The proxy: the old vDSO's bytes at its old address, each function a jump to this
  // kernel's function of the same name.
  Range old = saved["[vdso]"], now = dest["[vdso]"];
  if (old_vdso->size() != old.end - old.start) {
    return absl::DataLossError("the checkpoint's vDSO image does not have its area's size (corrupt image)");
  }
  std::string fresh(now.end - now.start, '\0');
  RETURN_IF_ERROR(inject::ReadRemote(pid, now.start, fresh.data(), fresh.size()));
  ASSIGN_OR_RETURN(std::string code, machine::VdsoProxy(*old_vdso, old.start, fresh, now.start));
  RETURN_IF_ERROR(inj.Call("mmap the old vDSO's proxy", SYS_mmap, old.start, code.size(), PROT_READ | PROT_WRITE,
                           MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, static_cast<uint64_t>(-1), 0)
                      .status());
  RETURN_IF_ERROR(inject::WriteRemote(pid, old.start, code.data(), code.size()));
  RETURN_IF_ERROR(inj.Call("mprotect the old vDSO's proxy", SYS_mprotect, old.start, code.size(),
                           PROT_READ | PROT_EXEC).status());
  CAIRN_LOG_INFO("event=vdso_redirected pid={} old={:#x} new={:#x}", proc.pid(), old.start, now.start);
  return absl::OkStatus();
}

namespace {

// One shared anonymous object: the area whose pages were saved (the first one found) and the
// length of the largest area mapping it.
struct SharedAnonObject {
  uint64_t id = 0;
  const image::Process* proc = nullptr;
  const image::Vma* vma = nullptr;
  uint64_t len = 0;
};

std::vector<SharedAnonObject> SharedAnonObjects(const std::vector<const image::Process*>& procs) {
  std::vector<SharedAnonObject> out;
  std::map<uint64_t, size_t> index;
  for (const image::Process* p : procs) {
    for (const image::Vma& v : p->vmas()) {
      if (v.kind() != image::Vma::SHARED_ANON) continue;
      auto [it, fresh] = index.emplace(v.shmem_id(), out.size());
      if (fresh) out.push_back({v.shmem_id(), p, &v, 0});
      out[it->second].len = std::max(out[it->second].len, v.end() - v.start());
    }
  }
  return out;
}

}  // namespace

absl::StatusOr<SharedAnonStaging> PlanSharedAnon(const std::vector<const image::Process*>& procs,
                                                 std::vector<Range> avoid) {
  SharedAnonStaging staging;
  if (procs.empty()) return staging;
  for (const image::Process* p : procs) {
    for (const image::Vma& v : p->vmas()) avoid.push_back({v.start(), v.end()});
  }
  for (const SharedAnonObject& o : SharedAnonObjects(procs)) {
    ASSIGN_OR_RETURN(uint64_t at, FindFreeRange(*procs[0], avoid, o.len));
    staging[o.id] = {at, at + o.len};
    avoid.push_back(staging[o.id]);
  }
  return staging;
}

absl::Status CreateSharedAnon(inject::Injector& inj, inject::RemoteScratch& scratch, const image::ImageReader& img,
                              const std::vector<const image::Process*>& procs, const SharedAnonStaging& staging,
                              int threads) {
  // The root's address space holds only the work area (free in every layout) and the root's
  // own vDSO/vvar by now.
  std::vector<Range> kernel;
  for (const image::Vma& v : procs[0]->vmas()) {
    if (v.kind() == image::Vma::VDSO || v.kind() == image::Vma::VVAR) kernel.push_back({v.start(), v.end()});
  }
  // Objects are made in rounds of objects that do not overlap where they were saved: each
  // round is mapped there, filled, and moved to its staging ranges, clearing the way.
  std::vector<SharedAnonObject> pending = SharedAnonObjects(procs);
  while (!pending.empty()) {
    std::vector<SharedAnonObject> round, later;
    for (const SharedAnonObject& o : pending) {
      uint64_t start = o.vma->start();
      bool clash = std::any_of(round.begin(), round.end(), [&](const SharedAnonObject& r) {
        return Overlaps(start, start + o.len, r.vma->start(), r.vma->start() + r.len);
      });
      (clash ? later : round).push_back(o);
    }
    std::vector<AreaFill> areas;
    for (const SharedAnonObject& o : round) {
      uint64_t start = o.vma->start();
      for (const Range& k : kernel) {
        if (Overlaps(start, start + o.len, k.start, k.end)) {
          return absl::UnimplementedError(absl::StrFormat(
              "pid %d's shared anonymous memory at %#x-%#x lies where the root process (pid %d) had its vDSO; "
              "restoring such a tree is not supported yet",
              o.proc->pid(), start, start + o.len, procs[0]->pid()));
        }
      }
      ASSIGN_OR_RETURN(long addr, inj.Call(absl::StrFormat("mmap shared anonymous %#x-%#x", start, start + o.len),
                                           SYS_mmap, start, o.len, PROT_READ | PROT_WRITE,
                                           MAP_SHARED | MAP_ANONYMOUS | MAP_FIXED, static_cast<uint64_t>(-1), 0));
      if (static_cast<uint64_t>(addr) != start) return absl::InternalError("shared mapping placed elsewhere");
      AreaFill fill{o.vma, image::ResolveArea(img, *o.proc, *o.vma)};
      if (!fill.pieces.empty()) areas.push_back(std::move(fill));
    }
    RETURN_IF_ERROR(FillAreas(inj, scratch, img.dir(), areas, threads));
    for (const SharedAnonObject& o : round) {
      auto it = staging.find(o.id);
      if (it == staging.end() || it->second.end - it->second.start != o.len) {
        return absl::InternalError(absl::StrFormat("no staging range for shared anonymous object %d", o.id));
      }
      RETURN_IF_ERROR(inj.Call(absl::StrFormat("mremap shared anonymous %#x-%#x to staging %#x", o.vma->start(),
                                               o.vma->start() + o.len, it->second.start),
                               SYS_mremap, o.vma->start(), o.len, o.len, MREMAP_MAYMOVE | MREMAP_FIXED,
                               it->second.start)
                          .status());
    }
    pending = std::move(later);
  }
  return absl::OkStatus();
}

absl::Status PlaceSharedAnon(inject::Injector& inj, const image::Process& proc, const SharedAnonStaging& staging) {
  for (const image::Vma& v : proc.vmas()) {
    if (v.kind() != image::Vma::SHARED_ANON) continue;
    auto it = staging.find(v.shmem_id());
    if (it == staging.end() || v.end() - v.start() > it->second.end - it->second.start) {
      return absl::InternalError(absl::StrFormat("no staging range for shared anonymous %#x-%#x", v.start(), v.end()));
    }
    // Old size 0: a new mapping of the same shared pages, the staging one stays for the others.
    RETURN_IF_ERROR(inj.Call(absl::StrFormat("mremap shared anonymous %#x-%#x from staging", v.start(), v.end()),
                             SYS_mremap, it->second.start, 0, v.end() - v.start(), MREMAP_MAYMOVE | MREMAP_FIXED,
                             v.start())
                        .status());
  }
  for (const auto& [id, r] : staging) {
    RETURN_IF_ERROR(inj.Call("munmap shared anonymous staging", SYS_munmap, r.start, r.end - r.start).status());
  }
  return absl::OkStatus();
}

namespace {

// An AIO context made again (dump/aio.h): io_setup for the number of events that gives a ring
// of the saved size (the kernel asks for 2n + 2 slots, at least 8 per possible CPU, and fills
// the ring's last page: a ring of p pages has 128p - 1; n = 64p - 2 gives p pages), checked,
// then moved with mremap to the saved ring's address, which is the context's id (the
// kernel follows a ring that moves). The saved ring held no completion not yet collected, so the
// new one, empty, is what the process would have found.
absl::Status RecreateAioRing(inject::Injector& inj, inject::RemoteScratch& scratch, const image::Vma& v) {
  constexpr size_t kCtxOff = 8192;
  uint64_t ctx = 0;
  ASSIGN_OR_RETURN(uint64_t ctx_addr, scratch.Put(kCtxOff, &ctx, sizeof ctx));
  std::string what = absl::StrFormat("the AIO context (io_setup) at %#x", v.start());
  uint64_t len = v.end() - v.start();
  // The saved address held while io_setup places the new ring (the kernel refuses to move a ring
  // onto a range it overlaps); the move replaces the hold.
  ASSIGN_OR_RETURN(long held, inj.Call("hold the address of " + what, SYS_mmap, v.start(), len, PROT_NONE,
                                       static_cast<uint64_t>(MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE),
                                       static_cast<uint64_t>(-1), 0));
  if (static_cast<uint64_t>(held) != v.start()) {
    return absl::InternalError(absl::StrFormat("mmap placed the hold of %s at %#x", what, held));
  }
  uint64_t n = std::max<uint64_t>((v.aio_nr() + 1) / 2, 3) - 2;
  RETURN_IF_ERROR(inj.Call("io_setup for " + what, SYS_io_setup, n, ctx_addr).status());
  RETURN_IF_ERROR(scratch.Get(kCtxOff, &ctx, sizeof ctx));
  uint32_t header[2] = {};  // id, nr
  RETURN_IF_ERROR(inject::ReadRemote(inj.tid(), ctx, header, sizeof header));
  if (header[1] != v.aio_nr()) {
    (void)inj.Call("io_destroy", SYS_io_destroy, ctx);
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s had a ring of %u events; here io_setup gives %u (the kernel sizes rings by the number of possible "
        "CPUs and its version: this machine has more, or another kernel) — restore it on a machine like the one "
        "it was checkpointed on",
        what, v.aio_nr(), header[1]));
  }
  ASSIGN_OR_RETURN(long at, inj.Call("mremap " + what, SYS_mremap, ctx, len, len,
                                     static_cast<uint64_t>(MREMAP_MAYMOVE | MREMAP_FIXED), v.start()));
  if (static_cast<uint64_t>(at) != v.start()) {
    return absl::InternalError(absl::StrFormat("mremap moved %s to %#x", what, at));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status MapAndFill(inject::Injector& inj, inject::RemoteScratch& scratch, uint64_t loop,
                        const image::ImageReader& img, const image::Process& proc, int threads,
                        const std::map<std::pair<uint64_t, uint64_t>, int>& file_objects,
                        lazy::LazyHandlers* lazy_handlers) {
  bool lazy = lazy_handlers != nullptr;
  pid_t pid = inj.tid();
  // The pages of each area, resolved down the chain of an incremental checkpoint.
  std::map<const image::Vma*, std::vector<image::Piece>> pieces;
  for (const image::Vma& v : proc.vmas()) {
    if (v.kind() == image::Vma::VDSO || v.kind() == image::Vma::VVAR || v.kind() == image::Vma::SHARED_ANON) continue;
    std::vector<image::Piece> p = image::ResolveArea(img, proc, v);
    if (!p.empty()) pieces[&v] = std::move(p);
  }
  // 1. Map every area, writable while it is filled: the files opened one call at a time (a
  // mapping needs its descriptor), the mappings all in one stop (they depend on nothing else).
  std::map<std::string, long> open_files;  // path+mode -> remote fd
  std::vector<inject::BatchedCall> maps;
  std::vector<const image::Vma*> mapped;
  for (const image::Vma& v : proc.vmas()) {
    if (v.kind() == image::Vma::VDSO || v.kind() == image::Vma::VVAR) continue;
    if (v.kind() == image::Vma::SHARED_ANON) continue;  // inherited from the root, filled there
    if (v.kind() == image::Vma::AIO_RING) continue;     // once every area is in place, below
    if (v.kind() == image::Vma::SYSV_SHM) {
      // Attached again by id, in the job's IPC namespace where the segment was made again.
      uint64_t shmflg = (v.prot() & PROT_WRITE ? 0 : SHM_RDONLY) | (v.prot() & PROT_EXEC ? SHM_EXEC : 0);
      ASSIGN_OR_RETURN(long addr, inj.Call(absl::StrFormat("shmat System V segment %d at %#x", v.shmem_id(), v.start()),
                                           SYS_shmat, v.shmem_id(), v.start(), shmflg));
      if (static_cast<uint64_t>(addr) != v.start()) {
        return absl::InternalError(absl::StrFormat("shmat placed %#x at %#x", v.start(), addr));
      }
      continue;
    }
    uint64_t len = v.end() - v.start();
    uint32_t prot = v.prot();
    bool filled = pieces.count(&v) > 0;
    if (filled) prot |= PROT_WRITE;
    int flags = MAP_FIXED;
    long fd = -1;
    uint64_t off = 0;
    switch (v.kind()) {
      case image::Vma::ANON:
        // MAP_DROPPABLE (smaps "dp", Linux 6.11+) is a mapping type of its own: under memory
        // pressure the kernel may drop its pages, which then read as zeros.
        flags |= (HasFlag(v, "dp") ? kMapDroppable : MAP_PRIVATE) | MAP_ANONYMOUS;
        if (HasFlag(v, "gd")) flags |= MAP_GROWSDOWN;
        break;
      case image::Vma::SHARED_ANON:
        flags |= MAP_SHARED | MAP_ANONYMOUS;
        break;
      case image::Vma::FILE_PRIVATE:
      case image::Vma::FILE_SHARED: {
        // A shared mapping may be made writable later (mprotect) exactly when the file was
        // opened for writing: smaps "mw" (VM_MAYWRITE). Images without flags: its protection.
        bool shared_write = v.kind() == image::Vma::FILE_SHARED &&
                            (v.vm_flags_size() > 0 ? HasFlag(v, "mw") : (v.prot() & PROT_WRITE) != 0);
        int oflags = (shared_write ? O_RDWR : O_RDONLY) | O_CLOEXEC;
        std::string path = v.path();
        bool deleted_readonly = false;
        // A scratch file made again here (restore/files.h) is mapped like a deleted file's copy.
        const bool made = v.scratch() && file_objects.count({v.file().dev(), v.file().ino()}) != 0;
        if (v.file_deleted() || made) {
          auto d = file_objects.find({v.file().dev(), v.file().ino()});
          if (d == file_objects.end()) {
            return absl::DataLossError(absl::StrCat(img.dir(), ": no saved content for deleted mapped file ", v.path(),
                                                    " (corrupt image)"));
          }
          fd = d->second;
          // The restorer's copy of the file is open for writing; a shared mapping the process
          // could not make writable is made through a read-only open of it.
          if (v.kind() == image::Vma::FILE_SHARED && !shared_write) {
            path = absl::StrCat("/proc/self/fd/", d->second);
            deleted_readonly = true;
          }
        }
        if (!(v.file_deleted() || made) || deleted_readonly) {
          std::string key = absl::StrCat(oflags, ":", path);
          auto it = open_files.find(key);
          if (it == open_files.end()) {
            ASSIGN_OR_RETURN(uint64_t path_addr, scratch.PutString(0, path));
            ASSIGN_OR_RETURN(long rfd, inj.Call("open " + path, SYS_openat, static_cast<uint64_t>(AT_FDCWD),
                                                path_addr, static_cast<uint64_t>(oflags), 0));
            // Content must match for private mappings (their clean pages come from the file).
            if (!deleted_readonly) {
              RETURN_IF_ERROR(CheckSameFile(pid, static_cast<int>(rfd), v.file(), v.path(),
                                            v.kind() == image::Vma::FILE_PRIVATE));
            }
            it = open_files.emplace(key, rfd).first;
          }
          fd = it->second;
        }
        flags |= v.kind() == image::Vma::FILE_SHARED ? MAP_SHARED : MAP_PRIVATE;
        off = v.pgoff();
        break;
      }
      default:
        break;
    }
    // A reservation made with MAP_NORESERVE (smaps "nr") must not count against overcommit now either.
    if (std::find(v.vm_flags().begin(), v.vm_flags().end(), "nr") != v.vm_flags().end()) flags |= MAP_NORESERVE;
    maps.push_back({SYS_mmap, {v.start(), len, prot, static_cast<uint64_t>(flags), static_cast<uint64_t>(fd), off}});
    mapped.push_back(&v);
  }
  RETURN_IF_ERROR(inject::RunCalls(
      inj, scratch, loop, maps,
      [&](size_t i) {
        return absl::StrFormat("mmap %#x-%#x (%s)", mapped[i]->start(), mapped[i]->end(), mapped[i]->path());
      },
      /*repeatable=*/true));
  for (size_t i = 0; i < maps.size(); ++i) {
    if (static_cast<uint64_t>(maps[i].result) != mapped[i]->start()) {
      return absl::InternalError(absl::StrFormat("mmap placed %#x at %#x", mapped[i]->start(), maps[i].result));
    }
  }
  for (const auto& [key, rfd] : open_files) {
    RETURN_IF_ERROR(inj.Call("close", SYS_close, static_cast<uint64_t>(rfd)).status());
  }
  for (const image::Vma& v : proc.vmas()) {
    if (v.kind() == image::Vma::AIO_RING) RETURN_IF_ERROR(RecreateAioRing(inj, scratch, v));
  }

  CAIRN_LOG_DEBUG("event=restore_stage stage=areas_mapped pid={}", pid);
  // 2. Fill pages, verifying every block, with parallel writers.
  std::vector<AreaFill> areas;
  std::vector<lazy::LazyArea> lazy_areas;
  for (auto& [v, p] : pieces) {
    if (lazy && lazy::IsLazyKind(*v)) {
      lazy_areas.push_back({v, p});
    } else {
      areas.push_back({v, std::move(p)});
    }
  }
  RETURN_IF_ERROR(FillAreas(inj, scratch, img.dir(), areas, threads));
  if (lazy) RETURN_IF_ERROR(lazy::StartLazyHandler(inj, scratch, lazy_areas, img.dir(), pid, proc.pid(), lazy_handlers));

  // 3. Final protections and advice, in one stop (each call stands alone).
  inject::NamedCalls finals;
  auto add = [&](std::string what, long nr, uint64_t a0, uint64_t a1, uint64_t a2) {
    finals.Add(std::move(what), nr, {a0, a1, a2, 0, 0, 0});
  };
  for (const image::Vma& v : proc.vmas()) {
    if (v.kind() == image::Vma::VDSO || v.kind() == image::Vma::VVAR) continue;
    if (v.kind() == image::Vma::AIO_RING) {  // the kernel made it: only locked again, if it was
      if (HasFlag(v, "lo")) add("mlock an AIO ring", SYS_mlock, v.start(), v.end() - v.start(), 0);
      continue;
    }
    bool sysv_other = v.kind() == image::Vma::SYSV_SHM && (v.prot() & (PROT_READ | PROT_WRITE)) != PROT_READ &&
                      (v.prot() & (PROT_READ | PROT_WRITE)) != (PROT_READ | PROT_WRITE);
    if (((pieces.count(&v) > 0 || v.kind() == image::Vma::SHARED_ANON) && v.prot() != (PROT_READ | PROT_WRITE)) ||
        sysv_other) {
      add("mprotect", SYS_mprotect, v.start(), v.end() - v.start(), v.prot());
    }
    for (const std::string& f : v.vm_flags()) {
      int advice = MadviseFor(f);
      if (advice < 0) continue;
      // A droppable mapping has these by nature; madvise refuses to take them away or add them.
      if (HasFlag(v, "dp") && (f == "wf" || f == "dd")) continue;
      add(absl::StrCat("madvise ", f), SYS_madvise, v.start(), v.end() - v.start(), static_cast<uint64_t>(advice));
    }
    for (const image::Extent& g : v.guards()) {
      add(absl::StrFormat("madvise(MADV_GUARD_INSTALL) %#x-%#x (a guard region; Linux 6.13+)", g.offset(),
                          g.offset() + g.length()),
          SYS_madvise, g.offset(), g.length(), kMadvGuardInstall);
    }
    // mlock(2), mlock2(MLOCK_ONFAULT) or MAP_LOCKED: smaps "lo", with "lf" for on-fault.
    if (HasFlag(v, "lo")) {
      uint64_t onfault = HasFlag(v, "lf") ? kMlockOnfault : 0;
      add(absl::StrFormat("mlock2 %#x-%#x%s (locked in memory as it was)", v.start(), v.end(),
                          onfault ? " MLOCK_ONFAULT" : ""),
          SYS_mlock2, v.start(), v.end() - v.start(), onfault);
    }
  }
  return finals.Run(inj, scratch, loop, /*repeatable=*/true);
}

}  // namespace cairn::restore
