#include "engine/check/check.h"

#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "engine/inject/ptrace.h"
#include "engine/machine/cpu.h"
#include "engine/machine/machine.h"
#include "engine/proc/stat.h"

namespace cairn::check {
namespace {

constexpr int kCapSysAdmin = 21;
constexpr int kCapSysPtrace = 19;
constexpr int kCapCheckpointRestore = 40;

Feature Make(std::string name, std::string needed_for, bool ok, std::string detail) {
  return Feature{std::move(name), std::move(needed_for), ok, std::move(detail)};
}

// A child that sleeps until killed.
pid_t SpawnSleeper() {
  pid_t pid = ::fork();
  if (pid == 0) {
    for (;;) ::pause();
  }
  return pid;
}

void Reap(pid_t pid) {
  ::kill(pid, SIGKILL);
  int st;
  ::waitpid(pid, &st, __WALL);
}

}  // namespace

std::vector<Feature> ProbeFeatures() {
  std::vector<Feature> out;
  utsname uts{};
  ::uname(&uts);
  out.push_back(Make("kernel", "everything", true, absl::StrCat(uts.release, " ", uts.machine)));
  bool x86 = std::strcmp(uts.machine, "x86_64") == 0;
  out.push_back(Make("x86-64", "register and xstate layouts", x86, x86 ? "yes" : "only x86-64 is supported"));
  if (x86) {
    const machine::Cpu& cpu = machine::ThisCpu();
    out.push_back(Make("CPU", "where checkpoints can go (a restore needs the features a job may use)", true,
                       absl::StrCat(cpu.model, ", ", machine::LevelName(cpu.level), ", XSAVE ", cpu.xsave_size,
                                    " bytes, ", cpu.features.size(), " features")));
  }

  auto status = proc::ReadStatus(::getpid());
  uint64_t caps = status.ok() ? status->cap_eff : 0;
  auto cap = [&](int bit) { return (caps >> bit) & 1; };
  out.push_back(Make("CAP_SYS_PTRACE", "tracing processes of other users", cap(kCapSysPtrace),
                     cap(kCapSysPtrace) ? "effective" : "missing: run as root"));
  bool cr = cap(kCapCheckpointRestore) || cap(kCapSysAdmin);
  out.push_back(Make("CAP_CHECKPOINT_RESTORE or CAP_SYS_ADMIN", "choosing PIDs (clone3 set_tid), PR_SET_MM_MAP", cr,
                     cr ? "effective" : "missing: run as root"));

  pid_t child = SpawnSleeper();
  bool seized = ::ptrace(PTRACE_SEIZE, child, nullptr, nullptr) == 0;
  bool stopped = false;
  if (seized && ::ptrace(PTRACE_INTERRUPT, child, nullptr, nullptr) == 0) {
    auto stop = inject::WaitStop(child);
    stopped = stop.ok() && stop->kind == inject::StopInfo::Kind::kEventStop;
  }
  out.push_back(Make("ptrace seize/interrupt", "freezing threads", seized && stopped,
                     seized && stopped ? "works" : absl::StrCat("failed: ", std::strerror(errno))));
  auto rseq = inject::GetRseq(child);
  out.push_back(Make("PTRACE_GET_RSEQ_CONFIGURATION", "saving rseq registrations (glibc 2.35+)", rseq.ok(),
                     rseq.ok() ? "works" : std::string(rseq.status().message())));
  auto xs = inject::GetXstate(child);
  out.push_back(Make("NT_X86_XSTATE regset", "FPU/SSE/AVX state", xs.ok(),
                     xs.ok() ? absl::StrCat(xs->size(), " bytes") : std::string(xs.status().message())));
  char buf[16];
  iovec local{buf, sizeof buf}, remote{reinterpret_cast<void*>(&buf), sizeof buf};
  bool vm = ::process_vm_readv(child, &local, 1, &remote, 1, 0) == sizeof buf;
  out.push_back(Make("process_vm_readv/writev", "copying memory", vm, vm ? "works" : std::strerror(errno)));
  int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, child, 0));
  int fd = pidfd >= 0 ? static_cast<int>(::syscall(SYS_pidfd_getfd, pidfd, 0, 0)) : -1;
  out.push_back(Make("pidfd_getfd", "inspecting descriptors (process trees)", fd >= 0,
                     fd >= 0 ? "works" : std::strerror(errno)));
  if (fd >= 0) ::close(fd);
  if (pidfd >= 0) ::close(pidfd);
  Reap(child);

  bool timers = machine::KernelHas("posix-timer-ids");
  out.push_back(Make("PR_TIMER_CREATE_RESTORE_IDS", "POSIX timers keep their ids (Linux 6.15+)", timers,
                     timers ? "works" : "missing: processes with POSIX timers cannot be restored here"));
  int uffd = static_cast<int>(::syscall(SYS_userfaultfd, O_CLOEXEC | UFFD_USER_MODE_ONLY));
  out.push_back(Make("userfaultfd", "dirty tracking and lazy restore", uffd >= 0,
                     uffd >= 0 ? "works" : std::strerror(errno)));
  if (uffd >= 0) ::close(uffd);
  int pm = ::open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
  out.push_back(Make("/proc/PID/pagemap", "finding the pages to save", pm >= 0, pm >= 0 ? "readable" : std::strerror(errno)));
  if (pm >= 0) ::close(pm);
  return out;
}

}  // namespace cairn::check
