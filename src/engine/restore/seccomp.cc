#include "engine/restore/seccomp.h"

#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/syscall.h>

#include "absl/strings/str_format.h"
#include "common/status.h"

namespace cairn::restore {

bool CanInstallSeccomp(const image::Creds& c) {
  return c.no_new_privs() || (c.cap_eff() & (1ULL << CAP_SYS_ADMIN)) != 0;
}

absl::Status InstallSeccompFilters(inject::Injector& inj, inject::RemoteScratch& scratch, const image::Process& proc) {
  constexpr size_t kProgramAt = 64;
  constexpr uint64_t kKeptFlags = SECCOMP_FILTER_FLAG_LOG | SECCOMP_FILTER_FLAG_SPEC_ALLOW;
  int index = 0;
  for (const image::SeccompFilter& f : proc.seccomp_filters()) {
    ++index;
    const size_t len = f.program().size() / sizeof(sock_filter);
    if (len == 0 || len > BPF_MAXINSNS || f.program().size() % sizeof(sock_filter) != 0 || (f.flags() & ~kKeptFlags)) {
      return absl::DataLossError(absl::StrFormat("pid %d: seccomp filter %d of %d bytes, flags %#x (corrupt image)",
                                                 proc.pid(), index, f.program().size(), f.flags()));
    }
    ASSIGN_OR_RETURN(uint64_t program, scratch.Put(kProgramAt, f.program().data(), f.program().size()));
    sock_fprog fprog{static_cast<unsigned short>(len), reinterpret_cast<sock_filter*>(program)};
    ASSIGN_OR_RETURN(uint64_t fprog_at, scratch.Put(0, &fprog, sizeof fprog));
    ASSIGN_OR_RETURN(long rc, inj.Call(absl::StrFormat("seccomp(SET_MODE_FILTER) filter %d of %d", index,
                                                       proc.seccomp_filters_size()),
                                       SYS_seccomp, SECCOMP_SET_MODE_FILTER, f.flags() | SECCOMP_FILTER_FLAG_TSYNC,
                                       fprog_at));
    if (rc != 0) {
      return absl::InternalError(absl::StrFormat(
          "pid %d: thread %d could not take seccomp filter %d (its chain differs)", proc.pid(), rc, index));
    }
  }
  return absl::OkStatus();
}

}  // namespace cairn::restore
