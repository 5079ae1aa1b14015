// Containers checkpointed by their own runtime through cairn's criu-compat (integrations/criu/service.h):
// Debian's runc runs a busybox container, `runc checkpoint` and `runc restore` call the `criu`
// they are given — a link to cairn — and the container goes on as it was, seen from inside:
// its counter, its pid 1, its host name, its mounts, its stdout pipe handed over by the runtime.
// Bad input: an option cairn cannot honour is refused (the runtime fails, the container runs
// on untouched), a container holding what cairn cannot save keeps running, and a garbled
// message gets an error answer.

#include <fcntl.h>
#include <linux/nsfs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "common/unique_fd.h"
#include "criu_rpc.pb.h"
#include "harness.h"

namespace cairn::testing {
namespace {

namespace fs = std::filesystem;

constexpr char kRunc[] = "/usr/sbin/runc";
constexpr char kBusybox[] = "/bin/busybox";
constexpr char kPython[] = "/usr/bin/python3";

// The container's loop: a counter only its memory holds, its pid and host name, one line a
// tenth of a second to /data/log (in its root file system) and to stdout.
constexpr char kLoop[] =
    "i=0; while true; do i=$((i+1)); l=\"$i $$ $(cat /proc/sys/kernel/hostname)\"; echo \"$l\" >> /data/log; "
    "echo \"$l\"; sleep 0.1; done";

// Runs `argv` with stdin from /dev/null, stdout to `out_fd` (/dev/null if -1) and stderr to
// `err_path`; waits for it. Returns its exit status (-1 if it did not exit).
int RunWithStdout(const std::vector<std::string>& argv, int out_fd, const std::string& err_path) {
  pid_t pid = ::fork();
  if (pid == 0) {
    int in = ::open("/dev/null", O_RDONLY);
    int err = ::open(err_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
    int out = out_fd >= 0 ? out_fd : ::open("/dev/null", O_WRONLY);
    ::dup2(in, 0);
    ::dup2(out, 1);
    ::dup2(err, 2);
    ::closefrom(3);
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// Lines read from `fd` until `want` complete lines have come or `timeout` passes.
std::vector<std::string> ReadLines(int fd, size_t want, std::chrono::milliseconds timeout) {
  std::vector<std::string> lines;
  std::string partial;
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (lines.size() < want && std::chrono::steady_clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    char buf[4096];
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n <= 0) break;
    partial.append(buf, static_cast<size_t>(n));
    size_t nl;
    while ((nl = partial.find('\n')) != std::string::npos) {
      lines.push_back(partial.substr(0, nl));
      partial.erase(0, nl + 1);
    }
  }
  return lines;
}

std::vector<std::string> SplitLines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) {
    if (!l.empty()) lines.push_back(l);
  }
  return lines;
}

// "7 1 runc" -> 7.
long Counter(const std::string& line) { return std::strtol(line.c_str(), nullptr, 10); }

class RuncContainers : public CairnTest {
 protected:
  void SetUp() override {
    CairnTest::SetUp();
    if (!fs::exists(kRunc) || !fs::exists(kBusybox) || !fs::exists(kPython)) {
      GTEST_SKIP() << kRunc << ", " << kBusybox << " or " << kPython
                   << " is not installed (scripts/install-deps.sh installs runc and busybox-static)";
    }
    shim_ = *temp_ / "shim";
    fs::create_directories(shim_);
    fs::create_symlink(CairnBinary(), shim_ + "/criu");
    state_ = *temp_ / "runc-state";
    bundle_ = *temp_ / "bundle";
  }

  void TearDown() override {
    if (!state_.empty() && fs::exists(state_)) {
      for (const char* id : {"c2", "c1"}) Runc({"delete", "--force", id});
    }
    CairnTest::TearDown();
  }

  // A bundle whose root file system holds busybox, running the loop; `extra_mounts`: JSON
  // objects appended to the spec's mounts.
  // `args`: the container's command instead of the loop.
  void MakeBundle(const std::string& extra_mounts = "", const std::vector<std::string>& args = {}) {
    std::string rootfs = bundle_ + "/rootfs";
    for (const char* d : {"bin", "proc", "sys", "dev", "tmp", "data", "etc"}) fs::create_directories(rootfs + "/" + d);
    fs::copy_file(kBusybox, rootfs + "/bin/busybox");
    for (const char* a : {"sh", "sleep", "cat", "echo", "ls", "hostname", "tty", "stty", "nc"}) {
      fs::create_symlink("busybox", rootfs + "/bin/" + a);
    }
    ASSERT_EQ(RunWithStdout({kRunc, "spec", "--bundle", bundle_}, -1, *temp_ / "spec.err"), 0)
        << ReadFile(*temp_ / "spec.err");
    std::string edit = std::string(
                           "import json,sys\n"
                           "p=sys.argv[1]; c=json.load(open(p))\n"
                           "c['process']['terminal']=sys.argv[5]=='1'\n"
                           "c['process']['args']=json.loads(sys.argv[4]) or ['sh','-c',sys.argv[2]]\n"
                           "c['root']['readonly']=False\n"
                           "c['hostname']='cairn-box'\n"
                           "c['mounts'] += json.loads('[' + sys.argv[3] + ']')\n"
                           "ns=sys.argv[6]\n"
                           "if ns: c['linux']['namespaces']=[n if n['type']!='network' else "
                           "{'type':'network','path':ns} for n in c['linux']['namespaces']]\n"
                           "if sys.argv[7]=='1':\n"
                           "  c['linux']['namespaces'].append({'type':'user'})\n"
                           "  m=[{'containerID':0,'hostID':int(sys.argv[8]),'size':65536}]\n"
                           "  c['linux']['uidMappings']=m; c['linux']['gidMappings']=m\n"
                           // A user namespace cannot mount the sysfs of a network namespace it does not own.
                           "  if ns: [m.update(type='tmpfs',source='tmpfs',options=['nosuid','noexec','nodev']) "
                           "for m in c['mounts'] if m['destination']=='/sys']\n"
                           "if sys.argv[9]=='1': c['linux']['namespaces'].append({'type':'cgroup'})\n"
                           "if sys.argv[10]: c['linux']['namespaces']=[n if n['type']!='pid' else "
                           "{'type':'pid','path':sys.argv[10]} for n in c['linux']['namespaces']]\n"
                           // Its own cgroups: runc's default (/ID) is shared by the tests that run at once.
                           "c['linux']['cgroupsPath']=sys.argv[11]\n"
                           "json.dump(c,open(p,'w'))\n");
    cgroup_ = "/" + fs::path(temp_->path()).filename().string() + "-" + fs::path(bundle_).filename().string();
    std::string args_json = "[";
    for (const std::string& a : args) {
      std::string quoted;
      for (char ch : a) quoted += ch == '"' || ch == '\\' ? std::string("\\") + ch : std::string(1, ch);
      args_json += (args_json.size() > 1 ? ",\"" : "\"") + quoted + "\"";
    }
    args_json += "]";
    ASSERT_EQ(RunWithStdout({kPython, "-c", edit, bundle_ + "/config.json", kLoop, extra_mounts, args_json,
                             terminal_ ? "1" : "0", netns_, userns_ ? "1" : "0", std::to_string(kUsernsHostId),
                             cgroupns_ ? "1" : "0", pidns_,
                             cgroup_},
                            -1,
                            *temp_ / "spec.err"),
              0)
        << ReadFile(*temp_ / "spec.err");
    if (userns_) {
      // The container's root is kUsernsHostId on the host: its files are that id's, and the
      // runtime, as that id, must reach its root file system.
      ::chmod(temp_->path().c_str(), 0755);
      ::chmod(bundle_.c_str(), 0755);
      ::lchown(rootfs.c_str(), kUsernsHostId, kUsernsHostId);
      for (const auto& e : fs::recursive_directory_iterator(rootfs)) {
        ::lchown(e.path().c_str(), kUsernsHostId, kUsernsHostId);
      }
    }
  }
  static constexpr uid_t kUsernsHostId = 100000;
  std::string cgroup_;  // the last bundle's cgroups path (as /proc/PID/cgroup shows it on the host)

  std::vector<std::string> RuncArgs(const std::vector<std::string>& args) {
    std::vector<std::string> argv = {kRunc, "--root", state_, "--criu", shim_ + "/criu", "--log", *temp_ / "runc.log"};
    argv.insert(argv.end(), args.begin(), args.end());
    return argv;
  }
  int Runc(const std::vector<std::string>& args, int out_fd = -1) {
    return RunWithStdout(RuncArgs(args), out_fd, *temp_ / "runc.err");
  }
  // Starts container `id` detached, its stdout `out_fd`.
  ::testing::AssertionResult Start(const std::string& id, int out_fd = -1) {
    if (Runc({"run", "--detach", "--bundle", bundle_, id}, out_fd) != 0) {
      return ::testing::AssertionFailure() << "runc run: " << ReadFile(*temp_ / "runc.err");
    }
    return ::testing::AssertionSuccess();
  }
  // What `runc exec ID ARGS...` writes to its stdout, or "runc exec failed: ..." with its error.
  std::string Exec(const std::string& id, const std::vector<std::string>& args) {
    std::string out = *temp_ / "exec.out";
    int fd = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    std::vector<std::string> all = {"exec", id};
    all.insert(all.end(), args.begin(), args.end());
    int rc = Runc(all, fd);
    ::close(fd);
    return rc == 0 ? ReadFile(out) : "runc exec failed: " + ReadFile(*temp_ / "runc.err");
  }
  // `runc kill ID KILL`, then its init `pid` gone.
  void KillContainer(const std::string& id, pid_t pid) {
    EXPECT_EQ(Runc({"kill", id, "KILL"}), 0) << Diagnostics();
    EXPECT_TRUE(WaitGone(pid, 10s).gone);
  }
  // Container `id` started detached, its log `lines` long: its init, 0 (the failure added) if not.
  pid_t StartCounting(const std::string& id, size_t lines) {
    ::testing::AssertionResult started = Start(id);
    if (!started) {
      ADD_FAILURE() << started.message();
      return 0;
    }
    if (!WaitLog(lines)) {
      ADD_FAILURE() << "the container's log did not reach " << lines << " lines" << Diagnostics();
      return 0;
    }
    return InitPid(id);
  }
  // `runc checkpoint` of `id`, whose init `before` is then gone, and `runc restore --detach`: the
  // restored init, tracked as `argv0`; 0, the failure added, if either command failed.
  pid_t CheckpointAndRestore(const std::string& id, pid_t before, const std::string& argv0) {
    if (Checkpoint(id) != 0) {
      ADD_FAILURE() << "runc checkpoint " << id << " failed" << Diagnostics();
      return 0;
    }
    EXPECT_TRUE(WaitGone(before, 10s).gone) << "runc checkpoint leaves the container stopped";
    pid_t after = RestoreDetached(id);
    if (after <= 0) {
      ADD_FAILURE() << "runc restore " << id << " failed" << Diagnostics();
      return 0;
    }
    Track(after, argv0);
    return after;
  }
  pid_t InitPid(const std::string& id) {
    std::string out = *temp_ / "state.out";
    int fd = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    Runc({"state", id}, fd);
    ::close(fd);
    std::string state = ReadFile(out);
    size_t at = state.find("\"pid\": ");
    return at == std::string::npos ? 0 : static_cast<pid_t>(std::atoi(state.c_str() + at + 7));
  }
  // `runc checkpoint` of `id` into `images` under the test directory (work/ beside it), with
  // `extra` options; runc's exit status.
  int Checkpoint(const std::string& id, const std::vector<std::string>& extra = {},
                 const std::string& images = "images") {
    std::vector<std::string> args = {"checkpoint"};
    args.insert(args.end(), extra.begin(), extra.end());
    for (const std::string& a : {std::string("--image-path"), std::string(*temp_ / images), std::string("--work-path"),
                                 std::string(*temp_ / "work"), id}) {
      args.push_back(a);
    }
    return Runc(args);
  }
  // `runc restore --detach` of `id` from images/, with `extra` options and stdout `out_fd`: the
  // restored init's pid as runc learned it (post-restore), 0 if runc failed.
  pid_t RestoreDetached(const std::string& id, const std::vector<std::string>& extra = {}, int out_fd = -1) {
    std::vector<std::string> args = {"restore", "--detach"};
    args.insert(args.end(), extra.begin(), extra.end());
    for (const std::string& a : {std::string("--image-path"), std::string(*temp_ / "images"),
                                 std::string("--work-path"), std::string(*temp_ / "work"), std::string("--bundle"),
                                 bundle_, id}) {
      args.push_back(a);
    }
    return Runc(args, out_fd) == 0 ? InitPid(id) : 0;
  }
  std::vector<std::string> Log() { return SplitLines(ReadFile(bundle_ + "/rootfs/data/log")); }
  // Container c1 started, counting, then paused by its runtime (`runc pause`): its init, its v1
  // freezer cgroup and the lines it had logged.
  struct Paused {
    pid_t init = 0;
    std::string freezer;
    size_t logged = 0;
  };
  void StartPaused(Paused* p);
  // Waits until the container's log has at least `n` lines.
  bool WaitLog(size_t n, std::chrono::milliseconds timeout = 20s) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (Log().size() < n) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::sleep_for(50ms);
    }
    return true;
  }
  // Every line of the log counts on from the one before it, in the same pid 1 and host name.
  ::testing::AssertionResult CountsOn(const std::vector<std::string>& lines) {
    for (size_t i = 0; i < lines.size(); ++i) {
      if (Counter(lines[i]) != static_cast<long>(i) + 1 || lines[i].find(" 1 cairn-box") == std::string::npos) {
        return ::testing::AssertionFailure() << "line " << i + 1 << " is '" << lines[i] << "'";
      }
    }
    return ::testing::AssertionSuccess();
  }
  std::string Diagnostics() {
    return "\nrunc: " + ReadFile(*temp_ / "runc.err") + ReadFile(*temp_ / "runc.log") +
           "\ndump.log: " + ReadFile(*temp_ / "work/dump.log") + "\nrestore.log: " + ReadFile(*temp_ / "work/restore.log");
  }

  std::string shim_, state_, bundle_;
  bool terminal_ = false;  // MakeBundle: the container's stdio is a terminal (runc --console-socket)
  std::string netns_;      // MakeBundle: the container joins this network namespace (its path)
  bool userns_ = false;    // MakeBundle: the container has a user namespace (0-65535 -> kUsernsHostId...)
  bool cgroupns_ = false;  // MakeBundle: the container has a cgroup namespace
  // A program holding a socket name, a removed file and an inotify watch in the container's
  // file system (tests/workloads/container/files_server.c), checkpointed and restored.
  void FilesInsideComeBack(bool userns);
  std::string pidns_;      // MakeBundle: the container joins this PID namespace (its path)
};

// A mount table as its owner sees it, line by line: root, mount point, per-mount options, then
// after "-": type, source, super options (no mount ids, which a restore renumbers).
std::vector<std::string> MountShape(const std::string& mountinfo) {
  std::vector<std::string> out;
  for (const std::string& l : SplitLines(mountinfo)) {
    std::istringstream f(l);
    std::vector<std::string> w;
    for (std::string x; f >> x;) w.push_back(x);
    std::string line = w[3] + " " + w[4] + " " + w[5];
    auto dash = std::find(w.begin(), w.end(), "-");
    for (auto it = dash; it != w.end(); ++it) line += " " + *it;
    out.push_back(line);
  }
  return out;
}

// The runtime's console socket (runc --console-socket): each connection brings the master of
// a container's terminal (SCM_RIGHTS).
class ConsoleSocket {
 public:
  explicit ConsoleSocket(const std::string& path) {
    fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", path.c_str());
    ok_ = fd_ >= 0 && ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 && ::listen(fd_, 4) == 0;
  }
  ~ConsoleSocket() {
    if (fd_ >= 0) ::close(fd_);
  }
  bool ok() const { return ok_; }
  // The next master a runtime sends, or -1 after `timeout`. The caller closes it.
  int Next(std::chrono::milliseconds timeout) {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(timeout.count())) != 1) return -1;
    int c = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (c < 0) return -1;
    char name[256];
    iovec iov{name, sizeof name};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))];
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    int master = -1;
    if (::recvmsg(c, &msg, MSG_CMSG_CLOEXEC) > 0) {
      cmsghdr* h = CMSG_FIRSTHDR(&msg);
      if (h != nullptr && h->cmsg_type == SCM_RIGHTS) std::memcpy(&master, CMSG_DATA(h), sizeof master);
    }
    ::close(c);
    return master;
  }

 private:
  int fd_ = -1;
  bool ok_ = false;
};

TEST_F(RuncContainers, CheckpointAndRestoreGoOnCountingInTheSameContainer) {
  MakeBundle();
  pid_t before = StartCounting("c1", 5);
  ASSERT_GT(before, 0);
  std::string mounts_before = ReadFile("/proc/" + std::to_string(before) + "/mountinfo");

  ASSERT_EQ(Checkpoint("c1"), 0) << Diagnostics();
  EXPECT_TRUE(WaitGone(before, 10s).gone) << "runc checkpoint leaves the container stopped";
  std::vector<std::string> at_checkpoint = Log();
  ASSERT_TRUE(CountsOn(at_checkpoint));
  EXPECT_TRUE(Exists(*temp_ / "images/cairn/checkpoint.meta")) << "cairn's own checkpoint in the runtime's directory";
  CommandResult inspect = Inspect(*temp_ / "images/cairn");
  EXPECT_TRUE(inspect.Exited(0)) << inspect.Describe();
  EXPECT_NE(inspect.out.find("host name cairn-box"), std::string::npos) << inspect.out;
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(Log().size(), at_checkpoint.size()) << "nothing runs between checkpoint and restore";

  pid_t after = RestoreDetached("c1");
  ASSERT_GT(after, 0) << "runc restored it and learned the restored init's pid (post-restore)" << Diagnostics();
  Track(after, "sh");
  ASSERT_TRUE(WaitLog(at_checkpoint.size() + 10)) << Diagnostics();
  // The same counter, pid 1 and host name, from where it stood.
  EXPECT_TRUE(CountsOn(Log()));

  // The container's world as it sees it: the same mounts, in the same order, with the same
  // options (the cgroup mounts show its cgroup, named the same: the runtime placed it there).
  std::string mounts_after = ReadFile("/proc/" + std::to_string(after) + "/mountinfo");
  EXPECT_EQ(MountShape(mounts_after), MountShape(mounts_before));
  for (const char* ns : {"net", "uts", "ipc", "mnt", "pid"}) {
    std::string mine = fs::read_symlink("/proc/self/ns/" + std::string(ns));
    std::string theirs = fs::read_symlink("/proc/" + std::to_string(after) + "/ns/" + ns);
    EXPECT_NE(mine, theirs) << "the restored container has its own " << ns << " namespace";
  }
  // The runtime manages it as its own again.
  std::string cmdline = Exec("c1", {"/bin/cat", "/proc/1/cmdline"});
  EXPECT_NE(cmdline.find("while true"), std::string::npos) << cmdline;
  KillContainer("c1", after);
}

// A container in a user namespace of its own (runc's uidMappings/gidMappings: its root is uid
// 100000 on the host) comes back in a new one with the same maps, owning every other namespace
// of the container as when its runtime made them; its processes are root inside and 100000
// outside with the same capabilities, and its mounts and its counter are as they were.
TEST_F(RuncContainers, AContainerInAUserNamespaceComesBackInOneWithTheSameMaps) {
  userns_ = true;
  MakeBundle();
  pid_t before = StartCounting("c1", 5);
  ASSERT_GT(before, 0);
  // From the host: the maps, and the credentials the kernel holds (the host's ids).
  auto host_view = [](pid_t pid) {
    std::string p = "/proc/" + std::to_string(pid);
    std::string view = ReadFile(p + "/uid_map") + ReadFile(p + "/gid_map") + ReadFile(p + "/setgroups");
    for (const std::string& l : SplitLines(ReadFile(p + "/status"))) {
      for (const char* key : {"Uid:", "Gid:", "Groups:", "CapInh:", "CapPrm:", "CapEff:", "CapBnd:", "CapAmb:",
                              "NoNewPrivs:", "Seccomp:"}) {
        if (l.rfind(key, 0) == 0) view += l + "\n";
      }
    }
    return view;
  };
  // Which of the container's namespaces its user namespace owns (NS_GET_USERNS, ioctl_ns(2)).
  auto owned = [](pid_t pid) {
    std::string p = "/proc/" + std::to_string(pid) + "/ns/";
    struct stat user {};
    std::string out;
    if (::stat((p + "user").c_str(), &user) != 0) return std::string("no user namespace");
    for (const char* ns : {"mnt", "pid", "net", "uts", "ipc"}) {
      UniqueFd f(::open((p + ns).c_str(), O_RDONLY | O_CLOEXEC));
      UniqueFd owner(f.valid() ? ::ioctl(f.get(), NS_GET_USERNS) : -1);
      struct stat o {};
      bool mine = owner.valid() && ::fstat(owner.get(), &o) == 0 && o.st_ino == user.st_ino && o.st_dev == user.st_dev;
      out += std::string(ns) + (mine ? " owned " : " NOT owned ");
    }
    return out;
  };
  // From inside, through the runtime: ids, maps, pid 1's credentials as the container names them.
  auto inside_view = [&]() {
    return Exec("c1", {"/bin/busybox", "sh", "-c",
                       "busybox id; cat /proc/self/uid_map /proc/self/gid_map; "
                       "busybox grep -E '^(Uid|Gid|Cap)' /proc/1/status"});
  };
  std::string host_before = host_view(before), owned_before = owned(before), inside_before = inside_view();
  ASSERT_NE(host_before.find("100000"), std::string::npos) << host_before;
  ASSERT_EQ(owned_before, "mnt owned pid owned net owned uts owned ipc owned ");
  ASSERT_NE(inside_before.find("uid=0"), std::string::npos) << inside_before;
  std::string mounts_before = ReadFile("/proc/" + std::to_string(before) + "/mountinfo");

  ASSERT_EQ(Checkpoint("c1"), 0) << Diagnostics();
  EXPECT_TRUE(WaitGone(before, 10s).gone);
  std::vector<std::string> at_checkpoint = Log();
  ASSERT_TRUE(CountsOn(at_checkpoint));
  CommandResult inspect = Inspect(*temp_ / "images/cairn");
  EXPECT_NE(inspect.out.find("user namespace of its own: uids 0-65535 -> 100000-165535; gids 0-65535 -> "
                             "100000-165535; setgroups allowed"),
            std::string::npos)
      << inspect.out;

  pid_t after = RestoreDetached("c1");
  ASSERT_GT(after, 0) << Diagnostics();
  Track(after, "sh");
  ASSERT_TRUE(WaitLog(at_checkpoint.size() + 10)) << Diagnostics();
  EXPECT_TRUE(CountsOn(Log()));
  EXPECT_EQ(host_view(after), host_before);
  EXPECT_EQ(owned(after), owned_before);
  EXPECT_NE(fs::read_symlink("/proc/" + std::to_string(after) + "/ns/user"), fs::read_symlink("/proc/self/ns/user"));
  EXPECT_EQ(inside_view(), inside_before);
  EXPECT_EQ(MountShape(ReadFile("/proc/" + std::to_string(after) + "/mountinfo")), MountShape(mounts_before));
  // What it makes now is its root's: the host's 100000.
  EXPECT_EQ(Runc({"exec", "c1", "/bin/busybox", "touch", "/data/made-after-restore"}), 0) << Diagnostics();
  struct stat made {};
  ASSERT_EQ(::stat((bundle_ + "/rootfs/data/made-after-restore").c_str(), &made), 0);
  EXPECT_EQ(made.st_uid, kUsernsHostId);
  EXPECT_EQ(made.st_gid, kUsernsHostId);
  KillContainer("c1", after);
}

// A container with a cgroup namespace of its own (runc's "cgroup" namespace) sees its cgroups
// as the namespace's root again after restore, in the same cgroups on the host, with the same
// mounts: the restore's clone makes the namespace where the runtime placed the restorer.
TEST_F(RuncContainers, AContainerWithItsOwnCgroupNamespaceStandsAtItsRootAgain) {
  cgroupns_ = true;
  MakeBundle();
  pid_t before = StartCounting("c1", 5);
  ASSERT_GT(before, 0);
  auto inside = [&]() { return Exec("c1", {"/bin/cat", "/proc/1/cgroup"}); };
  auto host = [](pid_t pid) { return ReadFile("/proc/" + std::to_string(pid) + "/cgroup"); };
  std::string inside_before = inside(), host_before = host(before);
  ASSERT_NE(inside_before.find(":/"), std::string::npos) << inside_before;
  for (const std::string& line : SplitLines(inside_before)) {
    ASSERT_EQ(line.substr(line.rfind(':')), ":/") << "inside its namespace the container is at the root: " << line;
  }
  ASSERT_NE(host_before.find(cgroup_), std::string::npos) << host_before;
  std::string mounts_before = ReadFile("/proc/" + std::to_string(before) + "/mountinfo");

  std::vector<std::string> at_checkpoint = Log();
  pid_t after = CheckpointAndRestore("c1", before, "sh");
  ASSERT_GT(after, 0);
  ASSERT_TRUE(WaitLog(at_checkpoint.size() + 5)) << Diagnostics();
  EXPECT_TRUE(CountsOn(Log()));
  EXPECT_EQ(inside(), inside_before);
  EXPECT_EQ(host(after), host_before);
  EXPECT_NE(fs::read_symlink("/proc/" + std::to_string(after) + "/ns/cgroup"), fs::read_symlink("/proc/self/ns/cgroup"));
  EXPECT_EQ(MountShape(ReadFile("/proc/" + std::to_string(after) + "/mountinfo")), MountShape(mounts_before));
  KillContainer("c1", after);
}

// Files the kernel generates, held open by the container's process: its /proc and /sys are new
// mounts after the restore, whose inodes have other numbers and times, and are found by name.
TEST_F(RuncContainers, KernelFilesHeldOpenAreFoundInTheRestoredContainersNewProcAndSys) {
  MakeBundle("", {"sh", "-c", std::string("exec 3</proc/sys/kernel/hostname 4</sys/devices/system/cpu/online; ") + kLoop});
  pid_t before = StartCounting("c1", 3);
  ASSERT_GT(before, 0);
  auto fd_link = [](pid_t pid, int fd) {
    std::error_code ec;
    return fs::read_symlink("/proc/" + std::to_string(pid) + "/fd/" + std::to_string(fd), ec).string();
  };
  ASSERT_EQ(fd_link(before, 3), "/proc/sys/kernel/hostname");
  ASSERT_EQ(fd_link(before, 4), "/sys/devices/system/cpu/online");
  std::vector<std::string> at_checkpoint = Log();
  pid_t after = CheckpointAndRestore("c1", before, "sh");
  ASSERT_GT(after, 0);
  ASSERT_TRUE(WaitLog(at_checkpoint.size() + 3)) << Diagnostics();
  EXPECT_TRUE(CountsOn(Log()));
  EXPECT_EQ(fd_link(after, 3), "/proc/sys/kernel/hostname");
  EXPECT_EQ(fd_link(after, 4), "/sys/devices/system/cpu/online");
  // The container reads its own host name through its restored descriptor.
  EXPECT_EQ(Exec("c1", {"/bin/cat", "/proc/1/fd/3"}), "cairn-box\n") << Diagnostics();
  KillContainer("c1", after);
}

// One line from the unix socket at `path` (a connection, read to its end); "" if none answers.
std::string AskUnix(const std::string& path) {
  UniqueFd c(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  if (!c.valid() || path.size() >= sizeof a.sun_path) return "";
  std::memcpy(a.sun_path, path.c_str(), path.size());
  if (::connect(c.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) return "";
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = ::read(c.get(), buf, sizeof buf)) > 0;) out.append(buf, static_cast<size_t>(n));
  return out;
}

// What a program keeps in the container's own file system comes back there
// (tests/workloads/container/files_server.c): its listening unix socket at the name
// /dev/shm/files.sock on the container's tmpfs, a file it removed while holding it open (its
// content read through the descriptor), and its inotify watch on /data (a file made there after
// the restore is reported after the one made before).
void RuncContainers::FilesInsideComeBack(bool userns) {
  std::string program = std::string(WORKLOAD_DIR) + "/container/files_server";
  if (!fs::exists(program)) GTEST_SKIP() << program << " is not built";
  userns_ = userns;
  MakeBundle("", {"/bin/files_server"});
  fs::copy_file(program, bundle_ + "/rootfs/bin/files_server");
  if (userns) ::lchown((bundle_ + "/rootfs/bin/files_server").c_str(), kUsernsHostId, kUsernsHostId);
  ASSERT_TRUE(Start("c1"));
  pid_t before = InitPid("c1");
  ASSERT_GT(before, 0);
  auto sock = [](pid_t pid) { return "/proc/" + std::to_string(pid) + "/root/dev/shm/files.sock"; };
  auto ask_until = [&](pid_t pid, const std::string& want) {
    std::string got;
    for (int i = 0; i < 200 && got != want; ++i) {
      got = AskUnix(sock(pid));
      if (got != want) std::this_thread::sleep_for(50ms);
    }
    return got;
  };
  ASSERT_EQ(ask_until(before, "deleted=kept-after-unlink events=\n"), "deleted=kept-after-unlink events=\n")
      << Diagnostics();
  { std::ofstream(bundle_ + "/rootfs/data/made-before"); }
  ASSERT_EQ(ask_until(before, "deleted=kept-after-unlink events=made-before\n"),
            "deleted=kept-after-unlink events=made-before\n");
  // The removed file as the kernel names it: made again next to its old name, in the container.
  auto removed = [](pid_t pid) {
    std::error_code ec;
    return fs::read_symlink("/proc/" + std::to_string(pid) + "/fd/3", ec).string();
  };
  std::string removed_before = removed(before);
  ASSERT_NE(removed_before.find("scratch (deleted)"), std::string::npos) << removed_before;

  pid_t after = CheckpointAndRestore("c1", before, "/bin/files_server");
  ASSERT_GT(after, 0);
  struct stat st {};
  ASSERT_EQ(::stat(sock(after).c_str(), &st), 0) << "the socket's name is back on the container's tmpfs";
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(AskUnix(sock(after)), "deleted=kept-after-unlink events=made-before\n") << Diagnostics();
  EXPECT_EQ(removed(after), removed_before);
  { std::ofstream(bundle_ + "/rootfs/data/made-after"); }
  EXPECT_EQ(ask_until(after, "deleted=kept-after-unlink events=made-before,made-after\n"),
            "deleted=kept-after-unlink events=made-before,made-after\n")
      << "the restored inotify watch reports a file made after the restore";
  KillContainer("c1", after);
}

TEST_F(RuncContainers, ASocketNameARemovedFileAndAnInotifyWatchInsideComeBack) { FilesInsideComeBack(false); }

// The same in a user namespace of the container's own: its tmpfs takes only owners the namespace
// maps, so the restorer makes the socket file and the removed file as their saved owners.
TEST_F(RuncContainers, InAUserNamespaceTooASocketNameARemovedFileAndAnInotifyWatchComeBack) {
  FilesInsideComeBack(true);
}

// The container's own tmpfs (its /dev/shm) is saved whole: a file with two names comes back as
// one file with two names (a write through one is read through the other), and files,
// directories and symlinks keep their modification and access times to the nanosecond.
TEST_F(RuncContainers, TmpfsFilesKeepTheirNamesAndTimes) {
  MakeBundle();
  pid_t before = StartCounting("c1", 3);
  ASSERT_GT(before, 0);
  auto shm = [](pid_t pid) { return "/proc/" + std::to_string(pid) + "/root/dev/shm"; };
  std::string at = shm(before);
  { std::ofstream(at + "/a") << "first"; }
  ASSERT_EQ(::link((at + "/a").c_str(), (at + "/b").c_str()), 0);
  fs::create_directory(at + "/d");
  { std::ofstream(at + "/d/f") << "inner"; }
  ASSERT_EQ(::symlink("../a", (at + "/d/l").c_str()), 0);
  // Times no restore would give by chance: 2001-09-09 and 2009-02-13, odd nanoseconds.
  timespec file_times[2] = {{1000000000, 123456789}, {1234567890, 987654321}};
  timespec dir_times[2] = {{1000000001, 1}, {1234567891, 7}};
  for (const char* f : {"/a", "/d/f", "/d/l"}) {
    ASSERT_EQ(::utimensat(AT_FDCWD, (at + f).c_str(), file_times, AT_SYMLINK_NOFOLLOW), 0) << f;
  }
  ASSERT_EQ(::utimensat(AT_FDCWD, (at + "/d").c_str(), dir_times, 0), 0);
  auto times = [](const std::string& path) {
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0) return std::string("missing");
    return std::to_string(st.st_mtim.tv_sec) + "." + std::to_string(st.st_mtim.tv_nsec) + " " +
           std::to_string(st.st_atim.tv_sec) + "." + std::to_string(st.st_atim.tv_nsec);
  };

  pid_t after = CheckpointAndRestore("c1", before, "sh");
  ASSERT_GT(after, 0);
  at = shm(after);
  // (The times first: reading a file or a symlink sets its access time.)
  EXPECT_EQ(times(at + "/d/f"), "1234567890.987654321 1000000000.123456789");
  EXPECT_EQ(times(at + "/d/l"), "1234567890.987654321 1000000000.123456789");
  EXPECT_EQ(times(at + "/d"), "1234567891.7 1000000001.1");
  struct stat a {}, b {};
  ASSERT_EQ(::stat((at + "/a").c_str(), &a), 0);
  ASSERT_EQ(::stat((at + "/b").c_str(), &b), 0);
  EXPECT_EQ(a.st_ino, b.st_ino) << "a and b are one file again";
  EXPECT_EQ(a.st_nlink, 2u);
  { std::ofstream(at + "/b", std::ios::app) << "+second"; }
  EXPECT_EQ(ReadFile(at + "/a"), "first+second");
  EXPECT_EQ(ReadFile(at + "/d/f"), "inner");
  EXPECT_EQ(fs::read_symlink(at + "/d/l"), "../a");
  KillContainer("c1", after);
}

// A real program: redis-server (Debian's, with its libraries) in the container; its data set
// survives runc checkpoint and restore, read from inside the container's own network namespace.
TEST_F(RuncContainers, ARedisContainersDataSetSurvives) {
  constexpr char kRedisServer[] = "/usr/bin/redis-server";
  constexpr char kRedisCli[] = "/usr/bin/redis-cli";
  if (!fs::exists(kRedisServer) || !fs::exists(kRedisCli)) GTEST_SKIP() << "redis-server or redis-cli is not installed";
  MakeBundle("", {"/usr/bin/redis-server", "--save", "", "--appendonly", "no", "--port", "6379"});
  std::string rootfs = bundle_ + "/rootfs";
  fs::create_directories(rootfs + "/usr/bin");
  fs::copy_file(kRedisServer, rootfs + "/usr/bin/redis-server");
  // Its libraries, where the dynamic loader looks for them.
  CommandResult ldd = RunCommand({"/usr/bin/ldd", kRedisServer}, temp_->path());
  ASSERT_TRUE(ldd.Exited(0)) << ldd.Describe();
  std::istringstream lines(ldd.out);
  for (std::string line; std::getline(lines, line);) {
    size_t at = line.find('/');
    if (at == std::string::npos) continue;
    std::string lib = line.substr(at, line.find(' ', at) - at);
    fs::create_directories(rootfs + fs::path(lib).parent_path().string());
    fs::copy_file(fs::canonical(lib), rootfs + lib, fs::copy_options::overwrite_existing);
  }
  ASSERT_TRUE(Start("c1"));
  auto cli = [&](pid_t pid, std::vector<std::string> args) {
    std::vector<std::string> argv = {"/usr/bin/nsenter", "-n", "-t", std::to_string(pid), kRedisCli};
    argv.insert(argv.end(), args.begin(), args.end());
    CommandResult r = RunCommand(argv, temp_->path());
    return r.out.empty() ? r.out : r.out.substr(0, r.out.find('\n'));
  };
  pid_t before = InitPid("c1");
  ASSERT_GT(before, 0) << Diagnostics();
  for (int i = 0; i < 50 && cli(before, {"ping"}) != "PONG"; ++i) std::this_thread::sleep_for(100ms);
  ASSERT_EQ(cli(before, {"set", "greeting", "hello"}), "OK");
  ASSERT_EQ(cli(before, {"incrby", "counter", "41"}), "41");
  pid_t after = CheckpointAndRestore("c1", before, "redis-server");
  ASSERT_GT(after, 0);
  EXPECT_EQ(cli(after, {"get", "greeting"}), "hello");
  EXPECT_EQ(cli(after, {"incr", "counter"}), "42");
}

TEST_F(RuncContainers, TheRuntimesStdoutPipeIsHandedOverAtRestore) {
  MakeBundle();
  int first[2];
  ASSERT_EQ(::pipe2(first, O_CLOEXEC), 0);
  ASSERT_TRUE(Start("c2", first[1]));
  ::close(first[1]);
  std::vector<std::string> before = ReadLines(first[0], 5, 20s);
  ASSERT_EQ(before.size(), 5u) << Diagnostics();
  pid_t init = InitPid("c2");
  ASSERT_EQ(Checkpoint("c2"), 0) << Diagnostics();
  // What it wrote until the checkpoint, then the end of the old pipe.
  std::vector<std::string> rest = ReadLines(first[0], 10000, 5s);
  before.insert(before.end(), rest.begin(), rest.end());
  ::close(first[0]);
  EXPECT_TRUE(WaitGone(init, 10s).gone);

  int second[2];
  ASSERT_EQ(::pipe2(second, O_CLOEXEC), 0);
  ASSERT_GT(RestoreDetached("c2", {}, second[1]), 0) << Diagnostics();
  ::close(second[1]);
  Track(InitPid("c2"), "sh");
  std::vector<std::string> after = ReadLines(second[0], 5, 20s);
  ::close(second[0]);
  ASSERT_EQ(after.size(), 5u) << "the restored container writes into the pipe the runtime gave it" << Diagnostics();
  EXPECT_EQ(Counter(after[0]), Counter(before.back()) + 1) << "after " << before.back() << " came " << after[0];
}

// A terminal container (runc run --console-socket): its stdio and controlling terminal are
// /dev/pts/0 of its own devpts (and /dev/console is bound from it), the master the runtime's.
// After runc checkpoint and restore the same program runs on a new terminal numbered the same,
// with the settings and size it had set, whose master the runtime received again: what the
// program writes comes out of the new master, and what is typed into it reaches the program.
TEST_F(RuncContainers, ATerminalContainerGetsItsTerminalBackThroughTheConsoleSocket) {
  terminal_ = true;
  MakeBundle("", {"sh", "-c",
                  "stty cols 77 rows 33 -echo; i=0; while true; do i=$((i+1)); "
                  "echo \"$i $$ $(tty) $(stty size) $(stty -g)\" >> /data/log; echo \"tick $i\"; "
                  "if read -t 0.1 l; then echo \"typed $l\" >> /data/log; fi; done"});
  ConsoleSocket console(*temp_ / "console.sock");
  ASSERT_TRUE(console.ok());
  ASSERT_EQ(Runc({"run", "--detach", "--console-socket", *temp_ / "console.sock", "--bundle", bundle_, "c1"}), 0)
      << Diagnostics();
  UniqueFd first(console.Next(10s));
  ASSERT_TRUE(first.valid()) << "runc sent the terminal's master";
  ASSERT_TRUE(WaitLog(5)) << Diagnostics();
  pid_t before = InitPid("c1");
  // Its own view: line "N 1 /dev/pts/0 33 77 SETTINGS".
  auto view = [](const std::string& line) { return line.substr(line.find(' ')); };
  std::string seen = view(Log().back());
  EXPECT_EQ(seen.substr(0, 20), " 1 /dev/pts/0 33 77 ") << seen;
  ASSERT_EQ(Checkpoint("c1"), 0) << Diagnostics();
  EXPECT_TRUE(WaitGone(before, 10s).gone);
  std::vector<std::string> ticks = ReadLines(first.get(), 10000, 2s);  // until the old terminal hangs up
  ASSERT_FALSE(ticks.empty());
  long last_tick = std::strtol(ticks.back().c_str() + 5, nullptr, 10);
  ASSERT_GT(last_tick, 0) << ticks.back();
  size_t at_checkpoint = Log().size();

  // Without a runtime to take the new master, cairn refuses (nothing runs).
  CommandResult alone = Cairn({"restore", "--dir", *temp_ / "images/cairn", "--root", bundle_ + "/rootfs"});
  EXPECT_TRUE(alone.FailedCleanly()) << alone.Describe();
  EXPECT_NE(alone.err.find("/dev/pts/0"), std::string::npos) << alone.err;
  EXPECT_NE(alone.err.find("console"), std::string::npos) << alone.err;

  pid_t after = RestoreDetached("c1", {"--console-socket", *temp_ / "console.sock"});
  ASSERT_GT(after, 0) << Diagnostics();
  Track(after, "sh");
  UniqueFd second(console.Next(10s));
  ASSERT_TRUE(second.valid()) << "runc received the new master (orphan-pts-master) and sent it on";
  std::vector<std::string> next = ReadLines(second.get(), 3, 20s);
  ASSERT_EQ(next.size(), 3u) << Diagnostics();
  EXPECT_EQ(next[0], "tick " + std::to_string(last_tick + 1) + "\r") << "the program's output comes out of the new master";
  ASSERT_EQ(::write(second.get(), "hello\n", 6), 6);
  ASSERT_TRUE(WaitLog(at_checkpoint + 5)) << Diagnostics();
  bool typed = false;
  for (int i = 0; i < 100 && !typed; ++i) {
    for (const std::string& l : Log()) typed = typed || l == "typed hello";
    if (!typed) std::this_thread::sleep_for(50ms);
  }
  EXPECT_TRUE(typed) << "what is typed into the new master reaches the program";
  // The same terminal as it sees it: number, size and settings; still its controlling one.
  for (const std::string& l : Log()) {
    if (l.rfind("typed", 0) != 0) {
      EXPECT_EQ(view(l), seen) << l;
    }
  }
  std::string stat = ReadFile("/proc/" + std::to_string(after) + "/stat");
  std::istringstream fields(stat.substr(stat.rfind(')') + 2));
  std::vector<std::string> f;
  for (std::string x; fields >> x;) f.push_back(x);
  ASSERT_GT(f.size(), 5u);
  EXPECT_EQ(f[3], std::to_string(after)) << "it leads its session";
  EXPECT_EQ(f[4], std::to_string(136 << 8)) << "its controlling terminal is /dev/pts/0 (136:0)";
}

// runc checkpoint --pre-dump (twice, the second naming the first as its parent) while the
// container runs, then the checkpoint naming the last pre-dump: each pre-dump leaves the
// container running and tracks its writes, the checkpoint saves only what was written since,
// and runc restore from it brings the container back counting on.
TEST_F(RuncContainers, PreDumpsLeaveTheContainerRunningAndTheCheckpointBuildsOnThem) {
  MakeBundle();
  ASSERT_TRUE(Start("c1"));
  ASSERT_TRUE(WaitLog(3)) << Diagnostics();
  pid_t init = InitPid("c1");
  ASSERT_EQ(Checkpoint("c1", {"--pre-dump"}, "pre1"), 0) << Diagnostics();
  // A pre-dump holds memory only: it is no checkpoint to restore by itself.
  CommandResult alone = Cairn({"restore", "--dir", *temp_ / "pre1/cairn", "--root", bundle_ + "/rootfs"});
  EXPECT_TRUE(alone.FailedCleanly()) << alone.Describe();
  EXPECT_NE(alone.err.find("pre-dump"), std::string::npos) << alone.err;
  size_t n = Log().size();
  EXPECT_TRUE(WaitLog(n + 3)) << "the container runs on after a pre-dump";
  ASSERT_EQ(Checkpoint("c1", {"--pre-dump", "--parent-path", "../pre1"}, "pre2"), 0) << Diagnostics();
  n = Log().size();
  EXPECT_TRUE(WaitLog(n + 3)) << "and after the second";
  ASSERT_EQ(Checkpoint("c1", {"--parent-path", "../pre2"}), 0) << Diagnostics();
  EXPECT_TRUE(WaitGone(init, 10s).gone);
  std::vector<std::string> at_checkpoint = Log();
  ASSERT_TRUE(CountsOn(at_checkpoint));

  // A chain of three, each link built on the one before.
  CommandResult inspect = Inspect(*temp_ / "images/cairn");
  EXPECT_TRUE(inspect.Exited(0)) << inspect.Describe();
  for (const char* dir : {"images/cairn", "pre2/cairn", "pre1/cairn"}) {
    EXPECT_NE(inspect.out.find(fs::canonical(*temp_ / dir).string()), std::string::npos) << dir << ": " << inspect.out;
  }
  EXPECT_NE(inspect.out.find("incremental"), std::string::npos) << inspect.out;

  pid_t after = RestoreDetached("c1");
  ASSERT_GT(after, 0) << Diagnostics();
  Track(after, "sh");
  ASSERT_TRUE(WaitLog(at_checkpoint.size() + 5)) << Diagnostics();
  EXPECT_TRUE(CountsOn(Log())) << "the counter goes on from the checkpoint, not from a pre-dump";
}

// A network namespace of the test's own (`ip netns`), joined to the host by a veth pair:
// HOST_IP on the host's end, NS_IP on the namespace's.
class VethNamespace {
 public:
  VethNamespace() {
    int n = ::getpid() % 250 + 1;
    name_ = "cairn-t" + std::to_string(::getpid());
    host_ = "cth" + std::to_string(::getpid());
    host_ip_ = "10.231." + std::to_string(n) + ".1";
    ns_ip_ = "10.231." + std::to_string(n) + ".2";
    std::string peer = "ctc" + std::to_string(::getpid());
    ok_ = Ip({"netns", "add", name_}) && Ip({"link", "add", host_, "type", "veth", "peer", "name", peer}) &&
          Ip({"link", "set", peer, "netns", name_}) && Ip({"addr", "add", host_ip_ + "/24", "dev", host_}) &&
          Ip({"link", "set", host_, "up"}) &&
          Ip({"-n", name_, "addr", "add", ns_ip_ + "/24", "dev", peer}) && Ip({"-n", name_, "link", "set", peer, "up"}) &&
          Ip({"-n", name_, "link", "set", "lo", "up"});
  }
  ~VethNamespace() {
    Ip({"link", "del", host_});
    Ip({"netns", "del", name_});
  }
  bool ok() const { return ok_; }
  std::string path() const { return "/run/netns/" + name_; }
  const std::string& name() const { return name_; }
  const std::string& ns_ip() const { return ns_ip_; }

 private:
  static bool Ip(std::vector<std::string> args) {
    args.insert(args.begin(), "/usr/sbin/ip");
    return RunWithStdout(args, -1, "/dev/null") == 0;
  }
  std::string name_, host_, host_ip_, ns_ip_;
  bool ok_ = false;
};

// Connects to ADDR:PORT over TCP, trying for `timeout`; -1 if it never could.
int ConnectTcp(const std::string& addr, int port, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    ::inet_pton(AF_INET, addr.c_str(), &a.sin_addr);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) return fd;
    ::close(fd);
    std::this_thread::sleep_for(50ms);
  }
  return -1;
}

// Sends `line` on `fd` and reads what comes back until a newline (or `timeout`); "" on an error
// (a reset shows as one).
std::string EchoLine(int fd, const std::string& line, std::chrono::milliseconds timeout) {
  if (::send(fd, line.data(), line.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(line.size())) return "";
  std::vector<std::string> got = ReadLines(fd, 1, timeout);
  return got.empty() ? "" : got[0] + "\n";
}

// A container holding a live TCP connection with a client outside it, in a network namespace
// the runtime gives it (runc: a namespace path; the runtime hands it over at restore): runc
// checkpoint --tcp-established and runc restore --tcp-established, and the client's same
// connection goes on — what it sends is echoed back, no reset, no new handshake.
TEST_F(RuncContainers, AClientsConnectionToAContainerSurvivesCheckpointAndRestore) {
  if (!fs::exists("/usr/sbin/ip")) GTEST_SKIP() << "/usr/sbin/ip (iproute2) is not installed";
  VethNamespace ns;
  ASSERT_TRUE(ns.ok()) << "could not make a network namespace with a veth pair";
  netns_ = ns.path();
  MakeBundle("", {"nc", "-l", "-p", "7000", "-e", "/bin/cat"});
  ASSERT_TRUE(Start("c1"));
  int client = ConnectTcp(ns.ns_ip(), 7000, 10s);
  ASSERT_GE(client, 0) << "could not connect to the container's echo server" << Diagnostics();
  EXPECT_EQ(EchoLine(client, "one\n", 5s), "one\n");
  pid_t init = InitPid("c1");

  ASSERT_EQ(Checkpoint("c1", {"--tcp-established"}), 0) << Diagnostics();
  EXPECT_TRUE(WaitGone(init, 10s).gone);
  pid_t after = RestoreDetached("c1", {"--tcp-established"});
  ASSERT_GT(after, 0) << Diagnostics();
  Track(after, "cat");
  EXPECT_EQ(EchoLine(client, "two\n", 10s), "two\n") << "the same connection, echoed by the restored server"
                                                       << Diagnostics();
  ::close(client);
  // The dump's network lock and the restore's were in the container's namespace, and are gone.
  std::string tables = *temp_ / "tables.out";
  int out = ::open(tables.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  EXPECT_EQ(RunWithStdout({"/usr/sbin/ip", "netns", "exec", ns.name(), "/usr/sbin/nft", "list", "tables"}, out,
                          "/dev/null"),
            0);
  ::close(out);
  EXPECT_EQ(ReadFile(tables).find("cairn"), std::string::npos) << ReadFile(tables);
}

// A container checkpointed with its live connections and never restored here (moved to another
// node) leaves its dump's network lock in its network namespace, which its runtime keeps: `cairn
// check` finds it there, naming the namespace, and `cairn check --fix` removes it.
TEST_F(RuncContainers, ALockLeftInAContainersNetworkNamespaceIsFoundAndRemovedByCheckFix) {
  if (!fs::exists("/usr/sbin/ip")) GTEST_SKIP() << "/usr/sbin/ip (iproute2) is not installed";
  VethNamespace ns;
  ASSERT_TRUE(ns.ok()) << "could not make a network namespace with a veth pair";
  netns_ = ns.path();
  MakeBundle("", {"nc", "-l", "-p", "7000", "-e", "/bin/cat"});
  ASSERT_TRUE(Start("c1"));
  int client = ConnectTcp(ns.ns_ip(), 7000, 10s);
  ASSERT_GE(client, 0) << "could not connect to the container's echo server" << Diagnostics();
  EXPECT_EQ(EchoLine(client, "one\n", 5s), "one\n");
  ASSERT_EQ(Checkpoint("c1", {"--tcp-established"}), 0) << Diagnostics();
  auto tables = [&] {
    std::string out_path = *temp_ / "tables.out";
    int out = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    int rc = RunWithStdout({"/usr/sbin/ip", "netns", "exec", ns.name(), "/usr/sbin/nft", "list", "tables"}, out,
                           "/dev/null");
    ::close(out);
    if (rc != 0) ADD_FAILURE() << "nft list tables failed in " << ns.name();
    return ReadFile(out_path);
  };
  ASSERT_NE(tables().find("cairn_lock_"), std::string::npos) << "the dump left its lock for the restore";
  CommandResult check = Cairn({"check"});
  EXPECT_NE(check.out.find("in the named network namespace " + ns.path()), std::string::npos) << check.out;
  CommandResult fix = Cairn({"check", "--fix"});
  EXPECT_NE(fix.out.find("in the named network namespace " + ns.path() + " removed"), std::string::npos) << fix.out;
  EXPECT_EQ(tables().find("cairn_lock_"), std::string::npos) << tables();
  ::close(client);
}

// A container in a user namespace of its own whose network namespace its runtime made (and
// hands over again at restore, runc's extRootNetNS): the restored container is in that very
// namespace, joined before its user namespace was made (from inside it, joining one the host's
// user namespace owns is refused), and goes on counting as root inside.
TEST_F(RuncContainers, AUserNamespaceContainerJoinsTheNetworkNamespaceItsRuntimeHandsOver) {
  VethNamespace ns;
  if (!ns.ok()) GTEST_SKIP() << "cannot make a network namespace with a veth pair here (ip netns, ip link)";
  userns_ = true;
  netns_ = ns.path();
  MakeBundle();
  pid_t before = StartCounting("c1", 5);
  ASSERT_GT(before, 0);
  struct stat want {};
  ASSERT_EQ(::stat(ns.path().c_str(), &want), 0);
  auto net_of = [](pid_t pid) {
    struct stat st {};
    return ::stat(("/proc/" + std::to_string(pid) + "/ns/net").c_str(), &st) == 0 ? st.st_ino : 0;
  };
  ASSERT_EQ(net_of(before), want.st_ino);
  std::string uid_map = ReadFile("/proc/" + std::to_string(before) + "/uid_map");

  std::vector<std::string> at_checkpoint = Log();
  pid_t after = CheckpointAndRestore("c1", before, "sh");
  ASSERT_GT(after, 0);
  ASSERT_TRUE(WaitLog(at_checkpoint.size() + 5)) << Diagnostics();
  EXPECT_TRUE(CountsOn(Log()));
  EXPECT_EQ(net_of(after), want.st_ino) << "the restored container is in the namespace the runtime handed over";
  EXPECT_EQ(ReadFile("/proc/" + std::to_string(after) + "/uid_map"), uid_map);
  EXPECT_NE(fs::read_symlink("/proc/" + std::to_string(after) + "/ns/user"), fs::read_symlink("/proc/self/ns/user"));
  KillContainer("c1", after);
}

// The v1 freezer cgroup of `pid` (its directory), as runc made it.
std::string FreezerOf(pid_t pid) {
  for (const std::string& line : SplitLines(ReadFile("/proc/" + std::to_string(pid) + "/cgroup"))) {
    size_t at = line.find(":freezer:");
    if (at != std::string::npos) return "/sys/fs/cgroup/freezer" + line.substr(at + 9);
  }
  return "";
}
std::string FreezerState(const std::string& cgroup) {
  std::string s = ReadFile(cgroup + "/freezer.state");
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}
void RuncContainers::StartPaused(Paused* p) {
  MakeBundle();
  ASSERT_TRUE(Start("c1"));
  ASSERT_TRUE(WaitLog(3)) << Diagnostics();
  p->init = InitPid("c1");
  p->freezer = FreezerOf(p->init);
  ASSERT_FALSE(p->freezer.empty()) << "runc made no v1 freezer cgroup";
  ASSERT_EQ(Runc({"pause", "c1"}), 0) << Diagnostics();
  ASSERT_EQ(FreezerState(p->freezer), "FROZEN");
  p->logged = Log().size();
}

// The value of `field` ("TracerPid:") in /proc/PID/status, or -1.
long StatusField(pid_t pid, const std::string& field) {
  std::string status = ReadFile("/proc/" + std::to_string(pid) + "/status");
  size_t at = status.find("\n" + field);
  return at == std::string::npos ? -1 : std::strtol(status.c_str() + at + field.size() + 1, nullptr, 10);
}

// `runc restore` without --detach: runc stays, the restored init its child (runc is a child
// subreaper; cairn, which made the process, exits), and runc ends with the container, with its
// exit status.
TEST_F(RuncContainers, ARestoreNotDetachedLeavesRuncWaitingForTheContainer) {
  MakeBundle();
  ASSERT_TRUE(Start("c1"));
  ASSERT_TRUE(WaitLog(3)) << Diagnostics();
  pid_t before = InitPid("c1");
  ASSERT_EQ(Checkpoint("c1"), 0) << Diagnostics();
  EXPECT_TRUE(WaitGone(before, 10s).gone);
  size_t n = Log().size();
  pid_t runc = ::fork();
  if (runc == 0) {
    int null = ::open("/dev/null", O_RDWR);
    ::dup2(null, 0);
    ::dup2(null, 1);
    ::dup2(null, 2);
    std::vector<std::string> argv = RuncArgs({"restore", "--image-path", *temp_ / "images", "--work-path",
                                              *temp_ / "work", "--bundle", bundle_, "c1"});
    std::vector<char*> args;
    for (std::string& a : argv) args.push_back(a.data());
    args.push_back(nullptr);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  ASSERT_GT(runc, 0);
  EXPECT_TRUE(WaitLog(n + 5)) << Diagnostics();
  EXPECT_TRUE(CountsOn(Log()));
  pid_t after = InitPid("c1");
  ASSERT_GT(after, 0) << Diagnostics();
  Track(after, "sh");
  EXPECT_EQ(StatusField(after, "PPid:"), runc) << "the restored init is runc's child";
  EXPECT_EQ(Runc({"kill", "c1", "KILL"}), 0) << Diagnostics();
  int status = 0;
  auto deadline = std::chrono::steady_clock::now() + 10s;
  pid_t waited = 0;
  while ((waited = ::waitpid(runc, &status, WNOHANG)) == 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(20ms);
  }
  if (waited == 0) ::kill(runc, SIGKILL), ::waitpid(runc, &status, 0);
  EXPECT_EQ(waited, runc) << "runc did not end with its container";
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 128 + SIGKILL) << "runc's status " << status;
}

// A container joined to another's PID namespace (a pod's, whose first container reaps like
// Kubernetes' pause: tests/workloads/container/reaper.c), as runc does with a namespace path: runc
// names the namespace external, and at restore hands it over again; the restored container is
// in that very namespace, with the same pid there (not 1: the pod's reaper is), and counts on.
TEST_F(RuncContainers, AContainerInAPodsPidNamespaceComesBackInIt) {
  std::string reaper = std::string(WORKLOAD_DIR) + "/container/reaper";
  if (!fs::exists(reaper)) GTEST_SKIP() << reaper << " is not built";
  MakeBundle("", {"/bin/reaper"});
  fs::copy_file(reaper, bundle_ + "/rootfs/bin/reaper");
  ASSERT_TRUE(Start("c1"));
  pid_t pod = InitPid("c1");
  ASSERT_GT(pod, 0);
  bundle_ = *temp_ / "bundle2";
  pidns_ = "/proc/" + std::to_string(pod) + "/ns/pid";
  MakeBundle();
  pid_t before = StartCounting("c2", 3);
  ASSERT_GT(before, 0);
  auto ns_pid = [](pid_t pid) {
    for (const std::string& line : SplitLines(ReadFile("/proc/" + std::to_string(pid) + "/status"))) {
      if (line.rfind("NSpid:", 0) == 0) return line.substr(line.find_last_of(" \t") + 1);
    }
    return std::string();
  };
  auto pid_ns = [](pid_t pid) { return fs::read_symlink("/proc/" + std::to_string(pid) + "/ns/pid").string(); };
  std::string id_before = ns_pid(before);
  ASSERT_NE(id_before, "1") << "the pod's reaper is the namespace's init";
  ASSERT_EQ(pid_ns(before), pid_ns(pod));

  ASSERT_EQ(Checkpoint("c2"), 0) << Diagnostics();
  EXPECT_TRUE(WaitGone(before, 10s).gone);
  std::vector<std::string> at_checkpoint = Log();
  // (The log lines carry the shell's $$, its pid in the namespace: CountsOn expects 1.)
  pid_t after = RestoreDetached("c2");
  ASSERT_GT(after, 0) << Diagnostics();
  Track(after, "sh");
  ASSERT_TRUE(WaitLog(at_checkpoint.size() + 5)) << Diagnostics();
  std::vector<std::string> lines = Log();
  for (size_t i = 0; i < lines.size(); ++i) {
    EXPECT_EQ(Counter(lines[i]), static_cast<long>(i) + 1) << lines[i];
    EXPECT_NE(lines[i].find(" " + id_before + " cairn-box"), std::string::npos) << lines[i];
  }
  EXPECT_EQ(pid_ns(after), pid_ns(pod)) << "the restored container is in the pod's PID namespace";
  EXPECT_EQ(ns_pid(after), id_before);
  EXPECT_TRUE(IsAlive(pod)) << "the pod's reaper was not touched";
  KillContainer("c2", after);
}

// A container its runtime paused (containerd pauses a task to checkpoint it; here `runc
// pause`) is thawed for the dump. When cairn is killed in the middle of it, its guardian lets
// the processes go as they were and pauses the container again, as the runtime left it: after
// `runc resume` it counts on.
TEST_F(RuncContainers, ADumpKilledMidwayLeavesAPausedContainerPausedAndWhole) {
  Paused paused;
  StartPaused(&paused);
  if (HasFatalFailure()) return;
  const pid_t init = paused.init;
  const std::string& freezer = paused.freezer;
  const size_t n = paused.logged;

  // runc checkpoint --leave-running, its cairn made to wait at a fault point once the
  // container is stopped for the dump and its descriptors are taken.
  pid_t runc = ::fork();
  if (runc == 0) {
    ::setenv("CAIRN_FAULT_PAUSE", "fds", 1);
    std::vector<std::string> argv = RuncArgs({"checkpoint", "--leave-running", "--image-path", *temp_ / "images",
                                              "--work-path", *temp_ / "work", "c1"});
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    int null = ::open("/dev/null", O_RDWR);
    ::dup2(null, 0);
    ::dup2(null, 1);
    ::dup2(null, 2);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  ASSERT_GT(runc, 0);
  pid_t dumper = 0;
  for (int i = 0; i < 400 && dumper == 0; ++i) {
    std::this_thread::sleep_for(50ms);
    if (StatusField(init, "TracerPid:") <= 0) continue;
    pid_t tracer = static_cast<pid_t>(StatusField(init, "TracerPid:"));
    if (ReadFile(*temp_ / "work/dump.log").find("fault point fds") != std::string::npos ||
        ReadFile("/proc/" + std::to_string(tracer) + "/wchan") == "hrtimer_nanosleep") {
      dumper = tracer;
    }
  }
  ASSERT_GT(dumper, 0) << "the dump did not reach its fault point" << Diagnostics();
  EXPECT_EQ(FreezerState(freezer), "THAWED") << "the paused container is thawed for the dump";
  EXPECT_EQ(Log().size(), n) << "its threads were seized while it was paused: thawed, they stop before running";
  ASSERT_EQ(::kill(dumper, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(::waitpid(runc, &status, 0), runc);
  EXPECT_FALSE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "runc checkpoint cannot succeed";

  // The guardian: the processes let go, as they were, and the container paused again.
  bool put_back = false;
  for (int i = 0; i < 200 && !put_back; ++i) {
    put_back = StatusField(init, "TracerPid:") == 0 && FreezerState(freezer) == "FROZEN";
    if (!put_back) std::this_thread::sleep_for(50ms);
  }
  EXPECT_TRUE(put_back) << "tracer " << StatusField(init, "TracerPid:") << ", freezer " << FreezerState(freezer);
  EXPECT_FALSE(Exists(*temp_ / "images/cairn")) << "no checkpoint left that looks complete";
  std::this_thread::sleep_for(300ms);
  EXPECT_LE(Log().size(), n + 1) << "the paused container does not run";
  ASSERT_EQ(Runc({"resume", "c1"}), 0) << Diagnostics();
  EXPECT_TRUE(WaitLog(n + 5)) << "it runs on once its runtime resumes it";
  EXPECT_TRUE(CountsOn(Log()));
}

// A paused container checkpointed and left running is left paused, let go by the dump, and runs
// on only once its runtime resumes it. (That it is paused again before its processes are let go,
// dump.cc thaw_all, is too short a window for the program to show: not what this test sees.)
TEST_F(RuncContainers, APausedContainerCheckpointedLeftRunningStaysPaused) {
  Paused paused;
  StartPaused(&paused);
  if (HasFatalFailure()) return;
  const pid_t init = paused.init;
  const std::string& freezer = paused.freezer;
  const size_t n = paused.logged;
  ASSERT_EQ(Checkpoint("c1", {"--leave-running"}), 0) << Diagnostics();
  EXPECT_EQ(FreezerState(freezer), "FROZEN") << "the paused container was left thawed";
  EXPECT_EQ(StatusField(init, "TracerPid:"), 0);
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(Log().size(), n) << "the paused container ran during or after its checkpoint";
  ASSERT_EQ(Runc({"resume", "c1"}), 0) << Diagnostics();
  EXPECT_TRUE(WaitLog(n + 5)) << "it runs on once its runtime resumes it";
  EXPECT_TRUE(CountsOn(Log()));
}

TEST_F(RuncContainers, AnOptionCairnCannotHonourIsRefusedAndTheContainerRunsOn) {
  MakeBundle();
  ASSERT_TRUE(Start("c1"));
  ASSERT_TRUE(WaitLog(3));
  pid_t init = InitPid("c1");
  EXPECT_NE(Checkpoint("c1", {"--manage-cgroups-mode", "full"}), 0);
  std::string log = ReadFile(*temp_ / "work/dump.log");
  EXPECT_NE(log.find("manage_cgroups_mode"), std::string::npos) << "the log names the option: " << log;
  EXPECT_FALSE(Exists(*temp_ / "images/cairn")) << "no checkpoint left behind";
  EXPECT_TRUE(IsAlive(init));
  size_t n = Log().size();
  EXPECT_TRUE(WaitLog(n + 5)) << "the container runs on";
  EXPECT_TRUE(CountsOn(Log()));
}

TEST_F(RuncContainers, AContainerHoldingWhatCairnCannotMountAgainRunsOnUntouched) {
  // A ramfs: neither saved nor named external by the runtime.
  MakeBundle(R"({"destination": "/tmp", "type": "ramfs", "source": "ramfs", "options": []})");
  ASSERT_TRUE(Start("c1"));
  ASSERT_TRUE(WaitLog(3)) << Diagnostics();
  pid_t init = InitPid("c1");
  EXPECT_NE(Checkpoint("c1"), 0);
  std::string log = ReadFile(*temp_ / "work/dump.log");
  EXPECT_NE(log.find("ramfs"), std::string::npos) << "the log names what could not be saved: " << log;
  EXPECT_FALSE(Exists(*temp_ / "images/cairn"));
  EXPECT_TRUE(IsAlive(init));
  size_t n = Log().size();
  EXPECT_TRUE(WaitLog(n + 5)) << "the container runs on";
  EXPECT_TRUE(CountsOn(Log()));
}

// A container whose init was moved below the root of its cgroup namespace (here, by hand, into a
// child of its pids cgroup) would stand at the root of a namespace made again where the runtime
// places it: the dump says so and the container runs on.
TEST_F(RuncContainers, AContainerMovedBelowItsCgroupNamespacesRootRunsOnUntouched) {
  cgroupns_ = true;
  MakeBundle();
  ASSERT_TRUE(Start("c1"));
  ASSERT_TRUE(WaitLog(3)) << Diagnostics();
  pid_t init = InitPid("c1");
  std::string pids;
  for (const std::string& line : SplitLines(ReadFile("/proc/" + std::to_string(init) + "/cgroup"))) {
    if (line.find(":pids:") != std::string::npos) pids = "/sys/fs/cgroup/pids" + line.substr(line.find(":pids:") + 6);
  }
  if (pids.empty() || !fs::exists(pids)) GTEST_SKIP() << "runc made no v1 pids cgroup here";
  fs::create_directory(pids + "/moved");
  { std::ofstream(pids + "/moved/cgroup.procs") << init; }
  ASSERT_NE(ReadFile("/proc/" + std::to_string(init) + "/cgroup").find("/moved"), std::string::npos);
  EXPECT_NE(Checkpoint("c1"), 0);
  std::string log = ReadFile(*temp_ / "work/dump.log");
  EXPECT_NE(log.find("below the root of its cgroup namespace"), std::string::npos) << log;
  EXPECT_FALSE(Exists(*temp_ / "images/cairn"));
  EXPECT_TRUE(IsAlive(init));
  size_t n = Log().size();
  EXPECT_TRUE(WaitLog(n + 5)) << "the container runs on";
  { std::ofstream(pids + "/cgroup.procs") << init; }
  ::rmdir((pids + "/moved").c_str());
}

// The protocol itself, without a runtime: a garbled message gets an error answer and the
// service goes on to answer the next request.
TEST_F(CairnTest, CriuCompatAnswersAGarbledMessageWithAnErrorAndServesOn) {
  int sk[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sk), 0);
  pid_t pid = ::fork();
  if (pid == 0) {
    // Only the service's end, as fd 3 (our end stays here: it must see us hang up).
    if (sk[1] == 3) {
      ::fcntl(3, F_SETFD, 0);
    } else {
      ::dup2(sk[1], 3);
    }
    ::closefrom(4);
    ::execl(CairnBinary().c_str(), "cairn", "criu-compat", "swrk", "3", nullptr);
    ::_exit(127);
  }
  ::close(sk[1]);
  auto exchange = [&](const std::string& out) {
    EXPECT_EQ(::send(sk[0], out.data(), out.size(), 0), static_cast<ssize_t>(out.size()));
    std::string in(65536, '\0');
    pollfd p{sk[0], POLLIN, 0};
    if (::poll(&p, 1, 10000) != 1) return std::string();
    ssize_t n = ::recv(sk[0], in.data(), in.size(), 0);
    in.resize(n > 0 ? static_cast<size_t>(n) : 0);
    return in;
  };
  criu_rpc::Response garbled;
  ASSERT_TRUE(garbled.ParseFromString(exchange(std::string("\xff\xff\xff\x01garbage", 11))));
  EXPECT_FALSE(garbled.success());
  EXPECT_FALSE(garbled.cr_errmsg().empty());

  criu_rpc::Request version;
  version.set_type(criu_rpc::VERSION);
  criu_rpc::Response v;
  ASSERT_TRUE(v.ParseFromString(exchange(version.SerializeAsString())));
  EXPECT_TRUE(v.success());
  EXPECT_GE(v.version().major() * 10000 + v.version().minor() * 100, 31600) << "runtimes' minimums";

  // An option field this protocol does not have: refused by number, not ignored.
  int images = ::open(temp_->path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  ASSERT_GE(images, 0);
  criu_rpc::Request dump;
  dump.set_type(criu_rpc::DUMP);
  dump.mutable_opts()->set_images_dir_fd(images);
  dump.mutable_opts()->set_pid(1);
  dump.mutable_opts()->GetReflection()->MutableUnknownFields(dump.mutable_opts())->AddVarint(200, 1);
  criu_rpc::Response refused;
  ASSERT_TRUE(refused.ParseFromString(exchange(dump.SerializeAsString())));
  EXPECT_FALSE(refused.success());
  EXPECT_NE(refused.cr_errmsg().find("200"), std::string::npos) << refused.cr_errmsg();

  ::close(images);
  ::close(sk[0]);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status)) << "no crash";
}

// `cairn install --criu-shim`: a link `criu` to cairn where the runtimes look, never taking the
// place of another criu unless told to.
TEST_F(CairnTest, InstallCriuShimLinksCriuAndLeavesAnotherAloneUnlessTold) {
  std::string early = *temp_ / "early", dir = *temp_ / "sbin", late = *temp_ / "late";
  for (const std::string& d : {early, dir, late}) fs::create_directories(d);
  std::string path = "PATH=" + dir + ":" + late + ":/usr/bin:/bin";
  CommandResult ok = Cairn({"install", "--criu-shim", "--dir", dir}, WithEnv({path}));
  ASSERT_TRUE(ok.Exited(0)) << ok.Describe();
  EXPECT_TRUE(fs::equivalent(dir + "/criu", CairnBinary()));
  CommandResult again = Cairn({"install", "--criu-shim", "--dir", dir}, WithEnv({path}));
  EXPECT_TRUE(again.Exited(0)) << "installing over its own link is fine: " << again.Describe();

  // Another criu later on PATH would be shadowed: refused without --replace, left in place with it.
  WriteFile(late + "/criu", "#!/bin/sh\necho other\n");
  fs::permissions(late + "/criu", fs::perms::owner_all);
  fs::remove(dir + "/criu");
  CommandResult shadow = Cairn({"install", "--criu-shim", "--dir", dir}, WithEnv({path}));
  EXPECT_TRUE(shadow.FailedCleanly()) << shadow.Describe();
  EXPECT_NE(shadow.err.find("--replace"), std::string::npos) << shadow.err;
  EXPECT_FALSE(fs::exists(dir + "/criu")) << "nothing changed";
  CommandResult replace = Cairn({"install", "--criu-shim", "--dir", dir, "--replace"}, WithEnv({path}));
  EXPECT_TRUE(replace.Exited(0)) << replace.Describe();
  EXPECT_TRUE(fs::exists(late + "/criu")) << "the other stays where it is";

  // One earlier on PATH would still win: refused even with --replace.
  WriteFile(early + "/criu", "#!/bin/sh\necho other\n");
  fs::permissions(early + "/criu", fs::perms::owner_all);
  CommandResult first = Cairn({"install", "--criu-shim", "--dir", dir, "--replace"},
                              WithEnv({"PATH=" + early + ":" + dir + ":/usr/bin:/bin"}));
  EXPECT_TRUE(first.FailedCleanly()) << first.Describe();
  EXPECT_NE(first.err.find(early), std::string::npos) << first.err;
}

}  // namespace
}  // namespace cairn::testing
