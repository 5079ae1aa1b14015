#include "engine/machine/machine.h"

#include <linux/capability.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/user.h>
#include <sys/utsname.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/file_util.h"
#include "engine/image/format.h"
#include "engine/machine/cpu.h"
#include "engine/machine/vdso.h"
#include "engine/machine/xstate.h"

namespace cairn::machine {
namespace {

constexpr char kPosixTimerIds[] = "posix-timer-ids";
constexpr int kPrTimerCreateRestoreIds = 77;  // Linux 6.15+; Debian's headers predate it

std::string KernelRelease() {
  utsname uts{};
  return ::uname(&uts) == 0 ? uts.release : "unknown";
}

std::vector<XsaveComponent> Layout(const image::Machine& m) {
  std::vector<XsaveComponent> out;
  for (const image::XsaveComponent& c : m.xsave_components()) out.push_back({c.index(), c.offset(), c.size()});
  return out;
}

std::string CpuName(const std::string& model, int level) { return absl::StrCat(model, ", ", LevelName(level)); }

}  // namespace

bool KernelHas(const std::string& feature) {
  if (feature == kPosixTimerIds) return ::prctl(kPrTimerCreateRestoreIds, 2, 0, 0, 0) >= 0;  // 2: query
  return false;
}

image::Machine Describe(std::string vdso, int cpu_baseline) {
  const Cpu& cpu = ThisCpu();
  image::Machine m;
  for (const std::string& f : cpu.features) m.add_cpu_features(f);
  m.set_cpu_level(cpu.level);
  m.set_cpu_model(cpu.model);
  m.set_xcr0(cpu.xcr0);
  m.set_xsave_size(cpu.xsave_size);
  for (const XsaveComponent& c : cpu.components) {
    image::XsaveComponent* x = m.add_xsave_components();
    x->set_index(c.index);
    x->set_offset(c.offset);
    x->set_size(c.size);
  }
  m.set_kernel_release(KernelRelease());
  m.set_cpu_baseline(cpu_baseline);
  if (!vdso.empty()) m.set_vdso_xxh3(image::Checksum(vdso.data(), vdso.size()));
  m.set_vdso(std::move(vdso));
  return m;
}

std::vector<std::string> KernelNeeds(const std::vector<const image::Process*>& procs) {
  bool timers = std::any_of(procs.begin(), procs.end(), [](auto* p) { return p->posix_timers_size() > 0; });
  if (timers) return {kPosixTimerIds};
  return {};
}

bool NeedsVdsoProxy(const image::Checkpoint& meta) {
  const image::Machine& m = meta.machine();
  if (!meta.has_machine() || m.vdso().empty()) return false;
  // CAIRN_TEST_VDSO_PROXY=1: redirect even to an identical vDSO, for tests of the redirection
  // on one machine (the guest-machine tests meet a really different one).
  if (const char* t = std::getenv("CAIRN_TEST_VDSO_PROXY"); t != nullptr && std::string(t) == "1") return true;
  const std::string& here = ThisVdso();
  return here.empty() || image::Checksum(here.data(), here.size()) != m.vdso_xxh3();
}

namespace {

// Linux's names of capabilities 0..40 (capabilities(7)).
std::string CapabilityNames(uint64_t caps) {
  static const char* const kNames[] = {
      "chown", "dac_override", "dac_read_search", "fowner", "fsetid", "kill", "setgid", "setuid", "setpcap",
      "linux_immutable", "net_bind_service", "net_broadcast", "net_admin", "net_raw", "ipc_lock", "ipc_owner",
      "sys_module", "sys_rawio", "sys_chroot", "sys_ptrace", "sys_pacct", "sys_admin", "sys_boot", "sys_nice",
      "sys_resource", "sys_time", "sys_tty_config", "mknod", "lease", "audit_write", "audit_control", "setfcap",
      "mac_override", "mac_admin", "syslog", "wake_alarm", "block_suspend", "audit_read", "perfmon", "bpf",
      "checkpoint_restore"};
  std::vector<std::string> out;
  for (int i = 0; i < 64; ++i) {
    if (!(caps >> i & 1)) continue;
    out.push_back(i < static_cast<int>(std::size(kNames)) ? absl::StrCat("cap_", kNames[i]) : absl::StrCat("capability ", i));
  }
  return absl::StrJoin(out, ", ");
}

// The capabilities this process holds (permitted); all when it cannot tell.
uint64_t OwnCapabilities() {
  __user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2]{};
  if (::syscall(SYS_capget, &hdr, data) != 0) return ~0ULL;
  return data[0].permitted | static_cast<uint64_t>(data[1].permitted) << 32;
}

}  // namespace

namespace {

// What of the checkpoint's machine record (CPU, register state, kernel, vDSO) this machine lacks.
void MachineProblems(const image::Checkpoint& meta, const std::vector<const image::Process*>& procs,
                     std::vector<std::string>& problems) {
  const image::Machine& m = meta.machine();
  const Cpu& here = ThisCpu();

  // Instruction-set features: every one the old CPU offered (a process chose its code by
  // them at start-up), or only its baseline's.
  int baseline = static_cast<int>(m.cpu_baseline());
  std::set<std::string> need = baseline > 0 ? LevelFeatures(baseline)
                                             : std::set<std::string>(m.cpu_features().begin(), m.cpu_features().end());
  if (std::vector<std::string> missing = Missing(need, here.features); !missing.empty()) {
    int common = std::min(here.level, static_cast<int>(m.cpu_level()));
    problems.push_back(
        baseline > 0
            ? absl::StrCat("the job was started for ", LevelName(baseline), ", but this machine's CPU (",
                           CpuName(here.model, here.level), ") lacks ", absl::StrJoin(missing, ", "),
                           ": restore it on a ", LevelName(baseline), " machine")
            : absl::StrCat("the processes may use any instruction-set feature of the CPU they were checkpointed on (",
                           CpuName(m.cpu_model(), m.cpu_level()), " on ", meta.hostname(),
                           "), and this machine's CPU (", CpuName(here.model, here.level), ") lacks ",
                           absl::StrJoin(missing, ", "), ": they would die of SIGILL. Restore it on a machine whose "
                           "CPU has them, or start the job with --cpu-baseline ", LevelName(std::max(common, 1)),
                           " so that it can move to any ", LevelName(std::max(common, 1)), " machine"));
  }
  // AMX: a process that asked for tile data may use it whenever it likes; it is asked for
  // again at restore, which needs a CPU (and kernel) that has it.
  for (const image::Process* p : procs) {
    constexpr int kXtileData = 18;
    if (p->zombie() || !(p->xcomp_perm() >> kXtileData & 1) || (here.xcr0 >> kXtileData & 1)) continue;
    problems.push_back(absl::StrCat("pid ", p->pid(), " asked for AMX (arch_prctl ARCH_REQ_XCOMP_PERM) and may use "
                                    "it at any time, and this machine's CPU (", CpuName(here.model, here.level),
                                    ") has no AMX: restore it on a machine with AMX"));
    break;
  }
  // Register state the threads hold.
  std::vector<XsaveComponent> layout = Layout(m);
  int named = 0;
  for (const image::Process* p : procs) {
    for (const image::Thread& t : p->threads()) {
      uint64_t lacking = ComponentsLacking(t.xstate(), layout, here.xcr0);
      if (lacking == 0 || named++ >= 3) continue;
      problems.push_back(absl::StrFormat("thread %d of pid %d holds %s, which this machine's CPU does not have",
                                         t.tid(), p->pid(), ComponentNames(lacking)));
    }
  }
  // Kernel features.
  for (const std::string& f : m.kernel_needs()) {
    if (KernelHas(f)) continue;
    if (f == kPosixTimerIds) {
      problems.push_back(absl::StrCat(
          "the processes have POSIX timers, whose ids only Linux 6.15 or later can give back "
          "(PR_TIMER_CREATE_RESTORE_IDS), and this kernel is ",
          KernelRelease(), ": restore it on a machine running Linux 6.15 or later"));
    } else {
      problems.push_back(absl::StrCat("the restore needs the kernel feature '", f, "', which this kernel (",
                                      KernelRelease(), ") lacks"));
    }
  }
  // The vDSO: redirected to this kernel's when it differs (vdso.h), which needs the old one
  // unchanged and no thread inside it.
  if (NeedsVdsoProxy(meta)) {
    // Every function of the old vDSO must have a counterpart here (or a system call standing
    // in): tried with the two images near each other, as the restore places them.
    constexpr uint64_t kOldBase = 0x7fff00000000, kNewBase = kOldBase + (64 << 20);
    if (auto proxy = VdsoProxy(m.vdso(), kOldBase, ThisVdso(), kNewBase); !proxy.ok()) {
      problems.push_back(absl::StrCat(proxy.status().message(), " (kernel ", KernelRelease(), " here, ",
                                      m.kernel_release(), " where it was checkpointed)"));
    }
    for (const image::Process* p : procs) {
      if (p->zombie()) continue;
      for (const image::Vma& v : p->vmas()) {
        if (v.kind() != image::Vma::VDSO) continue;
        if (p->vdso_xxh3() != m.vdso_xxh3()) {
          problems.push_back(absl::StrCat(
              "pid ", p->pid(), " had changed its own vDSO, which cannot be redirected to this kernel's (",
              KernelRelease(), ", checkpointed on ", m.kernel_release(), "): restore it on the machine it came from"));
        }
        for (const image::Thread& t : p->threads()) {
          user_regs_struct regs{};
          std::memcpy(&regs, t.regs().raw().data(), std::min(t.regs().raw().size(), sizeof regs));
          if (regs.rip >= v.start() && regs.rip < v.end()) {
            problems.push_back(absl::StrFormat(
                "thread %d of pid %d was running code of its vDSO when it was checkpointed, and this machine's vDSO "
                "differs (kernel %s here, %s there, or another CPU model): checkpoint it again and restore that",
                t.tid(), p->pid(), KernelRelease(), m.kernel_release()));
          }
        }
      }
    }
  }
}

}  // namespace

absl::Status CheckFits(const image::Checkpoint& meta, const std::vector<const image::Process*>& procs,
                       const std::string& where) {
  std::vector<std::string> problems;
  // Privilege: a restore gives each process the capabilities it had, which needs cairn to hold
  // them here (another machine's cairn may run with fewer, e.g. without cap_sys_resource).
  const uint64_t own = OwnCapabilities();
  for (const image::Process* p : procs) {
    if (p->zombie()) continue;
    uint64_t lacking = p->creds().cap_prm() & ~own;
    if (lacking == 0) continue;
    problems.push_back(absl::StrCat("pid ", p->pid(), " held ", CapabilityNames(lacking),
                                    ", which cairn does not hold on this machine, and a restore never gives a process "
                                    "more than cairn has: restore it where cairn runs with them, or start the job "
                                    "without them"));
    break;  // one is enough to say it
  }
  if (meta.has_machine()) MachineProblems(meta, procs, problems);
  if (problems.empty()) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat("restore from ", where, " refused (nothing was restored): ", absl::StrJoin(problems, "; ")));
}

int BaselineOf(pid_t pid) {
  auto env = ReadFile(absl::StrCat("/proc/", pid, "/environ"));
  if (!env.ok()) return 0;
  std::string prefix = absl::StrCat(kBaselineEnv, "=");
  for (absl::string_view e : absl::StrSplit(*env, '\0')) {
    if (!absl::StartsWith(e, prefix)) continue;
    auto level = ParseBaseline(std::string(e.substr(prefix.size())));
    return level.ok() ? *level : 0;
  }
  return 0;
}

}  // namespace cairn::machine
