#include "daemon/cgroup.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/file_util.h"
#include "common/log.h"
#include "common/status.h"
#include "common/unique_fd.h"
#include "engine/net/silence.h"

namespace cairn::daemon {
namespace {

constexpr char kRoot[] = "/sys/fs/cgroup/";

absl::Status WriteKnob(const std::string& path, const std::string& value) {
  UniqueFd f(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
  if (!f.valid()) return ErrnoStatus("open " + path);
  if (::write(f.get(), value.data(), value.size()) != static_cast<ssize_t>(value.size())) {
    return ErrnoStatus(absl::StrCat("write ", value, " to ", path));
  }
  return absl::OkStatus();
}

std::optional<int64_t> ReadNumber(const std::string& path) {
  auto text = ReadFile(path);
  int64_t v = 0;
  if (!text.ok() || !absl::SimpleAtoi(absl::StripAsciiWhitespace(*text), &v)) return std::nullopt;
  return v;
}

absl::Status MakeDir(const std::string& dir, const char* controller) {
  std::error_code ec;
  if (!std::filesystem::exists(std::string(kRoot) + controller)) {
    return absl::FailedPreconditionError(absl::StrCat("the cgroup v1 ", controller,
                                                      " hierarchy is not mounted at ", kRoot, controller,
                                                      ": this node cannot limit ", controller));
  }
  std::filesystem::create_directories(dir, ec);
  if (ec) return absl::InternalError(absl::StrCat("create cgroup ", dir, ": ", ec.message()));
  return absl::OkStatus();
}

}  // namespace

absl::Status SetLimits(const std::string& cgroup, double cpus, int64_t memory_bytes) {
  if (cpus > 0) {
    std::string dir = absl::StrCat(kRoot, "cpu/", cgroup);
    RETURN_IF_ERROR(MakeDir(dir, "cpu"));
    constexpr int64_t kPeriod = 100000;
    RETURN_IF_ERROR(WriteKnob(dir + "/cpu.cfs_period_us", std::to_string(kPeriod)));
    int64_t quota = std::max<int64_t>(1000, static_cast<int64_t>(std::llround(cpus * kPeriod)));
    RETURN_IF_ERROR(WriteKnob(dir + "/cpu.cfs_quota_us", std::to_string(quota)));
  } else if (std::filesystem::exists(absl::StrCat(kRoot, "cpu/", cgroup))) {
    RETURN_IF_ERROR(WriteKnob(absl::StrCat(kRoot, "cpu/", cgroup, "/cpu.cfs_quota_us"), "-1"));
  }
  if (memory_bytes > 0) {
    std::string dir = absl::StrCat(kRoot, "memory/", cgroup);
    RETURN_IF_ERROR(MakeDir(dir, "memory"));
    RETURN_IF_ERROR(WriteKnob(dir + "/memory.limit_in_bytes", std::to_string(memory_bytes)));
  } else if (std::filesystem::exists(absl::StrCat(kRoot, "memory/", cgroup))) {
    RETURN_IF_ERROR(WriteKnob(absl::StrCat(kRoot, "memory/", cgroup, "/memory.limit_in_bytes"), "-1"));
  }
  return absl::OkStatus();
}

CgroupUsage ReadUsage(const std::string& cgroup) {
  CgroupUsage u;
  for (const char* h : {"cpuacct/", "cpu,cpuacct/"}) {
    if (auto ns = ReadNumber(absl::StrCat(kRoot, h, cgroup, "/cpuacct.usage"))) {
      u.cpu_seconds = static_cast<double>(*ns) / 1e9;
      break;
    }
  }
  if (!u.cpu_seconds) {
    // No cpuacct hierarchy with the job in it: add up its processes' own CPU time.
    auto procs = ReadFile(absl::StrCat(kRoot, "freezer/", cgroup, "/cgroup.procs"));
    if (procs.ok()) {
      double total = 0;
      static const double kTicks = static_cast<double>(::sysconf(_SC_CLK_TCK));
      for (absl::string_view pid : absl::StrSplit(*procs, '\n', absl::SkipEmpty())) {
        auto stat = ReadFile(absl::StrCat("/proc/", pid, "/stat"));
        if (!stat.ok()) continue;
        size_t paren = stat->rfind(')');
        if (paren == std::string::npos) continue;
        std::vector<absl::string_view> f = absl::StrSplit(absl::string_view(*stat).substr(paren + 2), ' ');
        uint64_t ut = 0, st = 0;  // fields 14 and 15 (index 11 and 12 after the comm)
        if (f.size() > 12 && absl::SimpleAtoi(f[11], &ut) && absl::SimpleAtoi(f[12], &st)) {
          total += static_cast<double>(ut + st) / kTicks;
        }
      }
      u.cpu_seconds = total;
    }
  }
  u.memory_bytes = ReadNumber(absl::StrCat(kRoot, "memory/", cgroup, "/memory.usage_in_bytes"));
  auto limit = ReadNumber(absl::StrCat(kRoot, "memory/", cgroup, "/memory.limit_in_bytes"));
  // An unlimited v1 cgroup reads as a huge page-rounded number.
  if (limit && *limit < (int64_t{1} << 60)) u.memory_limit = limit;
  return u;
}

std::optional<double> NodeMemoryPsi() {
  auto text = ReadFile("/proc/pressure/memory");
  if (!text.ok()) return std::nullopt;
  for (absl::string_view line : absl::StrSplit(*text, '\n')) {
    if (!absl::ConsumePrefix(&line, "some ")) continue;
    for (absl::string_view kv : absl::StrSplit(line, ' ')) {
      double v = 0;
      if (absl::ConsumePrefix(&kv, "avg10=") && absl::SimpleAtod(kv, &v)) return v;
    }
  }
  return std::nullopt;
}

void RemoveCgroup(const std::string& cgroup) {
  for (const char* h : {"freezer", "memory", "cpu", "cpuacct", "pids"}) {
    ::rmdir(absl::StrCat(kRoot, h, "/", cgroup).c_str());
  }
}

void ThawFreezer(const std::string& cgroup) {
  std::string state = absl::StrCat(kRoot, "freezer/", cgroup, "/freezer.state");
  auto text = ReadFile(state);
  if (text.ok() && absl::StripAsciiWhitespace(*text) != "THAWED") (void)WriteKnob(state, "THAWED");
}

std::vector<pid_t> CgroupPids(const std::string& cgroup) {
  std::vector<pid_t> out;
  auto procs = ReadFile(absl::StrCat(kRoot, "freezer/", cgroup, "/cgroup.procs"));
  if (!procs.ok()) return out;
  for (absl::string_view p : absl::StrSplit(*procs, '\n', absl::SkipEmpty())) {
    int pid = 0;
    if (absl::SimpleAtoi(p, &pid) && pid > 1) out.push_back(pid);
  }
  return out;
}

int KillCgroup(const std::string& cgroup) {
  auto procs = ReadFile(absl::StrCat(kRoot, "freezer/", cgroup, "/cgroup.procs"));
  if (!procs.ok()) return 0;
  int killed = 0;
  for (absl::string_view p : absl::StrSplit(*procs, '\n', absl::SkipEmpty())) {
    int pid = 0;
    if (absl::SimpleAtoi(p, &pid) && pid > 1 && ::kill(pid, SIGKILL) == 0) ++killed;
  }
  return killed;
}

int KillCgroupSilently(const std::string& cgroup) {
  absl::Status silenced = net::SilenceTcpConnections(CgroupPids(cgroup));
  if (!silenced.ok()) CAIRN_LOG_WARN("cgroup={} connections not silenced before the kill: {}", cgroup, silenced.ToString());
  return KillCgroup(cgroup);
}

std::string FreezerState(const std::string& cgroup) {
  auto text = ReadFile(absl::StrCat(kRoot, "freezer/", cgroup, "/freezer.state"));
  return text.ok() ? std::string(absl::StripAsciiWhitespace(*text)) : "";
}

}  // namespace cairn::daemon
