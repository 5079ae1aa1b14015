#pragma once
// Rebuilding a process's address space inside a stopped task created by the restorer:
// unmap the restorer's own areas, move the vDSO to where it was, map every saved area,
// fill the saved pages, then set the final protections.

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/image/image.h"
#include "engine/inject/injector.h"
#include "engine/lazy/launch.h"

namespace cairn::restore {

struct Range {
  uint64_t start = 0, end = 0;
};

// Finds `len` bytes free in both the saved layout and `avoid` (page-aligned, above 1 MiB).
absl::StatusOr<uint64_t> FindFreeRange(const image::Process& proc, const std::vector<Range>& avoid, uint64_t len);

// Where each shared anonymous object (MAP_SHARED|MAP_ANONYMOUS) of a checkpoint waits between
// its creation in the tree's root and its placement in the processes that map it: shmem id ->
// a range free in every saved layout. Distinct objects may lie at the same address in different
// processes (each mapped after a fork), so no object can simply be created where it was.
using SharedAnonStaging = std::map<uint64_t, Range>;

// Chooses the staging ranges, free in every process's saved layout and in `avoid`.
absl::StatusOr<SharedAnonStaging> PlanSharedAnon(const std::vector<const image::Process*>& procs,
                                                 std::vector<Range> avoid);

// Unmaps everything in `pid` except `keep` (the work area), the `staged` ranges (shared
// anonymous objects created earlier by CreateSharedAnon) and the vDSO/vvar areas, then moves
// those to their saved addresses. Fails clearly when the vDSO differs from the dumped one —
// unless `old_vdso` (the checkpoint's vDSO image) is given: then this kernel's areas go,
// as one block, to free space near the old vDSO, and the old vDSO's address gets a proxy of
// it whose functions jump to this kernel's (machine/vdso.h).
// `skeleton`: the root's first pass, before the tree is forked: the kernel's areas stay even for
// a process that had none (a child forked from it may have them), dropped by its second pass.
absl::Status ReplaceAddressSpace(inject::Injector& inj, const image::Process& proc, Range keep,
                                 const std::vector<Range>& staged, const std::string* old_vdso,
                                 bool skeleton = false);

// Creates every shared anonymous object of the checkpoint (possibly shared between processes)
// in the task `inj` drives — the tree's root, before it forks the others, so that they inherit
// the same objects: each is mapped where it was saved, filled, and moved to its staging range.
absl::Status CreateSharedAnon(inject::Injector& inj, inject::RemoteScratch& scratch, const image::ImageReader& img,
                              const std::vector<const image::Process*>& procs, const SharedAnonStaging& staging,
                              int threads);

// Maps the process's own shared anonymous areas from their objects' staging ranges (a second
// mapping of the same pages, mremap with old size 0) to their saved addresses, then unmaps
// every staging range.
absl::Status PlaceSharedAnon(inject::Injector& inj, const image::Process& proc, const SharedAnonStaging& staging);

// Maps every saved area, writes the saved pages (verifying each block), sets protections
// and advice. Pages are written with `threads` parallel writers. The mappings, protections and
// advice are made in one stop each through the loop of calls at `loop` (inject/stop_loop.h).
// Deleted files and memfds are mapped from `file_objects`: (dev, inode) at checkpoint
// time -> the descriptor of the file made again, which the task holds (a master).
// With `lazy_handlers`, private anonymous areas are left empty, registered with a userfaultfd
// and handed to a page handler process (engine/lazy/launch.h) instead of being filled; the
// handler's go pipe is added there (close it once the process runs).
absl::Status MapAndFill(inject::Injector& inj, inject::RemoteScratch& scratch, uint64_t loop,
                        const image::ImageReader& img, const image::Process& proc, int threads,
                        const std::map<std::pair<uint64_t, uint64_t>, int>& file_objects,
                        lazy::LazyHandlers* lazy_handlers = nullptr);

}  // namespace cairn::restore
