#pragma once
// Files of the node's scratch space that a checkpoint carries. A program's session files
// (Open MPI's /tmp/ompi.HOST.UID/..., shared memory under /dev/shm) live only on the node it
// runs on and often only as long as the program: mpirun removes its session directory when a
// rank on another node dies, and a machine that restores the job never had them. A restore
// that needs them then fails ("open /tmp/ompi.../hwloc.sm: No such file or directory"). So a
// regular file in /tmp, /var/tmp or /dev/shm that the checkpoint's processes hold open or map,
// of at most kMaxScratchFile bytes, has its content saved like a deleted file's (Fd.scratch,
// Vma.scratch); restore makes it again, with its directories, where the name is gone
// (restore/files.h, OpenMasters), and uses the file it finds otherwise.

#include <sys/stat.h>

#include <cstdint>
#include <string>

namespace cairn::dump {

inline constexpr uint64_t kMaxScratchFile = 64ull << 20;

// Whether `path` is in the node's scratch space (/tmp, /var/tmp, /dev/shm).
bool InScratchSpace(const std::string& path);

// Whether a regular file at `path` (as /proc names it) with `st` is one whose content is saved.
// (A named FIFO there is marked too, with no content but what is queued in it: restore makes
// it again where its name is gone.)
bool IsScratchFile(const std::string& path, const struct stat& st);

}  // namespace cairn::dump
