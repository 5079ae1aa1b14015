#pragma once
// The restorer's side of a lazy restore: a userfaultfd made inside the task being
// restored, with its lazy areas registered in missing mode, handed to a page handler
// process that outlives the restorer (`cairn restore --detach` returns at once).
//
// The handler is `cairn lazy-pages` (hidden), started by a double fork + exec so that it
// is nobody's child to wait for, holding only the userfaultfd and stderr. It opens the
// image again by itself (see lazy/handler.h).

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/unique_fd.h"
#include "engine/inject/injector.h"
#include "engine/lazy/lazy_areas.h"

namespace cairn::lazy {

// Creates the userfaultfd in the task `inj` drives (with fork, remap, remove and unmap
// events), registers `areas`, starts the handler for host pid `host_pid` (saved pid
// `image_pid`) of the checkpoint in `dir`, and closes the task's own descriptor. The
// areas must be mapped already. Fails clearly when the kernel lacks what is needed.
// The handlers of one restore. Each says it is ready (image open) on its ready pipe, while the
// restore goes on; WaitReady must succeed before the processes may run (a handler that died
// would leave their memory empty). A handler serves faults at once but prefetches only once
// its go pipe is closed (Release, or the restorer's exit): prefetch must not compete with the
// rest of the restore for the CPU, and the restore's outcome must not depend on it.
//
// With a `fuse_holder` (a job's restore: its init, built already and not lazy itself), each
// handler also gets a fuse (lazy/fuse.h) armed against its process, held by the init.
struct LazyHandlers {
  std::string page_server, token_file;  // the handlers take the image from this page server
  pid_t fuse_holder = 0;
  int started = 0, fuses = 0;
  std::vector<UniqueFd> go, ready;
  absl::Status WaitReady();
  void Release() { go.clear(); }
};

absl::Status StartLazyHandler(inject::Injector& inj, inject::RemoteScratch& scratch, const std::vector<LazyArea>& areas,
                              const std::string& dir, pid_t host_pid, int image_pid, LazyHandlers* handlers);

}  // namespace cairn::lazy
