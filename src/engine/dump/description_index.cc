#include "engine/dump/description_index.h"

#include <sys/syscall.h>
#include <unistd.h>

namespace cairn::dump {
namespace {

constexpr int kKcmpFile = 0;  // KCMP_FILE

}  // namespace

int DescriptionIndex::Compare(const Holder& a, const Holder& b) const {
  ++comparisons_;
  long r = ::syscall(SYS_kcmp, a.pid, b.pid, kKcmpFile, a.fd, b.fd);
  return r >= 0 && r <= 2 ? static_cast<int>(r) : -1;
}

bool DescriptionIndex::Before::operator()(const Holder& a, const Holder& b) const { return index->Compare(a, b) == 1; }

const DescriptionIndex::Holder* DescriptionIndex::FindOrAdd(uint64_t ino, pid_t pid, int fd) {
  auto [slot, fresh] = by_inode_.try_emplace(ino, Before{this});
  std::set<Holder, Before>& held = slot->second;
  Holder h{pid, fd};
  // The first description not before this descriptor's: its own, if it was seen.
  auto at = held.lower_bound(h);
  if (at != held.end() && Compare(*at, h) == 0) return &*at;
  size_t before = held.size();
  held.emplace_hint(at, h);
  size_ += held.size() - before;  // a kcmp that failed may have made it look seen
  return nullptr;
}

}  // namespace cairn::dump
