#include "engine/job/job.h"

#include <fcntl.h>
#include <grp.h>
#include <linux/sched.h>
#include <pwd.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <algorithm>
#include <filesystem>
#include <string_view>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/file_util.h"
#include "common/status.h"
#include "common/unique_fd.h"
#include "common/validate.h"
#include "engine/machine/cpu.h"

namespace cairn::job {
namespace {

std::string StateDir() {
  const char* d = std::getenv("CAIRN_STATE_DIR");
  return d != nullptr && *d != '\0' ? d : "/var/lib/cairn";
}

std::string RegistryPath(const std::string& name) { return StateDir() + "/jobs/" + name + ".job"; }

pid_t g_command = 0;  // the job's command, as the init sees it (only used inside the init)

void Forward(int sig) {
  if (g_command > 0) ::kill(g_command, sig);
}

// The job's init: PID 1 of the new namespace. Never returns.
[[noreturn]] void InitMain(int go_fd, int out_fd, int err_fd, const std::vector<std::string>& argv) {
  ::prctl(PR_SET_NAME, "cairn-init", 0, 0, 0);
  ::prctl(PR_SET_PDEATHSIG, 0, 0, 0, 0);
  char go = 0;
  if (::read(go_fd, &go, 1) != 1) ::_exit(125);  // the parent failed to set us up
  ::close(go_fd);
  // Own mount namespace with a /proc that shows our PID namespace.
  if (::unshare(CLONE_NEWNS) != 0 || ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
      ::mount("proc", "/proc", "proc", 0, nullptr) != 0) {
    ::dprintf(err_fd, "cairn-init: cannot set up the mount namespace: %s\n", std::strerror(errno));
    ::_exit(125);
  }
  pid_t cmd = ::fork();
  if (cmd == 0) {
    ::setsid();
    int null_fd = ::open("/dev/null", O_RDONLY);
    ::dup2(null_fd, 0);
    ::dup2(out_fd, 1);
    ::dup2(err_fd, 2);
    ::close_range(3, ~0U, 0);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execvp(args[0], args.data());
    ::dprintf(2, "cairn-init: cannot run %s: %s\n", args[0], std::strerror(errno));
    ::_exit(127);
  }
  ::close_range(0, ~0U, 0);
  g_command = cmd;
  struct sigaction sa {};
  sa.sa_handler = Forward;
  sa.sa_flags = SA_RESTART;
  for (int sig : {SIGTERM, SIGINT, SIGHUP, SIGUSR1, SIGUSR2}) ::sigaction(sig, &sa, nullptr);
  for (;;) {
    int status = 0;
    pid_t r = ::waitpid(-1, &status, 0);
    if (r < 0) {
      if (errno == EINTR) continue;
      ::_exit(125);
    }
    if (r == cmd) ::_exit(WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
  }
}

}  // namespace

absl::Status JoinCgroup(const std::string& cgroup, pid_t pid) {
  for (const char* controller : {"freezer", "memory", "cpu", "pids"}) {
    std::string dir = absl::StrCat("/sys/fs/cgroup/", controller, "/", cgroup);
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) {
      if (!std::filesystem::exists(absl::StrCat("/sys/fs/cgroup/", controller))) continue;
      return absl::InternalError(absl::StrCat("create cgroup ", dir, ": ", ec.message()));
    }
    UniqueFd f(::open((dir + "/cgroup.procs").c_str(), O_WRONLY | O_CLOEXEC));
    if (!f.valid()) return ErrnoStatus("open " + dir + "/cgroup.procs");
    RETURN_IF_ERROR(WriteAll(f.get(), std::to_string(pid), dir + "/cgroup.procs"));
  }
  return absl::OkStatus();
}

absl::Status CheckName(const std::string& name) { return CheckJobName(name); }

absl::Status Save(const JobRecord& rec) {
  std::string path = RegistryPath(rec.name);
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  std::string tmp = path + ".tmp";
  UniqueFd f(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
  if (!f.valid()) return ErrnoStatus("create " + tmp);
  std::string text = absl::StrCat("name=", rec.name, "\ndir=", rec.dir, "\nhost_pid=", rec.host_pid,
                                  "\ncgroup=", rec.cgroup, "\ncommand=", rec.command, "\n");
  RETURN_IF_ERROR(WriteAll(f.get(), text, tmp));
  if (::fsync(f.get()) != 0) return ErrnoStatus("fsync " + tmp);
  if (::rename(tmp.c_str(), path.c_str()) != 0) return ErrnoStatus("rename " + tmp);
  return absl::OkStatus();
}

absl::StatusOr<JobRecord> Load(const std::string& name) {
  RETURN_IF_ERROR(CheckName(name));
  auto text = ReadFile(RegistryPath(name));
  if (!text.ok()) {
    if (absl::IsNotFound(text.status())) {
      return absl::NotFoundError(absl::StrCat("no job named '", name, "' (", RegistryPath(name), " does not exist)"));
    }
    return text.status();
  }
  JobRecord rec;
  for (absl::string_view line : absl::StrSplit(*text, '\n', absl::SkipEmpty())) {
    std::pair<absl::string_view, absl::string_view> kv = absl::StrSplit(line, absl::MaxSplits('=', 1));
    if (kv.first == "name") rec.name = std::string(kv.second);
    if (kv.first == "dir") rec.dir = std::string(kv.second);
    if (kv.first == "host_pid" && !absl::SimpleAtoi(kv.second, &rec.host_pid)) {
      return absl::DataLossError("malformed job record " + RegistryPath(name));
    }
    if (kv.first == "cgroup") rec.cgroup = std::string(kv.second);
    if (kv.first == "command") rec.command = std::string(kv.second);
  }
  return rec;
}

absl::StatusOr<JobRecord> Run(const RunOptions& opts) {
  if (opts.argv.empty()) return absl::InvalidArgumentError("cairn run: no command given (use: cairn run -- CMD ARGS...)");
  JobRecord rec;
  rec.name = opts.name;
  if (rec.name.empty()) rec.name = absl::StrCat("job-", ::time(nullptr), "-", ::getpid());
  RETURN_IF_ERROR(CheckName(rec.name));
  if (auto old = Load(rec.name); old.ok() && old->host_pid > 0 && ::kill(old->host_pid, 0) == 0) {
    return absl::AlreadyExistsError(absl::StrCat("job '", rec.name, "' already exists and runs as pid ", old->host_pid));
  }
  rec.dir = opts.dir.empty() ? StateDir() + "/jobs/" + rec.name : opts.dir;
  rec.command = absl::StrJoin(opts.argv, " ");
  rec.cgroup = "cairn/" + rec.name;
  // The logs often hold secrets: they are 0600 (also when they were there before), and a directory
  // made here is 0700, whatever the umask (a directory given with --dir that exists keeps its mode).
  std::error_code ec;
  bool made = std::filesystem::create_directories(rec.dir, ec);
  if (ec) return absl::InternalError(absl::StrCat("create job directory ", rec.dir, ": ", ec.message()));
  if (made && ::chmod(rec.dir.c_str(), 0700) != 0) return ErrnoStatus("chmod 0700 " + rec.dir);
  UniqueFd out(::open((rec.dir + "/stdout.log").c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600));
  UniqueFd err(::open((rec.dir + "/stderr.log").c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600));
  if (!out.valid() || !err.valid()) return ErrnoStatus("open the logs in " + rec.dir);
  if (::fchmod(out.get(), 0600) != 0 || ::fchmod(err.get(), 0600) != 0) return ErrnoStatus("chmod 0600 the logs in " + rec.dir);
  int go[2];
  if (::pipe2(go, O_CLOEXEC) != 0) return ErrnoStatus("pipe2");
  UniqueFd go_r(go[0]), go_w(go[1]);

  // The init: the small static cairn-init beside this executable when there is one (a job's
  // checkpoints then hold a few areas of it, not this program's libraries and heap), else
  // InitMain below. Its command line is built here: between clone3 and exec the child of a
  // threaded parent must not allocate.
  std::string init_exe;
  std::vector<std::string> init_args;
  std::vector<char*> init_argv;
  std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (std::string beside = (self.parent_path() / "cairn-init").string(); !ec && ::access(beside.c_str(), X_OK) == 0) {
    init_exe = beside;
  }
  if ((opts.user.has_value() || !opts.workdir.empty()) && init_exe.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "a job run ", opts.user.has_value() ? "as a user" : "in a working directory",
        " needs cairn-init beside the cairn executable (it drops root and enters the directory there); reinstall cairn"));
  }
  if (!opts.workdir.empty() && opts.workdir[0] != '/') {
    return absl::InvalidArgumentError(absl::StrCat("working directory '", opts.workdir, "': give an absolute path"));
  }
  // Entered by cairn-init as the job's user; that it does not exist at all is said here, before
  // anything starts (root may be refused where the user is not, on a root-squashed NFS: not an error).
  if (struct stat st{}; !opts.workdir.empty() &&
                        ((::stat(opts.workdir.c_str(), &st) != 0 && (errno == ENOENT || errno == ENOTDIR)) ||
                         (st.st_mode != 0 && !S_ISDIR(st.st_mode)))) {
    return absl::InvalidArgumentError(absl::StrCat("working directory '", opts.workdir,
                                                   "': no such directory (create it, or give another)"));
  }
  if (!init_exe.empty()) {
    init_args = {"cairn-init", std::to_string(go_r.get()), std::to_string(out.get()), std::to_string(err.get())};
    if (opts.user.has_value()) {  // cairn-init -u UID:GID:G1,G2,...
      init_args.push_back("-u");
      init_args.push_back(absl::StrCat(opts.user->uid, ":", opts.user->gid, ":", absl::StrJoin(opts.user->groups, ",")));
    }
    if (!opts.workdir.empty()) init_args.insert(init_args.end(), {"-C", opts.workdir});
    init_args.push_back("--");
    init_args.insert(init_args.end(), opts.argv.begin(), opts.argv.end());
    for (std::string& a : init_args) init_argv.push_back(a.data());
    init_argv.push_back(nullptr);
  }

  // The environment: the one given, else this one, with a CPU baseline's variables
  // (machine/cpu.h) when asked for. Built here, like the command line: the child must not allocate.
  std::vector<std::string> env_strings;
  std::vector<char*> envp;
  std::vector<std::string_view> base;
  if (opts.env.has_value()) {
    for (const std::string& e : *opts.env) {
      if (e.find('=') == std::string::npos || e.front() == '=' || e.find('\0') != std::string::npos) {
        return absl::InvalidArgumentError(absl::StrCat("environment entry '", e, "': give KEY=VALUE"));
      }
      base.emplace_back(e);
    }
  } else {
    for (char** e = environ; *e != nullptr; ++e) base.emplace_back(*e);
  }
  if (opts.env.has_value() || opts.cpu_baseline > 0) {
    // A baseline's variables (machine/cpu.h) replace any of the same name.
    std::vector<std::pair<std::string, std::string>> vars;
    if (opts.cpu_baseline > 0) {
      const char* tunables = nullptr;
      for (std::string_view e : base) {
        if (e.substr(0, 15) == "GLIBC_TUNABLES=") tunables = e.data() + 15;
      }
      vars = machine::BaselineEnvironment(opts.cpu_baseline, tunables != nullptr ? tunables : "");
    }
    for (std::string_view entry : base) {
      bool replaced = std::any_of(vars.begin(), vars.end(), [&](const auto& v) {
        return entry.substr(0, v.first.size() + 1) == v.first + "=";
      });
      if (!replaced) env_strings.emplace_back(entry);
    }
    for (const auto& [k, v] : vars) env_strings.push_back(absl::StrCat(k, "=", v));
    for (std::string& s : env_strings) envp.push_back(s.data());
    envp.push_back(nullptr);
  }

  // A given environment (a SLURM task's: its user's) reaches cairn-init, which runs as root until
  // it drops to the user, not as its own environment but in a memfd (-E FD) that it gives the
  // command: no variable of the user's (GLIBC_TUNABLES, MALLOC_*) is read by a root process.
  UniqueFd env_fd;
  if (opts.env.has_value() && !init_exe.empty()) {
    std::string block;
    for (const std::string& e : env_strings) block.append(e).push_back('\0');
    ASSIGN_OR_RETURN(int fd, MemoryFileWith("cairn-job-env", block));
    env_fd = UniqueFd(fd);
    auto dashes = std::find(init_args.begin(), init_args.end(), "--");
    init_args.insert(dashes, {"-E", std::to_string(env_fd.get())});
    init_argv.clear();
    for (std::string& a : init_args) init_argv.push_back(a.data());
    init_argv.push_back(nullptr);
  }

  // The init is PID 1 of a new PID namespace. clone3 rather than unshare + fork, so that
  // cairn itself stays able to create threads (unshare(CLONE_NEWPID) would forbid it).
  clone_args args{};
  // Its own time namespace too (offsets 0 here): a restore on another machine sets its offsets
  // so that the job's monotonic clocks go on (image.proto TimeNamespace).
  args.flags = CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWTIME;
  args.exit_signal = SIGCHLD;
  pid_t init = static_cast<pid_t>(::syscall(SYS_clone3, &args, sizeof args));
  if (init < 0) return ErrnoStatus("clone3(CLONE_NEWPID): cairn run needs root");
  if (init == 0) {
    go_w.Reset();
    if (!envp.empty() && !env_fd.valid()) environ = envp.data();
    if (!init_exe.empty()) {
      for (int fd : {go_r.get(), out.get(), err.get(), env_fd.get()}) {
        if (fd >= 0) ::fcntl(fd, F_SETFD, 0);
      }
      ::execv(init_exe.c_str(), init_argv.data());
    }
    InitMain(go_r.get(), out.get(), err.get(), opts.argv);
  }
  go_r.Reset();
  absl::Status st = JoinCgroup(rec.cgroup, init);
  if (!st.ok()) {
    ::kill(init, SIGKILL);
    ::waitpid(init, nullptr, 0);
    return st;
  }
  char one = 1;
  if (::write(go_w.get(), &one, 1) != 1) return ErrnoStatus("start the job's init");
  rec.host_pid = init;
  RETURN_IF_ERROR(Save(rec));
  return rec;
}

absl::StatusOr<UserIds> LookupUser(const std::string& name) {
  // UID:GID[:G1,G2...]: exactly these ids (a SLURM job's, from slurmstepd: its --gid, its groups).
  if (name.find(':') != std::string::npos) {
    std::vector<std::string> parts = absl::StrSplit(name, absl::MaxSplits(':', 2));
    UserIds ids;
    bool ok = parts.size() >= 2 && absl::SimpleAtoi(parts[0], &ids.uid) && absl::SimpleAtoi(parts[1], &ids.gid);
    if (ok && parts.size() == 3) {
      for (absl::string_view g : absl::StrSplit(parts[2], ',', absl::SkipEmpty())) {
        uint32_t gid = 0;
        ok = ok && absl::SimpleAtoi(g, &gid) && ids.groups.size() < 256;
        ids.groups.push_back(gid);
      }
    }
    if (!ok || ids.uid == 0) {
      return absl::InvalidArgumentError(absl::StrCat("user `", name, "`: give a name, a uid, or UID:GID[:G1,G2,...] "
                                                     "of a user other than root"));
    }
    return ids;
  }
  std::vector<char> buf(16384);
  passwd pw{};
  passwd* found = nullptr;
  int rc = ::getpwnam_r(name.c_str(), &pw, buf.data(), buf.size(), &found);
  uint32_t numeric = 0;
  if (found == nullptr && absl::SimpleAtoi(name, &numeric)) {
    rc = ::getpwuid_r(numeric, &pw, buf.data(), buf.size(), &found);
  }
  if (found == nullptr) {
    return absl::NotFoundError(absl::StrCat("user `", name, "`: ", rc != 0 ? std::strerror(rc) : "no such user on this machine",
                                            " (give a user name from /etc/passwd, or a uid that has one)"));
  }
  std::vector<gid_t> groups(64);
  int n = static_cast<int>(groups.size());
  if (::getgrouplist(pw.pw_name, pw.pw_gid, groups.data(), &n) < 0) {
    groups.resize(n);
    if (::getgrouplist(pw.pw_name, pw.pw_gid, groups.data(), &n) < 0) {
      return absl::InternalError(absl::StrCat("user `", name, "`: cannot list its groups"));
    }
  }
  groups.resize(n);
  return UserIds{pw.pw_uid, pw.pw_gid, std::vector<uint32_t>(groups.begin(), groups.end())};
}

absl::StatusOr<restore::RestoreOptions::Owner> OwnerOf(const std::string& name) {
  ASSIGN_OR_RETURN(UserIds ids, LookupUser(name));
  return restore::RestoreOptions::Owner{ids.uid, ids.gid, name};
}

}  // namespace cairn::job
