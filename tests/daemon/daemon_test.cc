// cairnd end to end: real daemons (two, with distinct node names and state directories) on unix
// sockets and loopback TCP in temporary directories, driven by the real `cairn` CLI.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <iterator>
#include <sstream>
#include <map>
#include <thread>

#include "common/unique_fd.h"
#include "daemon_harness.h"

namespace cairn::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

class DaemonTest : public DaemonFixture {
 protected:
};

TEST_F(DaemonTest, TwoDaemonsRunListShowLogsKillDelete) {
  DaemonProcess a(Dir(), "node-a"), b(Dir(), "node-b");
  ASSERT_TRUE(a.Start());
  ASSERT_TRUE(b.Start());
  // The unix socket is root-only.
  struct stat st;
  ASSERT_EQ(::stat(a.socket().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);

  CommandResult run = a.Cairn({"job", "run", "--name", "echo3", "--", "/bin/sh", "-c", "echo hello; echo oops >&2; exit 3"});
  ASSERT_TRUE(run.Exited(0)) << run.Describe();
  EXPECT_TRUE(Matches(run.out, "job echo3 pid [0-9]+ on node-a")) << run.out;
  ASSERT_TRUE(WaitState(a, "echo3", "exited"));
  json j = Job(a, "echo3");
  EXPECT_EQ(j["health"]["exit_code"], 3) << j.dump();
  EXPECT_EQ(j["health"]["exit_known"], true) << j.dump();
  EXPECT_EQ(j["node"], a.node());
  EXPECT_EQ(a.Cairn({"job", "logs", "echo3"}).out, "hello\n");
  EXPECT_EQ(a.Cairn({"job", "logs", "echo3", "--stderr"}).out, "oops\n");

  // Each daemon has its own jobs.
  ASSERT_TRUE(b.Cairn({"job", "run", "--name", "sleeper", "--", "/bin/sleep", "300"}).Exited(0));
  json la = a.Json({"job", "list"}), lb = b.Json({"job", "list"});
  ASSERT_EQ(la["jobs"].size(), 1u) << la.dump();
  ASSERT_EQ(lb["jobs"].size(), 1u) << lb.dump();
  EXPECT_EQ(la["jobs"][0]["name"], "echo3");
  EXPECT_EQ(lb["jobs"][0]["name"], "sleeper");
  int sleeper = lb["jobs"][0]["host_pid"];
  EXPECT_TRUE(IsAlive(sleeper));
  CommandResult text_list = b.Cairn({"job", "list"});
  EXPECT_TRUE(Matches(text_list.out, "sleeper +running")) << text_list.out;
  CommandResult show = b.Cairn({"job", "show", "sleeper"});
  EXPECT_TRUE(Matches(show.out, "health +running")) << show.out;

  // Refusals: unknown job, same name twice, deleting a running job, restoring without a checkpoint.
  CommandResult unknown = a.Cairn({"job", "show", "nope"});
  EXPECT_TRUE(unknown.FailedCleanly()) << unknown.Describe();
  EXPECT_TRUE(Matches(unknown.err, "no job 'nope' on node node-a")) << unknown.err;
  CommandResult twice = b.Cairn({"job", "run", "--name", "sleeper", "--", "/bin/true"});
  EXPECT_TRUE(twice.FailedCleanly());
  EXPECT_TRUE(Matches(twice.err, "already exists")) << twice.err;
  CommandResult del_running = b.Cairn({"job", "delete", "sleeper"});
  EXPECT_TRUE(del_running.FailedCleanly());
  EXPECT_TRUE(Matches(del_running.err, "still runs")) << del_running.err;
  CommandResult no_ckpt = a.Cairn({"job", "restore", "echo3"});
  EXPECT_TRUE(no_ckpt.FailedCleanly());
  EXPECT_TRUE(Matches(no_ckpt.err, "no complete checkpoint")) << no_ckpt.err;
  CommandResult no_cmd = a.Cairn({"job", "run", "--name", "x"});
  EXPECT_TRUE(no_cmd.FailedCleanly()) << no_cmd.Describe();
  CommandResult bad_name = a.Cairn({"job", "run", "--name", "../x", "--", "/bin/true"});
  EXPECT_TRUE(bad_name.FailedCleanly());
  EXPECT_TRUE(Matches(bad_name.err, "invalid job name")) << bad_name.err;

  // kill: SIGKILL waits until the job is gone.
  CommandResult kill = b.Cairn({"job", "kill", "sleeper"});
  ASSERT_TRUE(kill.Exited(0)) << kill.Describe();
  EXPECT_TRUE(Matches(kill.out, "sleeper: killed")) << kill.out;
  EXPECT_TRUE(WaitGone(sleeper, 5s).gone);
  EXPECT_EQ(Job(b, "sleeper")["health"]["signal"], 9);

  ASSERT_TRUE(b.Cairn({"job", "delete", "sleeper"}).Exited(0));
  EXPECT_EQ(b.Json({"job", "list"})["jobs"].size(), 0u);
  EXPECT_FALSE(Exists(b.state_dir() + "/jobs/sleeper"));
  ASSERT_TRUE(a.Cairn({"job", "delete", "echo3"}).Exited(0));

  // Events were recorded, in order.
  CommandResult watch = a.Cairn({"job", "watch", "--after", "0", "--count", "3", "--timeout", "10"});
  ASSERT_TRUE(watch.Exited(0)) << watch.Describe();
  EXPECT_TRUE(Matches(watch.out, "echo3 +started")) << watch.out;
  EXPECT_TRUE(Matches(watch.out, "echo3 +exited +exited with code 3")) << watch.out;
}

TEST_F(DaemonTest, Python3CheckpointedAndRestoredFinishesWithTheSameResult) {
  std::string expected = Expected();
  ASSERT_FALSE(expected.empty());
  DaemonProcess a(Dir(), "node-a");
  ASSERT_TRUE(a.Start());
  std::string out = Dir() + "/py";
  std::vector<std::string> run = {"job", "run", "--name", "py", "--"};
  for (auto& arg : PythonJob(out)) run.push_back(arg);
  ASSERT_TRUE(a.Cairn(run).Exited(0));
  std::this_thread::sleep_for(1s);  // mid-computation
  int pid = Job(a, "py")["host_pid"];

  // A checkpoint that leaves the job running, then one with pre-copy that stops it (the restore
  // below is from that one).
  json c1 = a.Json({"job", "checkpoint", "py", "--pin"})["checkpoint"];
  EXPECT_EQ(c1["state"], "complete") << c1.dump();
  EXPECT_TRUE(IsAlive(pid));
  json c2 = a.Json({"job", "checkpoint", "py", "--kill", "--pre-copy"})["checkpoint"];
  ASSERT_EQ(c2["state"], "complete") << c2.dump() << "\n" << Job(a, "py").dump() << "\n" << a.Log();
  EXPECT_GT(JsonInt(c2["size_bytes"]), 1 << 20);
  EXPECT_TRUE(Matches(c2["checksum"].get<std::string>(), "^xxh3:[0-9a-f]{16}$")) << c2.dump();
  EXPECT_TRUE(fs::exists(c2["location"].get<std::string>() + "/checkpoint.meta"));
  ASSERT_TRUE(WaitGone(pid, 10s).gone);
  ASSERT_TRUE(WaitState(a, "py", "killed"));
  ASSERT_FALSE(Exists(out + "/result"));

  // The catalog lists both; show and the text list agree.
  json list = a.Json({"checkpoint", "list", "--job", "py"});
  ASSERT_EQ(list["checkpoints"].size(), 2u) << list.dump();
  EXPECT_EQ(list["checkpoints"][0]["pinned"], true);
  json shown = a.Json({"checkpoint", "show", c2["id"]})["checkpoint"];
  EXPECT_EQ(shown["checksum"], c2["checksum"]);
  CommandResult text = a.Cairn({"checkpoint", "show", c2["id"]});
  EXPECT_TRUE(Matches(text.out, "complete")) << text.out;

  // Restored from the newest checkpoint, it finishes with the uninterrupted run's result.
  CommandResult restore = a.Cairn({"job", "restore", "py"});
  ASSERT_TRUE(restore.Exited(0)) << restore.Describe() << a.Log();
  Release(out);
  ASSERT_TRUE(WaitState(a, "py", "exited", 120s));
  json j = Job(a, "py");
  EXPECT_EQ(j["health"]["exit_code"], 0) << j.dump();
  EXPECT_EQ(j["restores"], 1);
  EXPECT_EQ(ReadFile(out + "/result"), expected);
  EXPECT_EQ(a.Cairn({"job", "logs", "py"}).out, "done\n");

  // A checkpoint can be deleted; the job then goes with its last one.
  ASSERT_TRUE(a.Cairn({"checkpoint", "delete", c1["id"]}).Exited(0));
  EXPECT_FALSE(fs::exists(c1["location"].get<std::string>()));
  EXPECT_EQ(a.Json({"checkpoint", "list"})["checkpoints"].size(), 1u);
  ASSERT_TRUE(a.Cairn({"job", "delete", "py"}).Exited(0));
  EXPECT_FALSE(fs::exists(c2["location"].get<std::string>()));
  EXPECT_EQ(a.Json({"checkpoint", "list"})["checkpoints"].size(), 0u);
}

// A job `name` of `d` serving one client on 127.0.0.1:`port`: a python3 server uppercasing
// what it reads; its checkpoints treat TCP as `tcp` says.
CommandResult StartEchoServer(const DaemonProcess& d, const std::string& name, int port, const std::string& tcp) {
  return d.Cairn({"job", "run", "--name", name, "--tcp", tcp, "--", "python3", "-c",
                  UppercaseEchoServerPy("127.0.0.1", port, /*reuseaddr=*/true)});
}

// A connection to 127.0.0.1:`port`, tried for 10 s; -1 if none.
int ConnectLoopback(int port) {
  for (int i = 0; i < 200; ++i) {
    int s = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<uint16_t>(port));
    if (::connect(s, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) return s;
    ::close(s);
    std::this_thread::sleep_for(50ms);
  }
  return -1;
}

// Sends `line` (unless empty) on `s` and reads what comes back within 20 s.
std::string Ask(int s, const std::string& line) {
  if (!line.empty() && ::send(s, line.data(), line.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(line.size())) {
    return "ERROR: send: " + std::string(strerror(errno));
  }
  timeval tv{20, 0};
  ::setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  char buf[100];
  ssize_t n = ::recv(s, buf, sizeof buf, 0);
  if (n == 0) return "ERROR: end-of-file";
  if (n < 0) return "ERROR: recv: " + std::string(strerror(errno));
  return std::string(buf, static_cast<size_t>(n));
}

// A job that serves one client over TCP: a python3 server uppercasing what it reads. Its client
// is this test, outside the job. The job's checkpoints save the connection whole (the daemon's
// default, `--tcp established`): a checkpoint that leaves it running, and one that stops it,
// after which the client's connection stays open and a line sent while the job was gone is
// answered once it is restored. With `--tcp refuse` a checkpoint of it fails, naming the
// connection, and the job serves on.
TEST_F(DaemonTest, ServerJobKeepsItsClientAcrossCheckpointAndRestore) {
  DaemonProcess a(Dir(), "node-a");
  ASSERT_TRUE(a.Start());
  int port = FreeTcpPort();
  CommandResult run = StartEchoServer(a, "srv", port, "established");
  ASSERT_TRUE(run.Exited(0)) << run.Describe();
  int c = ConnectLoopback(port);
  ASSERT_GE(c, 0) << a.Log();
  ASSERT_EQ(Ask(c, "hi"), "HI");
  json kept = a.Json({"job", "checkpoint", "srv"})["checkpoint"];
  EXPECT_EQ(kept["state"], "complete") << kept.dump() << a.Log();
  EXPECT_EQ(Ask(c, "on"), "ON") << "after a checkpoint that left the job running";
  json stopped = a.Json({"job", "checkpoint", "srv", "--kill"})["checkpoint"];
  ASSERT_EQ(stopped["state"], "complete") << stopped.dump() << a.Log();
  ASSERT_TRUE(WaitState(a, "srv", "killed"));
  pollfd p{c, POLLIN | POLLRDHUP, 0};
  EXPECT_EQ(::poll(&p, 1, 300), 0) << "the client saw its connection reset or closed";
  ASSERT_EQ(::send(c, "gone", 4, MSG_NOSIGNAL), 4);
  CommandResult restore = a.Cairn({"job", "restore", "srv"});
  ASSERT_TRUE(restore.Exited(0)) << restore.Describe() << a.Log();
  EXPECT_EQ(Ask(c, ""), "GONE") << "the line sent while the job was stopped";
  EXPECT_EQ(Ask(c, "back"), "BACK");
  ::close(c);

  int port2 = FreeTcpPort();
  ASSERT_TRUE(StartEchoServer(a, "strict", port2, "refuse").Exited(0));
  int c2 = ConnectLoopback(port2);
  ASSERT_GE(c2, 0);
  ASSERT_EQ(Ask(c2, "x"), "X");
  CommandResult refused = a.Cairn({"job", "checkpoint", "strict"});
  EXPECT_FALSE(refused.Exited(0)) << refused.Describe();
  EXPECT_TRUE(Matches(refused.out + refused.err, "established TCP connection 127\\.0\\.0\\.1:[0-9]+")) << refused.Describe();
  EXPECT_EQ(Ask(c2, "y"), "Y") << "the job after its refused checkpoint";
  ::close(c2);
}

// A job stopped by its checkpoint (`--kill`) with a client connected: the connection's network
// lock waits for the restore, and cairnd claims it, so `cairn check --fix` (which removes the
// locks killed cairns left) leaves it — also after cairnd restarts. The restore lifts it and the
// client is answered. Stopped again and cancelled, the job's lock goes with its checkpoints.
TEST_F(DaemonTest, ALockAJobWaitsOnIsLeftByCheckFixAcrossADaemonRestart) {
  DaemonProcess a(Dir(), "node-a");
  ASSERT_TRUE(a.Start());
  int port = FreeTcpPort();
  ASSERT_TRUE(StartEchoServer(a, "srv", port, "established").Exited(0));
  int c = ConnectLoopback(port);
  ASSERT_GE(c, 0) << a.Log();
  ASSERT_EQ(Ask(c, "hi"), "HI");
  json stopped = a.Json({"job", "checkpoint", "srv", "--kill"})["checkpoint"];
  ASSERT_EQ(stopped["state"], "complete") << stopped.dump() << a.Log();
  ASSERT_TRUE(WaitState(a, "srv", "killed"));
  std::string table = Job(a, "srv").value("network_lock_kept", "");
  ASSERT_NE(table, "") << "the job's record does not name the lock it keeps: " << Job(a, "srv").dump();
  auto lock_there = [&] { return RunCommand({"/usr/sbin/nft", "list", "table", "inet", table}, Dir()).Exited(0); };
  ASSERT_TRUE(lock_there());
  auto fix_leaves_it = [&](const DaemonProcess& d) {
    CommandResult fix = RunCommand({CairnBinary(), "check", "--fix"}, Dir());
    EXPECT_TRUE(Matches(fix.out, "network lock " + table + " in the host's network namespace: in use by pid " +
                                     std::to_string(d.pid()) + " \\(cairnd\\)"))
        << fix.Describe();
    EXPECT_TRUE(lock_there()) << "check --fix removed the lock the job waits on\n" << fix.Describe();
  };
  fix_leaves_it(a);
  ASSERT_EQ(::send(c, "gone", 4, MSG_NOSIGNAL), 4);
  a.Kill(SIGKILL);
  a.Wait();
  DaemonProcess again(Dir(), "node-a");
  ASSERT_TRUE(again.Start());
  fix_leaves_it(again);
  CommandResult restore = again.Cairn({"job", "restore", "srv"});
  ASSERT_TRUE(restore.Exited(0)) << restore.Describe() << again.Log();
  EXPECT_EQ(Ask(c, ""), "GONE") << "the line sent while the job was stopped";
  EXPECT_EQ(Ask(c, "back"), "BACK");
  EXPECT_FALSE(lock_there()) << "the restore left the lock";
  EXPECT_EQ(Job(again, "srv").value("network_lock_kept", ""), "") << Job(again, "srv").dump();

  // Stopped again, then cancelled: its checkpoints go, and with them the lock (no restore will
  // come): the client's next line meets no lock and no socket, and its connection is reset.
  stopped = again.Json({"job", "checkpoint", "srv", "--kill"})["checkpoint"];
  ASSERT_EQ(stopped["state"], "complete") << stopped.dump() << again.Log();
  ASSERT_TRUE(WaitState(again, "srv", "killed"));
  table = Job(again, "srv").value("network_lock_kept", "");
  ASSERT_NE(table, "");
  ASSERT_TRUE(lock_there());
  CommandResult cancel = again.Cairn({"job", "kill", "srv", "--cancel"});
  ASSERT_TRUE(cancel.Exited(0)) << cancel.Describe() << again.Log();
  EXPECT_FALSE(lock_there()) << "a cancelled job's lock stays";
  EXPECT_EQ(Job(again, "srv").value("network_lock_kept", ""), "") << Job(again, "srv").dump();
  EXPECT_EQ(Ask(c, "after").rfind("ERROR: recv", 0), 0u) << "the connection of a cancelled job was not reset";
  ::close(c);
}

// `job run --user nobody`: nothing of the job runs as root; checkpointed and restored, it comes
// back as nobody (the daemon restores a job only with its owner's credentials) and finishes
// right. An unknown user is refused before anything starts.
TEST_F(DaemonTest, JobOfAUserRunsAndComesBackAsThatUser) {
  std::string expected = Expected();
  ASSERT_FALSE(expected.empty());
  ASSERT_EQ(::chmod(Dir().c_str(), 0755), 0);
  DaemonProcess a(Dir(), "node-a");
  ASSERT_TRUE(a.Start());
  CommandResult unknown = a.Cairn({"job", "run", "--name", "x", "--user", "no-such-user-here", "--", "/bin/true"});
  EXPECT_TRUE(unknown.FailedCleanly()) << unknown.Describe();
  EXPECT_TRUE(Matches(unknown.err, "user \\(--user\\).*no-such-user-here")) << unknown.err;
  std::string out = Dir() + "/py";
  std::vector<std::string> run = {"job", "run", "--name", "py", "--user", "nobody", "--"};
  for (auto& arg : PythonJob(out)) run.push_back(arg);
  ASSERT_EQ(::chmod(out.c_str(), 0777), 0);
  ASSERT_TRUE(a.Cairn(run).Exited(0)) << a.Log();
  auto uids = [](int pid) { return LineStartingWith(ReadFile("/proc/" + std::to_string(pid) + "/status"), "Uid:"); };
  const std::string nobody = "Uid:\t65534\t65534\t65534\t65534";
  int pid = Job(a, "py")["host_pid"];
  EXPECT_EQ(uids(pid), nobody);
  std::this_thread::sleep_for(1s);
  json c = a.Json({"job", "checkpoint", "py", "--kill"})["checkpoint"];
  ASSERT_EQ(c["state"], "complete") << c.dump() << a.RunLog();
  ASSERT_TRUE(WaitGone(pid, 10s).gone);
  CommandResult restore = a.Cairn({"job", "restore", "py"});
  ASSERT_TRUE(restore.Exited(0)) << restore.Describe() << a.RunLog();
  int again = Job(a, "py")["host_pid"];
  EXPECT_EQ(uids(again), nobody);
  Release(out);
  ASSERT_TRUE(WaitState(a, "py", "exited", 120s));
  EXPECT_EQ(ReadFile(out + "/result"), expected);
}

TEST_F(DaemonTest, SigkillInTheMiddleOfACheckpointThenRestart) {
  std::string expected = Expected();
  DaemonProcess a(Dir(), "node-a", {}, {"CAIRND_TEST_PAUSE_IN_CHECKPOINT=4"});
  ASSERT_TRUE(a.Start());
  std::string out = Dir() + "/py";
  std::vector<std::string> run = {"job", "run", "--name", "py", "--"};
  for (auto& arg : PythonJob(out)) run.push_back(arg);
  ASSERT_TRUE(a.Cairn(run).Exited(0));
  std::this_thread::sleep_for(500ms);
  int pid = Job(a, "py")["host_pid"];
  std::string ckpt_dir = a.state_dir() + "/checkpoints/py";

  // The checkpoint stops inside its memory copy (the test hook); the daemon dies there.
  std::thread checkpoint([&] { a.Cairn({"job", "checkpoint", "py"}, 30s); });
  bool writing = WaitFor(
      [&] {
        std::error_code ec;
        for (auto& e : fs::directory_iterator(ckpt_dir, ec)) {
          if (e.path().string().ends_with(".partial")) return true;
        }
        return false;
      },
      20s);
  if (writing) {
    json l = a.Json({"checkpoint", "list"});
    ASSERT_EQ(l["checkpoints"].size(), 1u);
    EXPECT_EQ(l["checkpoints"][0]["state"], "writing");
  }
  a.Kill(SIGKILL);
  a.Wait();
  checkpoint.join();
  ASSERT_TRUE(writing) << "the checkpoint never started writing: " << a.Log();

  // Restarted: the half checkpoint is gone from disk and marked failed; the job was adopted.
  DaemonProcess again(Dir(), "node-a");
  ASSERT_TRUE(again.Start());
  json l = again.Json({"checkpoint", "list"});
  ASSERT_EQ(l["checkpoints"].size(), 1u) << l.dump();
  EXPECT_EQ(l["checkpoints"][0]["state"], "failed");
  EXPECT_TRUE(Matches(l["checkpoints"][0]["error"].get<std::string>(), "interrupted"));
  EXPECT_FALSE(fs::exists(l["checkpoints"][0]["location"].get<std::string>()));
  EXPECT_TRUE(fs::is_empty(ckpt_dir)) << "left in " << ckpt_dir;
  json j = Job(again, "py");
  EXPECT_EQ(j["state"], "running") << j.dump();
  EXPECT_EQ(j["host_pid"], pid);
  CommandResult events = again.Cairn({"job", "watch", "py", "--after", "0", "--count", "4", "--timeout", "10"});
  EXPECT_TRUE(Matches(events.out, "checkpoint-cleaned")) << events.out;
  EXPECT_TRUE(Matches(events.out, "adopted")) << events.out;

  // The adopted job carries on and checkpoints again; it finishes with the same result.
  json c = again.Json({"job", "checkpoint", "py"})["checkpoint"];
  EXPECT_EQ(c["state"], "complete");
  Release(out);
  ASSERT_TRUE(WaitState(again, "py", "exited", 120s));
  EXPECT_EQ(ReadFile(out + "/result"), expected);
}

// The nice value of each thread of `pid` (field 19 of /proc/PID/task/TID/stat).
std::vector<int> ThreadNices(pid_t pid) {
  std::vector<int> out;
  std::error_code ec;
  for (auto& e : fs::directory_iterator("/proc/" + std::to_string(pid) + "/task", ec)) {
    std::string stat = ReadFile(e.path().string() + "/stat");
    size_t end = stat.rfind(')');
    if (end == std::string::npos) continue;
    std::istringstream rest(stat.substr(end + 2));
    std::vector<std::string> f{std::istream_iterator<std::string>(rest), std::istream_iterator<std::string>()};
    if (f.size() > 16) out.push_back(std::stoi(f[16]));  // f[0] is field 3 (state)
  }
  return out;
}

// While a job stands frozen, every wait of the dump for a core is its downtime: the daemon's
// thread that dumps it runs ahead of the machine's other work then, and only then (not for the
// commit after the thaw, not when idle).
TEST_F(DaemonTest, ACheckpointRunsAheadOfOtherWorkOnlyWhileTheJobStandsFrozen) {
  DaemonProcess a(Dir(), "node-a", {}, {"CAIRND_TEST_PAUSE_IN_CHECKPOINT=2"});
  ASSERT_TRUE(a.Start());
  ASSERT_TRUE(a.Cairn({"job", "run", "--name", "s", "--", "/bin/sleep", "1000"}).Exited(0)) << a.Log();
  int pid = Job(a, "s")["host_pid"];
  auto urgent = [&] {
    std::vector<int> n = ThreadNices(a.pid());
    return std::count(n.begin(), n.end(), -10);
  };
  auto stopped = [&] {
    std::string stat = ReadFile("/proc/" + std::to_string(pid) + "/stat");
    size_t end = stat.rfind(')');
    return end != std::string::npos && stat.size() > end + 2 && stat[end + 2] == 't';
  };
  ASSERT_EQ(urgent(), 0);
  CommandResult done;
  std::thread checkpoint([&] { done = a.Cairn({"job", "checkpoint", "s"}, 60s); });
  // The test hook holds the dump inside its memory copy, the job frozen, for 2 s.
  bool seen = WaitFor([&] { return stopped() && urgent() >= 1; }, 20s);
  checkpoint.join();
  ASSERT_TRUE(done.Exited(0)) << done.Describe() << a.Log();
  EXPECT_TRUE(seen) << "no thread of cairnd ran at nice -10 while the job stood frozen";
  EXPECT_FALSE(stopped());
  EXPECT_EQ(urgent(), 0) << "a thread of cairnd kept its raised priority after the thaw";
}

TEST_F(DaemonTest, TcpNeedsTheToken) {
  std::string token_file = Dir() + "/token";
  WriteFile(token_file, "s3cret-token-0123456789\n");
  ::chmod(token_file.c_str(), 0600);
  int port = FreeTcpPort();
  std::string addr = "127.0.0.1:" + std::to_string(port);
  DaemonProcess a(Dir(), "node-a", {"--listen", addr, "--token-file", token_file});
  ASSERT_TRUE(a.Start());
  std::string wrong = Dir() + "/wrong";
  WriteFile(wrong, "not-the-token-0123456789\n");

  CommandResult none = RunCommand({CAIRN_BIN, "job", "list", "--daemon", addr}, Dir(), WithEnv({"CAIRN_TOKEN="}));
  EXPECT_TRUE(none.FailedCleanly()) << none.Describe();
  EXPECT_TRUE(Matches(none.err, "token")) << none.err;
  CommandResult bad = RunCommand({CAIRN_BIN, "job", "list", "--daemon", addr, "--token-file", wrong}, Dir());
  EXPECT_TRUE(bad.FailedCleanly()) << bad.Describe();
  EXPECT_TRUE(Matches(bad.err, "missing or wrong token")) << bad.err;
  CommandResult run_bad = RunCommand(
      {CAIRN_BIN, "job", "run", "--daemon", addr, "--token-file", wrong, "--name", "x", "--", "/bin/true"}, Dir());
  EXPECT_TRUE(run_bad.FailedCleanly());
  EXPECT_EQ(a.Json({"job", "list"})["jobs"].size(), 0u) << "a refused call started a job";
  CommandResult good = RunCommand({CAIRN_BIN, "job", "list", "--daemon", addr, "--token-file", token_file}, Dir());
  EXPECT_TRUE(good.Exited(0)) << good.Describe();

  // In TLS: a client trusting the certificate gets through; one in the clear is told about --tls-ca.
  ASSERT_TRUE(MakeSelfSignedCert(Dir(), "cert")) << "openssl req failed";
  std::string tls_addr = "127.0.0.1:" + std::to_string(FreeTcpPort());
  DaemonProcess t(Dir(), "node-t",
                  {"--listen", tls_addr, "--token-file", token_file, "--tls-cert", Dir() + "/cert.pem", "--tls-key",
                   Dir() + "/cert.key"});
  ASSERT_TRUE(t.Start());
  CommandResult tls_ok = RunCommand({CAIRN_BIN, "job", "list", "--daemon", tls_addr, "--token-file", token_file,
                                     "--tls-ca", Dir() + "/cert.pem"},
                                    Dir());
  EXPECT_TRUE(tls_ok.Exited(0)) << tls_ok.Describe();
  CommandResult clear = RunCommand(
      {CAIRN_BIN, "job", "list", "--daemon", tls_addr, "--token-file", token_file, "--timeout", "3"}, Dir());
  EXPECT_TRUE(clear.FailedCleanly()) << clear.Describe();
  EXPECT_TRUE(Matches(clear.err, "--tls-ca")) << clear.err;

  // Without --token-file there is no TCP at all; a socket directory others can write is refused.
  DaemonProcess no_token(Dir(), "node-b", {"--listen", "127.0.0.1:" + std::to_string(FreeTcpPort())});
  EXPECT_FALSE(no_token.Start(5s));
  std::string open_dir = Dir() + "/open";
  fs::create_directories(open_dir);
  ::chmod(open_dir.c_str(), 0777);
  CommandResult refused = RunCommand({CAIRND_BIN, "--node", "c", "--state-dir", Dir() + "/c", "--socket",
                                      open_dir + "/c.sock", "--cairn-bin", CAIRN_BIN},
                                     Dir(), WithTimeout(10s));
  EXPECT_TRUE(refused.FailedCleanly()) << refused.Describe();
  EXPECT_TRUE(Matches(refused.err, "must be owned by root and writable by root only")) << refused.err;
  // The way out it gives is a directory of root's own, never loosening a shared one's mode.
  EXPECT_TRUE(Matches(refused.err, "--socket /run/cairn/cairnd.sock")) << refused.err;
  EXPECT_FALSE(Matches(refused.err, "chmod")) << refused.err;
}

// cairnd's options from a config file (TOML `name = value`, the long options' names), the
// command line overriding it; a file others could have written, or a name it does not know, is
// refused before anything starts.
TEST_F(DaemonTest, AConfigFileSetsOptionsTheCommandLineOverrides) {
  std::string store = Dir() + "/store";
  std::filesystem::create_directories(store);
  std::string config = Dir() + "/cairnd.toml";
  WriteFile(config, "# cairnd's options\nnode = \"from-the-file\"\nstorage = \"dir:" + store + "\"\ngc-every = 30\n");
  ::chmod(config.c_str(), 0644);
  DaemonProcess a(Dir(), "node-a", {"--config", config});
  ASSERT_TRUE(a.Start());
  json info = a.Json({"node", "info"});
  EXPECT_EQ(info.value("node", ""), a.node()) << "the command line's --node wins";
  EXPECT_EQ(info.value("storage", ""), "dir:" + store) << "the file's storage: " << info.dump();

  ::chmod(config.c_str(), 0666);
  CommandResult open = RunCommand({CAIRND_BIN, "--config", config, "--state-dir", Dir() + "/x", "--socket",
                                   Dir() + "/x.sock"}, Dir(), WithTimeout(10s));
  EXPECT_TRUE(open.FailedCleanly()) << open.Describe();
  EXPECT_TRUE(Matches(open.err, "owned by root and writable by root only.*mode 0666")) << open.err;
  WriteFile(config, "sorage = \"dir:/x\"\n");
  ::chmod(config.c_str(), 0600);
  CommandResult typo = RunCommand({CAIRND_BIN, "--config", config, "--state-dir", Dir() + "/x", "--socket",
                                   Dir() + "/x.sock"}, Dir(), WithTimeout(10s));
  EXPECT_TRUE(typo.Exited(2)) << typo.Describe();
  EXPECT_TRUE(Matches(typo.err, "--config .*sorage")) << typo.err;
  EXPECT_FALSE(std::filesystem::exists(Dir() + "/x.sock"));
}

// The exit status says why a command failed, the same classes for every subcommand
// (src/cli/exit_codes.h): 2 usage, 3 not found, 4 refused, 5 timed out, 6 no daemon; bare
// `cairn` prints its help.
TEST_F(DaemonTest, ExitStatusesSayWhyACommandFailed) {
  DaemonProcess a(Dir(), "node-a");
  ASSERT_TRUE(a.Start());
  CommandResult bare = RunCommand({CAIRN_BIN}, Dir());
  EXPECT_TRUE(bare.Exited(0)) << bare.Describe();
  EXPECT_TRUE(Matches(bare.out, "Usage: cairn .*SUBCOMMAND")) << bare.out;
  // Each program says its version, and exits 0.
  for (const std::string& bin : {std::string(CAIRN_BIN), std::string(CAIRND_BIN), std::string(CAIRN_CONTROLLER_BIN)}) {
    CommandResult v = RunCommand({bin, "--version"}, Dir());
    EXPECT_TRUE(v.Exited(0)) << v.Describe();
    EXPECT_TRUE(Matches(v.out, "^cairn(d|-controller)? [0-9]+\\.[0-9]+\\.[0-9]+")) << v.out;
  }
  auto status = [&](std::vector<std::string> args) { return a.Cairn(std::move(args), 30s); };

  CommandResult r = status({"job", "--bogus"});
  EXPECT_TRUE(r.Exited(2)) << r.Describe();
  r = status({"job", "run", "--name", "x", "--cpus", "nan", "--", "/bin/true"});
  EXPECT_TRUE(r.Exited(2)) << r.Describe();
  r = status({"job", "show", "nope"});
  EXPECT_TRUE(r.Exited(3)) << r.Describe();
  r = status({"checkpoint", "show", "nope-20260101T000000000"});
  EXPECT_TRUE(r.Exited(3)) << r.Describe();
  pid_t gone = SpawnProgram({"/bin/true"}, "/dev/null", Dir() + "/true.out", Dir() + "/true.out");
  ASSERT_TRUE(WaitGone(gone, 10s).gone);
  r = RunCommand({CAIRN_BIN, "dump", "--pid", std::to_string(gone), "--dir", Dir() + "/ckpt"}, Dir());
  EXPECT_TRUE(r.Exited(3)) << "the engine's commands too\n" << r.Describe();

  ASSERT_TRUE(status({"job", "run", "--name", "sleeper", "--", "/bin/sleep", "300"}).Exited(0));
  r = status({"job", "delete", "sleeper"});
  EXPECT_TRUE(r.Exited(4)) << r.Describe();
  r = status({"job", "run", "--name", "sleeper", "--", "/bin/sleep", "300"});
  EXPECT_TRUE(r.Exited(4)) << r.Describe();
  r = status({"job", "checkpoint", "sleeper", "--timeout", "0.001"});
  EXPECT_TRUE(r.Exited(5)) << r.Describe();
  EXPECT_TRUE(Matches(r.err, "may still be going on there; follow it with `cairn job watch sleeper`")) << r.err;

  r = RunCommand({CAIRN_BIN, "job", "list", "--socket", Dir() + "/no-daemon.sock"}, Dir());
  EXPECT_TRUE(r.Exited(6)) << r.Describe();
  EXPECT_TRUE(WaitFor([&] { return status({"job", "kill", "sleeper"}).Exited(0); }, 30s));
}

// Attach follows both logs from where they end until the job ends, then says how it ended and
// exits with the job's status; --tail N shows the last N lines written before (--tail-bytes
// about N bytes, from a line's start); --for detaches and the job keeps running. logs --tail
// counts lines too.
TEST_F(DaemonTest, AttachFollowsOutputUntilTheJobEnds) {
  DaemonProcess a(Dir(), "node-a");
  ASSERT_TRUE(a.Start());
  ASSERT_TRUE(a.Cairn({"job", "run", "--name", "talk", "--", "/bin/sh", "-c",
                       "echo early; while [ ! -e " + Dir() + "/go ]; do sleep 0.05; done; "
                       "echo late; echo oops >&2; sleep 0.3; echo last; exit 3"})
                  .Exited(0));
  ASSERT_TRUE(WaitFor([&] { return a.Cairn({"job", "logs", "talk"}).out == "early\n"; }, 10s));
  CommandResult attached;
  std::thread t([&] { attached = a.Cairn({"job", "attach", "talk"}, 30s); });
  std::this_thread::sleep_for(500ms);  // attached before the job goes on
  WriteFile(Dir() + "/go", "");
  t.join();
  EXPECT_TRUE(attached.Exited(3)) << "the job's exit status\n" << attached.Describe();
  EXPECT_EQ(attached.out, "late\nlast\n");  // not "early": that was written before attaching
  EXPECT_TRUE(Matches(attached.err, "oops")) << attached.err;
  EXPECT_TRUE(Matches(attached.err, "job talk exited: .*3")) << attached.err;

  CommandResult again = a.Cairn({"job", "attach", "talk", "--tail", "100"});
  EXPECT_TRUE(again.Exited(3)) << again.Describe();
  EXPECT_EQ(again.out, "early\nlate\nlast\n");
  CommandResult two = a.Cairn({"job", "attach", "talk", "--tail", "2"});
  EXPECT_EQ(two.out, "late\nlast\n") << two.Describe();
  // 7 bytes back from the end fall inside "late\n": from that line's start.
  CommandResult bytes = a.Cairn({"job", "attach", "talk", "--tail-bytes", "7"});
  EXPECT_EQ(bytes.out, "late\nlast\n") << bytes.Describe();
  EXPECT_EQ(a.Cairn({"job", "logs", "talk", "--tail", "1"}).out, "last\n");
  EXPECT_EQ(a.Cairn({"job", "logs", "talk", "--tail", "2"}).out, "late\nlast\n");
  EXPECT_EQ(a.Cairn({"job", "logs", "talk", "--tail-bytes", "3"}).out, "last\n");
  EXPECT_EQ(a.Cairn({"job", "logs", "talk", "--tail-bytes", "5"}).out, "last\n");
  EXPECT_EQ(a.Cairn({"job", "logs", "talk", "--tail-bytes", "6"}).out, "late\nlast\n");
  EXPECT_EQ(a.Cairn({"job", "logs", "talk", "--tail", "9"}).out, "early\nlate\nlast\n");

  ASSERT_TRUE(a.Cairn({"job", "run", "--name", "quiet", "--", "/bin/sleep", "300"}).Exited(0));
  CommandResult detached = a.Cairn({"job", "attach", "quiet", "--for", "0.5"});
  EXPECT_TRUE(detached.Exited(0)) << detached.Describe();
  EXPECT_EQ(Job(a, "quiet")["state"], "running");
  std::thread killer([&] {
    std::this_thread::sleep_for(500ms);
    a.Cairn({"job", "kill", "quiet"});
  });
  CommandResult killed = a.Cairn({"job", "attach", "quiet"}, 30s);
  killer.join();
  EXPECT_TRUE(killed.Exited(128 + 9)) << "a job killed by SIGKILL: 137, as a shell says\n" << killed.Describe();
  CommandResult unknown = a.Cairn({"job", "attach", "nope"});
  EXPECT_TRUE(unknown.FailedCleanly()) << unknown.Describe();
  EXPECT_TRUE(Matches(unknown.err, "no job 'nope'")) << unknown.err;
}

// What a SLURM task's agent relies on (docs/slurm.md): a job started with exactly the environment
// and working directory given, which it keeps across a checkpoint and restore; and an attach
// bound to its job, whose caller's death ends the job (and an unbound one's does not).
TEST_F(DaemonTest, AJobGetsTheEnvironmentAndDirectoryGivenAndABoundAttachEndsItWhenCutOff) {
  DaemonProcess a(Dir(), "node-a");
  ASSERT_TRUE(a.Start());
  std::string work = Dir() + "/work dir";
  std::filesystem::create_directories(work);
  ASSERT_TRUE(a.Cairn({"job", "run", "--name", "env", "--env", "ONE=1", "--env", "TWO=two words", "--env",
                       "PATH=/usr/bin:/bin", "--workdir", work, "--", "/bin/sh", "-c",
                       "pwd; env | grep -v '^PWD=\\|^SHLVL=\\|^_=' | sort; while [ ! -e go ]; do sleep 0.05; done; pwd; "
                       "echo \"$ONE $TWO\""})
                  .Exited(0));
  ASSERT_TRUE(WaitFor([&] { return Matches(a.Cairn({"job", "logs", "env"}).out, "TWO"); }, 10s));
  EXPECT_EQ(a.Cairn({"job", "logs", "env"}).out, work + "\nONE=1\nPATH=/usr/bin:/bin\nTWO=two words\n");
  ASSERT_TRUE(a.Cairn({"job", "checkpoint", "env", "--kill"}).Exited(0));
  ASSERT_TRUE(a.Cairn({"job", "restore", "env"}).Exited(0));
  WriteFile(work + "/go", "");
  ASSERT_TRUE(WaitState(a, "env", "exited"));
  EXPECT_TRUE(Matches(a.Cairn({"job", "logs", "env"}).out, "TWO=two words\n" + work + "\n1 two words\n$"))
      << a.Cairn({"job", "logs", "env"}).out;
  // Bad input names the field and the rule; nothing starts.
  CommandResult bad = a.Cairn({"job", "run", "--name", "bad", "--env", "NOEQUALS", "--", "/bin/true"});
  EXPECT_TRUE(bad.FailedCleanly()) << bad.Describe();
  EXPECT_TRUE(Matches(bad.err, "env \\(--env\\): 'NOEQUALS' is not KEY=VALUE")) << bad.err;
  bad = a.Cairn({"job", "run", "--name", "bad", "--workdir", "relative/dir", "--", "/bin/true"});
  EXPECT_TRUE(bad.FailedCleanly()) << bad.Describe();
  EXPECT_TRUE(Matches(bad.err, "workdir \\(--workdir\\) 'relative/dir': give an absolute path")) << bad.err;
  bad = a.Cairn({"job", "run", "--name", "bad", "--workdir", Dir() + "/missing", "--", "/bin/true"});
  EXPECT_TRUE(bad.FailedCleanly()) << bad.Describe();
  EXPECT_TRUE(Matches(bad.err, "working directory '.*/missing': no such directory")) << bad.err;

  // An attach cut off: unbound, the job runs on; bound, cairnd kills it.
  for (bool bound : {false, true}) {
    std::string name = bound ? "bound" : "free";
    ASSERT_TRUE(a.Cairn({"job", "run", "--name", name, "--", "/bin/sh", "-c", "while :; do echo tick; sleep 0.1; done"})
                    .Exited(0));
    std::vector<std::string> argv = {CAIRN_BIN, "job", "attach", name, "--socket", a.socket()};
    if (bound) argv.push_back("--bound");
    WriteFile(Dir() + "/attach.out", "");
    pid_t attach = SpawnProgram(argv, "/dev/null", Dir() + "/attach.out", Dir() + "/attach.err");
    ASSERT_GT(attach, 0);
    // Attached: the job's ticks reach it.
    ASSERT_TRUE(WaitFor([&] { return Matches(ReadFile(Dir() + "/attach.out"), "tick"); }, 10s));
    ::kill(attach, SIGKILL);
    WaitGone(attach, 10s);
    if (bound) {
      EXPECT_TRUE(WaitState(a, name, "killed", 20s));
      EXPECT_TRUE(Matches(a.RunLog(), "job=bound kind=unbound")) << a.RunLog();
    } else {
      std::this_thread::sleep_for(1s);
      EXPECT_EQ(Job(a, name)["state"], "running");
      a.Cairn({"job", "kill", name});
    }
  }
}

// A job's owner (job run|restore --owner; a SLURM task's agent owns its job so, from its start,
// before any attach): the job lives no longer than it. A restore with another owner takes the
// job over, and the first owner's exit then changes nothing; a job that ended before its owner
// is left as it ended.
TEST_F(DaemonTest, AJobEndsWithItsOwnerAndARestoreWithAnotherOwnerTakesItOver) {
  DaemonProcess a(Dir(), "node-a");
  ASSERT_TRUE(a.Start());
  auto owner = [&] { return SpawnProgram({"/bin/sleep", "1000"}, "/dev/null", "/dev/null", "/dev/null"); };
  pid_t first = owner(), second = owner(), third = owner();
  ASSERT_GT(first, 0);
  ASSERT_GT(second, 0);
  ASSERT_GT(third, 0);
  ASSERT_TRUE(a.Cairn({"job", "run", "--name", "owned", "--owner", std::to_string(first), "--", "/bin/sh", "-c",
                       "while :; do echo tick; sleep 0.1; done"})
                  .Exited(0));
  ASSERT_TRUE(a.Cairn({"job", "checkpoint", "owned", "--kill"}).Exited(0));
  ASSERT_TRUE(a.Cairn({"job", "restore", "owned", "--owner", std::to_string(second)}).Exited(0));
  ::kill(first, SIGKILL);
  WaitGone(first, 10s);
  std::this_thread::sleep_for(1s);
  EXPECT_EQ(Job(a, "owned")["state"], "running") << "the first owner no longer owns the restored job";
  ::kill(second, SIGKILL);
  WaitGone(second, 10s);
  EXPECT_TRUE(WaitState(a, "owned", "killed", 20s));
  EXPECT_TRUE(Matches(a.RunLog(), "job=owned kind=unbound .*its owner")) << a.RunLog();

  // An owner that is gone: refused before anything starts.
  CommandResult gone = a.Cairn({"job", "run", "--name", "orphan", "--owner", std::to_string(first), "--", "/bin/true"});
  EXPECT_TRUE(gone.FailedCleanly()) << gone.Describe();
  EXPECT_TRUE(Matches(gone.err, "--owner [0-9]+: no such process runs")) << gone.err;
  EXPECT_FALSE(Matches(a.Cairn({"job", "list"}).out, "orphan"));

  // Ended before its owner: the owner's exit kills nothing and says nothing.
  ASSERT_TRUE(a.Cairn({"job", "run", "--name", "short", "--owner", std::to_string(third), "--", "/bin/true"}).Exited(0));
  ASSERT_TRUE(WaitState(a, "short", "exited"));
  ::kill(third, SIGKILL);
  WaitGone(third, 10s);
  std::this_thread::sleep_for(1s);
  EXPECT_EQ(Job(a, "short")["state"], "exited");
  EXPECT_FALSE(Matches(a.RunLog(), "job=short kind=unbound")) << a.RunLog();
}

// A job's owner is recorded with it: a daemon killed and started again watches the owner again
// (its exit then ends the job), and ends at once a job whose owner exited while it was down.
TEST_F(DaemonTest, AnOwnerOutlivesADaemonRestartAndOneGoneMeanwhileEndsItsJob) {
  auto owner = [&] { return SpawnProgram({"/bin/sleep", "1000"}, "/dev/null", "/dev/null", "/dev/null"); };
  pid_t watched = owner(), gone = owner();
  ASSERT_GT(watched, 0);
  ASSERT_GT(gone, 0);
  const std::vector<std::string> loop = {"--", "/bin/sh", "-c", "while :; do sleep 0.1; done"};
  {
    DaemonProcess a(Dir(), "node-a");
    ASSERT_TRUE(a.Start());
    for (auto [name, pid] : {std::pair{"kept", watched}, std::pair{"orphaned", gone}}) {
      std::vector<std::string> run = {"job", "run", "--name", name, "--owner", std::to_string(pid)};
      run.insert(run.end(), loop.begin(), loop.end());
      ASSERT_TRUE(a.Cairn(run).Exited(0));
    }
    EXPECT_EQ(Job(a, "kept")["owner"]["pid"], watched) << Job(a, "kept").dump();
    a.Kill(SIGKILL);
    a.Wait();
  }
  ::kill(gone, SIGKILL);
  WaitGone(gone, 10s);
  DaemonProcess b(Dir(), "node-a");
  ASSERT_TRUE(b.Start());
  EXPECT_TRUE(WaitState(b, "orphaned", "killed", 20s)) << "a job whose owner died while the daemon was down runs on";
  EXPECT_TRUE(Matches(b.RunLog(), "job=orphaned kind=unbound .*its owner")) << b.RunLog();
  std::this_thread::sleep_for(1s);
  EXPECT_EQ(Job(b, "kept")["state"], "running") << "a job whose owner lives was ended";
  ::kill(watched, SIGKILL);
  WaitGone(watched, 10s);
  EXPECT_TRUE(WaitState(b, "kept", "killed", 20s)) << "the owner's exit after the restart did not end its job";
}

TEST_F(DaemonTest, PeriodicCheckpointsKeepTheLastAndPinned) {
  DaemonProcess a(Dir(), "node-a");
  ASSERT_TRUE(a.Start());
  ASSERT_TRUE(a.Cairn({"job", "run", "--name", "tick", "--checkpoint-every", "1", "--keep", "2", "--", "/bin/sh", "-c",
                       "i=0; while true; do i=$((i+1)); echo $i; sleep 0.1; done"})
                  .Exited(0));
  // A second job on the same period: both fall due together and are taken by two workers at once.
  // Its periodic checkpoints are taken with pre-copy.
  ASSERT_TRUE(a.Cairn({"job", "run", "--name", "tock", "--checkpoint-every", "1", "--keep", "2", "--pre-copy", "--",
                       "/bin/sh", "-c", "while true; do sleep 0.1; done"})
                  .Exited(0));
  EXPECT_TRUE(Matches(a.Cairn({"job", "show", "tock"}).out, "every 1 s \\(pre-copy\\)"));
  json pinned = a.Json({"job", "checkpoint", "tick", "--pin"})["checkpoint"];
  ASSERT_EQ(pinned["state"], "complete");
  bool expired = WaitFor(
      [&] {
        CommandResult w = a.Cairn({"job", "watch", "tick", "--after", "0", "--count", "100", "--timeout", "1"});
        return Matches(w.out, "checkpoint-expired");
      },
      30s);
  ASSERT_TRUE(expired) << a.Log();
  // Stopped, so that no later checkpoint expires one of those listed while their files are looked at.
  // (Kill waits for a checkpoint in progress, whose retention is part of its completion.)
  ASSERT_TRUE(a.Cairn({"job", "kill", "tick"}).Exited(0));
  json l = a.Json({"checkpoint", "list", "--job", "tick"});
  int complete_unpinned = 0, pinned_kept = 0;
  for (const auto& c : l["checkpoints"]) {
    if (c["state"] == "complete" && !c["pinned"].get<bool>()) ++complete_unpinned;
    if (c["id"] == pinned["id"]) ++pinned_kept;
    if (c["state"] == "complete") {
      EXPECT_TRUE(fs::exists(c["location"].get<std::string>()));
    }
  }
  EXPECT_LE(complete_unpinned, 2) << l.dump();
  EXPECT_EQ(pinned_kept, 1) << l.dump();
  EXPECT_TRUE(Matches(a.Cairn({"job", "show", "tick"}).out, "keep last 2 \\+ pinned"));
  ASSERT_TRUE(WaitFor([&] { return a.Json({"checkpoint", "list", "--job", "tock"})["checkpoints"].size() >= 2; }, 20s));
  for (const auto& c : a.Json({"checkpoint", "list", "--job", "tock"})["checkpoints"]) {
    EXPECT_NE(c["state"], "failed") << c.dump();
  }
  EXPECT_EQ(Job(a, "tock")["state"], "running");
  // Unpinned, it is an ordinary checkpoint again (the job is stopped, so no later checkpoint expires
  // it); pinned again, it says so.
  EXPECT_EQ(a.Json({"checkpoint", "pin", pinned["id"], "--unpin"})["checkpoint"]["pinned"], false);
  EXPECT_TRUE(Matches(a.Cairn({"checkpoint", "pin", pinned["id"]}).out, "complete, pinned"));
}

// Periodic incremental checkpoints of a program that keeps writing its 64 MiB: after a full one,
// each saves only what was written since its parent, a full one again every 3; retention keeps
// the parents of what it keeps, and a parent cannot be deleted alone; the job restored from an
// incremental checkpoint finds every page as it had written it.
TEST_F(DaemonTest, IncrementalCheckpointsKeepTheirChainAndRestore) {
  DaemonProcess a(Dir(), "node-a");
  ASSERT_TRUE(a.Start());
  std::string work = Dir() + "/writer";
  fs::create_directories(work);
  CommandResult both = a.Cairn({"job", "run", "--name", "x", "--incremental", "--pre-copy", "--", "/bin/true"});
  EXPECT_TRUE(both.FailedCleanly()) << both.Describe();
  EXPECT_TRUE(Matches(both.err, "either incremental or pre-copy")) << both.err;
  ASSERT_TRUE(a.Cairn({"job", "run", "--name", "w", "--checkpoint-every", "1", "--incremental", "--full-every", "3", "--keep",
                       "2", "--", WORKLOAD_DIR "/incremental/inc_writer", work, "64", "2000"})
                  .Exited(0));
  ASSERT_TRUE(WaitFor([&] { return Exists(work + "/ready"); }, 30s)) << a.Cairn({"job", "logs", "w", "--stderr"}).out;
  EXPECT_TRUE(Matches(a.Cairn({"job", "show", "w"}).out, "every 1 s \\(incremental\\)"));
  auto taken = [&] {
    std::string out = a.Cairn({"job", "watch", "w", "--after", "0", "--count", "1000", "--timeout", "1"}).out;
    int n = 0;
    for (size_t at = out.find(" complete: "); at != std::string::npos; at = out.find(" complete: ", at + 1)) ++n;
    return n;
  };
  ASSERT_TRUE(WaitFor([&] { return taken() >= 5; }, 60s)) << a.Log();
  // The last one stops the job (incremental, or full when its chain is long enough).
  json last = a.Json({"job", "checkpoint", "w", "--incremental", "--kill"})["checkpoint"];
  ASSERT_EQ(last["state"], "complete") << last.dump() << a.Log();
  ASSERT_TRUE(WaitState(a, "w", "killed"));

  json list = a.Json({"checkpoint", "list", "--job", "w"})["checkpoints"];
  std::map<std::string, json> by_id;
  for (const json& c : list) by_id[c["id"]] = c;
  int full = 0, incremental = 0;
  int64_t full_bytes = 0, max_incremental_bytes = 0;
  for (const json& c : list) {
    ASSERT_EQ(c["state"], "complete") << c.dump();
    EXPECT_TRUE(fs::exists(c["location"].get<std::string>() + "/checkpoint.meta")) << c.dump();
    std::string parent = c.value("parent", "");
    if (parent.empty()) {
      ++full;
      full_bytes = std::max(full_bytes, JsonInt(c["size_bytes"]));
      continue;
    }
    ++incremental;
    max_incremental_bytes = std::max(max_incremental_bytes, JsonInt(c["size_bytes"]));
    EXPECT_TRUE(by_id.count(parent)) << "retention removed " << parent << ", the parent of " << c["id"] << ": "
                                     << list.dump();
  }
  EXPECT_GE(full, 1) << list.dump();
  EXPECT_GE(incremental, 1) << list.dump();
  EXPECT_GT(full_bytes, 56 << 20);  // 64 MiB written, a few pages discarded
  EXPECT_LT(max_incremental_bytes, full_bytes / 2) << list.dump();
  // The newest incremental one (the last may be full: one in three is).
  json inc;
  for (const json& c : list) {
    if (!c.value("parent", "").empty() && (inc.is_null() || UnixSeconds(c["created"]) > UnixSeconds(inc["created"]))) inc = c;
  }
  ASSERT_FALSE(inc.is_null()) << list.dump();
  CommandResult del = a.Cairn({"checkpoint", "delete", inc["parent"]});
  EXPECT_TRUE(del.FailedCleanly()) << del.Describe();
  EXPECT_TRUE(Matches(del.err, "is the parent of incremental checkpoint " + inc["id"].get<std::string>())) << del.err;
  CommandResult events = a.Cairn({"job", "watch", "w", "--after", "0", "--count", "1000", "--timeout", "1"});
  EXPECT_TRUE(Matches(events.out, "checkpoint .* complete: .*incremental on ")) << events.out;

  // Restored from that incremental checkpoint (through its chain): every page as the program had
  // last written it then.
  CommandResult restore = a.Cairn({"job", "restore", "w", "--checkpoint", inc["id"]});
  ASSERT_TRUE(restore.Exited(0)) << restore.Describe() << a.Log();
  EXPECT_TRUE(WriterPasses(a, "w", work));
}

TEST_F(DaemonTest, HealthSignalsInTheWatchStreamAndShow) {
  DaemonProcess a(Dir(), "node-a");
  ASSERT_TRUE(a.Start());
  // Hung: no CPU and no heartbeat for 1 s.
  ASSERT_TRUE(a.Cairn({"job", "run", "--name", "idle", "--hang-after", "1", "--", "/bin/sleep", "300"}).Exited(0));
  // Memory pressure: 48 MiB held under a 80 MiB limit, reported at half of it.
  ASSERT_TRUE(a.Cairn({"job", "run", "--name", "fat", "--memory", "80M", "--memory-pressure", "0.5", "--", kPython,
                       "-c", "import time; b = b\"x\" * (48 << 20); time.sleep(300)"})
                  .Exited(0));
  // A heartbeat file keeps an idle job from being called hung.
  std::string beat = Dir() + "/beat";
  ASSERT_TRUE(a.Cairn({"job", "run", "--name", "beating", "--hang-after", "2", "--heartbeat-file", beat, "--",
                       "/bin/sh", "-c", "while true; do touch " + beat + "; sleep 0.2; done"})
                  .Exited(0));

  CommandResult hung = a.Cairn({"job", "watch", "idle", "--after", "0", "--count", "2", "--timeout", "20"});
  EXPECT_TRUE(Matches(hung.out, "idle +hung +no CPU progress")) << hung.Describe();
  CommandResult fat = a.Cairn({"job", "watch", "fat", "--after", "0", "--count", "2", "--timeout", "20"});
  EXPECT_TRUE(Matches(fat.out, "fat +memory-pressure +memory [0-9.]+ MiB of 80.0 MiB")) << fat.Describe();
  json f = Job(a, "fat")["health"];
  EXPECT_EQ(f["state"], "memory-pressure") << f.dump();
  EXPECT_EQ(JsonInt(f["memory_limit_bytes"]), 80 << 20);
  EXPECT_TRUE(Matches(a.Cairn({"job", "show", "idle"}).out, "health +hung"));
  std::this_thread::sleep_for(3s);
  EXPECT_EQ(Job(a, "beating")["health"]["state"], "running");

  // An exit arrives on a live watch stream.
  std::thread killer([&] {
    std::this_thread::sleep_for(1s);
    a.Cairn({"job", "kill", "idle"});
  });
  CommandResult live = a.Cairn({"job", "watch", "idle", "--count", "2", "--timeout", "20"});
  killer.join();
  EXPECT_TRUE(Matches(live.out, "idle +killed +killed by signal 9")) << live.Describe();
}

// SIGUSR1 to cairnd (a preemption hook) checkpoints every job whose policy says so; the jobs keep
// running and the daemon keeps serving.
TEST_F(DaemonTest, SigusrOneCheckpointsTheJobsThatAskForIt) {
  DaemonProcess a(Dir(), "node-a");
  ASSERT_TRUE(a.Start());
  ASSERT_TRUE(a.Cairn({"job", "run", "--name", "svc", "--", "/bin/sh", "-c", "while true; do sleep 0.1; done"}).Exited(0));
  ASSERT_TRUE(a.Cairn({"job", "run", "--name", "skip", "--no-signal-checkpoint", "--", "/bin/sleep", "300"}).Exited(0));
  EXPECT_TRUE(Matches(a.Cairn({"job", "show", "skip"}).out, "no checkpoint on SIGUSR1")) << a.Cairn({"job", "show", "skip"}).out;
  ASSERT_EQ(::kill(a.pid(), SIGUSR1), 0);
  ASSERT_TRUE(WaitFor(
      [&] {
        json l = a.Json({"checkpoint", "list", "--job", "svc"})["checkpoints"];
        return l.size() == 1 && l[0]["state"] != "writing";
      },
      30s))
      << a.Log();
  json c = a.Json({"checkpoint", "list", "--job", "svc"})["checkpoints"][0];
  EXPECT_EQ(c["reason"], "signal");
  EXPECT_EQ(c["state"], "complete");
  EXPECT_EQ(a.Json({"checkpoint", "list", "--job", "skip"})["checkpoints"].size(), 0u);
  EXPECT_EQ(Job(a, "svc")["state"], "running");
  EXPECT_EQ(Job(a, "skip")["state"], "running");
}

TEST_F(DaemonTest, PlannedShutdownCheckpointsAndJobsKeepRunning) {
  std::string token = "metrics-token-0123456789";
  DaemonProcess a(Dir(), "node-a", {"--metrics-port", "0", "--token-file", Token("token", token)});
  ASSERT_TRUE(a.Start());
  ASSERT_TRUE(a.Cairn({"job", "run", "--name", "svc", "--", "/bin/sh", "-c", "while true; do sleep 0.1; done"}).Exited(0));
  ASSERT_TRUE(a.Cairn({"job", "run", "--name", "skip", "--no-shutdown-checkpoint", "--", "/bin/sleep", "300"}).Exited(0));
  int svc = Job(a, "svc")["host_pid"];
  ASSERT_TRUE(a.Json({"job", "checkpoint", "svc"})["checkpoint"]["state"] == "complete");

  // Metrics on loopback with the daemon's token (SecurityTest.MetricsNeedTheToken has the
  // refusals), in Prometheus text format, once the health sampler has seen the job.
  ASSERT_TRUE(WaitFor([&] { return JsonInt(Job(a, "svc")["health"]["memory_bytes"]) > 0; }, 10s));
  std::string resp = ScrapeMetrics(a, token);
  EXPECT_TRUE(Matches(resp, "^HTTP/1.0 200")) << resp;
  EXPECT_TRUE(Matches(resp, "cairnd_checkpoints_total\\{result=\"complete\"\\} 1")) << resp;
  EXPECT_TRUE(Matches(resp, "cairnd_jobs\\{state=\"running\"\\} 2")) << resp;
  EXPECT_TRUE(Matches(resp, "cairnd_job_memory_bytes\\{job=\"svc\"\\} [1-9]")) << resp;
  // Latencies as histograms (cumulative buckets, sum, count), over the daemon's life.
  EXPECT_TRUE(Matches(resp, "# TYPE cairnd_checkpoint_seconds histogram")) << resp;
  EXPECT_TRUE(Matches(resp, "\ncairnd_checkpoint_seconds_bucket\\{le=\"\\+Inf\"\\} 1\n")) << resp;
  EXPECT_TRUE(Matches(resp, "\ncairnd_checkpoint_seconds_bucket\\{le=\"300\"\\} 1\n")) << resp;
  EXPECT_TRUE(Matches(resp, "\ncairnd_checkpoint_seconds_count 1\n")) << resp;
  EXPECT_TRUE(Matches(resp, "\ncairnd_checkpoint_frozen_seconds_sum 0\\.[0-9]+\n")) << resp;
  // A job's health is a series per signal whose value changes, never a label that does.
  EXPECT_TRUE(Matches(resp, "\ncairnd_job_hung\\{job=\"svc\"\\} 0\n")) << resp;
  EXPECT_TRUE(Matches(resp, "\ncairnd_job_healthy\\{job=\"svc\"\\} 1\n")) << resp;
  EXPECT_FALSE(Matches(resp, "health=")) << resp;

  // Idle connections (connected, saying nothing) do not hold up a scrape.
  std::vector<UniqueFd> idle;
  for (int i = 0; i < 3; ++i) {
    UniqueFd s(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(static_cast<uint16_t>(a.MetricsPort()));
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(::connect(s.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa), 0);
    idle.push_back(std::move(s));
  }
  auto asked = std::chrono::steady_clock::now();
  std::string beside = ScrapeMetrics(a, token);
  double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - asked).count();
  EXPECT_TRUE(Matches(beside, "^HTTP/1.0 200")) << beside;
  // (Served one at a time, it would wait out each idle one's 2 s read timeout: 6 s.)
  EXPECT_LT(took, 3.0) << "a scrape waited for idle connections";
  idle.clear();

  a.Kill(SIGTERM);
  Ending e = a.Wait();
  ASSERT_TRUE(e.ExitedWith(0)) << e.Describe() << a.Log();
  EXPECT_TRUE(IsAlive(svc)) << "a planned shutdown must leave jobs running";
  DaemonProcess again(Dir(), "node-a");
  ASSERT_TRUE(again.Start());
  json l = again.Json({"checkpoint", "list"});
  int shutdown_ckpts = 0;
  for (const auto& c : l["checkpoints"]) {
    if (c["reason"] == "shutdown") {
      ++shutdown_ckpts;
      EXPECT_EQ(c["job"], "svc");
      EXPECT_EQ(c["state"], "complete");
    }
  }
  EXPECT_EQ(shutdown_ckpts, 1) << l.dump();
  EXPECT_EQ(Job(again, "svc")["state"], "running");
  EXPECT_EQ(Job(again, "skip")["state"], "running");

  // An incremental checkpoint needs the job's writes tracked since its parent: here (the parent
  // was taken without tracking) it is a full one, and says why; both modes at once are refused.
  CommandResult both = again.Cairn({"job", "checkpoint", "svc", "--incremental", "--pre-copy"});
  EXPECT_TRUE(both.FailedCleanly()) << both.Describe();
  EXPECT_TRUE(Matches(both.err, "either incremental or pre-copy")) << both.err;
  json inc = again.Json({"job", "checkpoint", "svc", "--incremental"})["checkpoint"];
  EXPECT_EQ(inc["state"], "complete") << inc.dump();
  EXPECT_EQ(inc.value("parent", ""), "") << inc.dump();
  CommandResult events = again.Cairn({"job", "watch", "svc", "--after", "0", "--count", "1000", "--timeout", "1"});
  EXPECT_TRUE(Matches(events.out, "full \\(no process's writes were tracked")) << events.out;
}

}  // namespace
}  // namespace cairn::testing
