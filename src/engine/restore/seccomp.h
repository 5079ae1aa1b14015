#pragma once
// A process's seccomp filters put back (dump/seccomp.h): installed by the process itself, oldest
// first, on every thread at once (SECCOMP_FILTER_FLAG_TSYNC), with the flags each was installed
// with. The restore calls it as late as the process's credentials allow (restore.cc).

#include "absl/status/status.h"
#include "engine/inject/injector.h"
#include "image.pb.h"

namespace cairn::restore {

// Whether a process with credentials `c` may install a filter itself: no_new_privs, or
// CAP_SYS_ADMIN in its effective set.
bool CanInstallSeccomp(const image::Creds& c);

// REQUIRES: `proc`'s threads exist, and hold credentials that may install filters.
absl::Status InstallSeccompFilters(inject::Injector& inj, inject::RemoteScratch& scratch, const image::Process& proc);

}  // namespace cairn::restore
