#pragma once
// Which descriptors of a checkpointed tree share one open file description (a dup, 2>&1, an
// inheritance over fork): the dump records each description once and the rest as its dups.
//
// kcmp(KCMP_FILE) says whether two descriptors (of any two processes) name the same
// description, and otherwise which comes first in a total order of descriptions (the kernel's
// file pointers, obfuscated the same way for every call of one boot). Descriptors are kept per
// inode, each inode's in that order, so finding whether a descriptor's description was seen
// takes O(log n) kcmp calls among the n descriptions of its inode: a process holding 9,000
// descriptions of one file needed ~40 million calls when each was compared with every earlier one.
//
// A kcmp that fails (a descriptor closed since it was listed, in the check made while the
// processes run) compares as "not before": the index stays usable, that descriptor may be taken
// for a description of its own.

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <set>

namespace cairn::dump {

class DescriptionIndex {
 public:
  struct Holder {
    pid_t pid;
    int fd;
  };

  // The descriptor recorded earlier with the same open file description as `pid`'s `fd` (whose
  // file has inode `ino`), or nullptr after recording this one as the first of its description.
  // The pointer stays valid while the index lives.
  const Holder* FindOrAdd(uint64_t ino, pid_t pid, int fd);

  // Descriptions recorded.
  uint64_t size() const { return size_; }
  // kcmp calls made so far (for tests: the count must grow as n log n, not n²).
  uint64_t comparisons() const { return comparisons_; }

 private:
  struct Before {
    const DescriptionIndex* index;
    bool operator()(const Holder& a, const Holder& b) const;
  };
  // Three-way: 0 same description, 1 a's first, 2 b's first, -1 no answer.
  int Compare(const Holder& a, const Holder& b) const;

  std::map<uint64_t, std::set<Holder, Before>> by_inode_;
  uint64_t size_ = 0;
  mutable uint64_t comparisons_ = 0;
};

}  // namespace cairn::dump
