#pragma once
// The page handler of a lazy restore (`cairn lazy-pages`, started by lazy/launch.h).
//
// One process per restored process, single-threaded, holding the only reference to the
// process's userfaultfd. It serves each missing-page fault from the image (every block's
// checksum verified, compressed blocks decompressed, incremental chains resolved), and
// between faults copies every remaining page in (prefetch), block by block, in address
// order, once the restorer has let the process go (end of file on go_fd). Pages never saved (zero at checkpoint time) get the zero page on first touch.
// When every saved page is in, it closes the userfaultfd (the ranges become ordinary
// memory) and exits 0.
//
// Events: fork (the child's userfaultfd is served as well, with the parent's pending pages
// at the moment of the fork), mremap (pending pages move with the area), madvise
// DONTNEED/REMOVE and munmap (pending pages there are dropped: they now read as zero, as
// they would have).
//
// With a page server, the image comes from it; the blocks to prefetch stream in on a second
// connection while faults are asked for on the first, and the server is told when every
// page is in.
//
// If a page cannot be delivered (a block fails its checksum, the image is gone or
// unreadable, the page server died or stopped answering), the handler kills the process (and any child it forked since) with
// SIGKILL and writes why to stderr (inherited from `cairn restore`) before exiting 1: the
// process never runs on with missing memory.
//
// If the handler itself dies (killed) before every page is in, its watcher — a child that
// holds a second reference to each userfaultfd, named cairn-lazywatch — keeps the missing
// pages missing (a fault waits instead of reading zeros) and kills the process, saying why.
// A SIGKILL of both at once escapes that, except in a job: there the process's fuse
// (lazy/fuse.h) has the kernel kill it once neither holds its write end any more (it, not
// children it forked meanwhile, unless it is the job's command, whose end ends the job).

#include <sys/types.h>

#include <string>

#include "absl/status/status.h"

namespace cairn::lazy {

struct HandlerOptions {
  std::string dir;    // checkpoint directory (newest link)
  std::string page_server, token_file;  // or: the page server to take it from (lazy/page_client.h)
  pid_t pid = 0;      // the restored process, as this machine sees it
  int image_pid = 0;  // its pid in the checkpoint
  int uffd = -1;      // the userfaultfd, inherited
  int ready_fd = -1;  // one byte is written here once the image is open
  int go_fd = -1;     // end of file here: the process runs, prefetch may start
  // The process's fuse (lazy/fuse.h), if it has one: held by the handler and its watcher,
  // disarmed through fuse_read once every page is in.
  int fuse_read = -1, fuse_write = -1;
};

// Serves pages until every saved page is in (OK) or a page cannot be delivered (the
// process has been killed; the status says why). Errors are also written to stderr, before
// the kill, so the caller need not print them.
absl::Status ServePages(const HandlerOptions& opts);

}  // namespace cairn::lazy
