#pragma once
// Capturing a process's open descriptors: regular files (offset, flags, identity; the
// content of files deleted while open; flock, OFD and POSIX locks), character devices,
// directories, pipes, sockets (sockets.h), and the kernel objects eventfd (counter, mode), timerfd (clock, time
// left, period, unread expirations), signalfd (mask) and epoll (interest list). An epoll registration is
// accepted only when it watches the file the epoll's first holder has at the registered
// descriptor number, since restore re-registers it by number from inside that process.

#include <sys/types.h>

#include <cstdint>
#include <set>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "engine/image/image.h"
#include "engine/proc/fds.h"
#include "image.pb.h"

namespace cairn::dump {

class GuardJournal;
class TcpConnections;

struct FdOptions {
  // Established TCP connections are recorded to come back reset instead of refused.
  bool tcp_close = false;
  // Established TCP connections are saved (tcp.h) instead of refused: accepted by the check;
  // saved through `tcp`, which holds the network lock over them, when capturing.
  bool tcp_established = false;
  TcpConnections* tcp = nullptr;
  // Where a socket given a peek offset of the dump's is journaled (guardian.h, 6).
  GuardJournal* journal = nullptr;
  // A container's (container.h): the mount ids of its mount table; a file on another mount is
  // recorded outside_container. Null: not a container.
  const std::set<uint64_t>* container_mounts = nullptr;
  // Descriptions their container runtime hands over again at restore ("pipe:[INODE]"): saved
  // as handed_over, whatever holds their other end.
  const std::set<std::string>* handed_over = nullptr;
  // Processes whose NVIDIA devices the GPU driver releases before they are frozen (devices.h):
  // the check before it accepts those devices; the capture, after it, never sees them.
  const std::set<pid_t>* gpu_processes = nullptr;
};

// Checks every descriptor of the processes `pids` (a tree) is of a kind the engine can
// save, without saving anything. The error names the process, the descriptor and its object.
absl::Status CheckFdsSupported(const std::vector<pid_t>& pids, const FdOptions& opts);

// Files by (dev, inode).
using FileSet = std::set<std::pair<uint64_t, uint64_t>>;

// Records every descriptor of `pids` in `out` (one Process per pid, same order).
// Descriptors sharing an open file description, within a process or across the tree,
// are recorded as dups of the first. Deleted files' contents (memfds' with their seals)
// and the bytes queued in pipes go to `writer` (null for a check-only pass); a deleted
// file whose content is in `saved_files` already (saved with a mapped area) is not saved
// again, and every one saved here is added.
// Descriptors in flight that no process holds go to `in_flight` (in_flight.h; null for a check).
// `fds`: each process's descriptors (proc::ReadFds) as the caller read them while the processes
// were frozen; empty: read here.
absl::Status CaptureFds(const std::vector<pid_t>& pids, const FdOptions& opts, image::ImageWriter* writer,
                        const std::vector<image::Process*>& out, FileSet* saved_files,
                        image::Process* in_flight = nullptr, std::vector<std::vector<proc::FdInfo>> fds = {});

}  // namespace cairn::dump
