#include "engine/dump/aio.h"

#include <cstdint>

#include "absl/strings/str_format.h"
#include "common/status.h"
#include "engine/inject/injector.h"

namespace cairn::dump {
namespace {

// The header of an AIO ring (struct aio_ring in the kernel's fs/aio.c), followed by `nr`
// struct io_event slots.
struct AioRingHeader {
  uint32_t id;
  uint32_t nr;
  uint32_t head;
  uint32_t tail;
  uint32_t magic;
  uint32_t compat_features;
  uint32_t incompat_features;
  uint32_t header_length;
};
constexpr uint32_t kAioRingMagic = 0xa10a10a1;

absl::StatusOr<AioRingHeader> ReadHeader(pid_t pid, uint64_t addr) {
  AioRingHeader h{};
  RETURN_IF_ERROR(Annotate(inject::ReadRemote(pid, addr, &h, sizeof h),
                           absl::StrFormat("read the AIO ring of pid %d at %#x", pid, addr)));
  if (h.magic != kAioRingMagic || h.nr == 0) {
    return absl::DataLossError(absl::StrFormat(
        "pid %d: the AIO ring at %#x has magic %#x and %u events, not an AIO ring this engine knows", pid, addr,
        h.magic, h.nr));
  }
  return h;
}

}  // namespace

absl::Status DescribeAioRing(pid_t pid, const proc::MapEntry& m, image::Vma* v) {
  ASSIGN_OR_RETURN(AioRingHeader h, ReadHeader(pid, m.start));
  v->set_kind(image::Vma::AIO_RING);
  v->set_aio_nr(h.nr);
  v->set_aio_tail(h.tail);
  return absl::OkStatus();
}

absl::Status CheckAioRingsQuiet(const std::vector<pid_t>& pids, const std::vector<image::Process*>& procs) {
  for (size_t i = 0; i < pids.size() && i < procs.size(); ++i) {
    for (const image::Vma& v : procs[i]->vmas()) {
      if (v.kind() != image::Vma::AIO_RING) continue;
      ASSIGN_OR_RETURN(AioRingHeader h, ReadHeader(pids[i], v.start()));
      if (h.head != h.tail) {
        uint32_t waiting = (h.tail + h.nr - h.head) % h.nr;
        return absl::FailedPreconditionError(absl::StrFormat(
            "pid %d has an AIO context (io_setup, ring at %#x) with %u completed request%s not collected yet; they "
            "cannot be put back into a new context — checkpoint it once its completions are collected "
            "(io_getevents)",
            pids[i], v.start(), waiting, waiting == 1 ? "" : "s"));
      }
      if (h.tail != v.aio_tail()) {
        return absl::FailedPreconditionError(absl::StrFormat(
            "pid %d has an AIO context (io_setup, ring at %#x) with a request that completed while it was being "
            "checkpointed: requests were in flight, and they cannot be saved — checkpoint it when no io_submit "
            "request is outstanding",
            pids[i], v.start()));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace cairn::dump
