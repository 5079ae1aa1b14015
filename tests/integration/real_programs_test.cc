// Round trips of real programs from Debian, checkpointed in the middle of their work: python3
// computing a hash chain, a multi-threaded zstd compressing 200 MiB, python3 multiprocessing trees,
// and redis-server holding keys. Each restored run must produce exactly what an uninterrupted run
// produces.
//
// zstd rather than xz: xz 5.4 keeps a self-pipe open (its signal handling), and pipes are outside
// what a single-process dump covers; zstd -T2 holds only regular files and gives the same bytes for
// the same input whatever the timing of its threads.

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <thread>

#include "harness.h"

namespace cairn::testing {
namespace {

namespace fs = std::filesystem;

constexpr char kPython[] = "/usr/bin/python3";
constexpr char kZstd[] = "/usr/bin/zstd";
constexpr char kRedisServer[] = "/usr/bin/redis-server";
constexpr char kRedisCli[] = "/usr/bin/redis-cli";
constexpr char kNginx[] = "/usr/sbin/nginx";
constexpr char kCurl[] = "/usr/bin/curl";
constexpr char kTmux[] = "/usr/bin/tmux";
constexpr char kGo[] = "/usr/bin/go";

constexpr char kPythonRounds[] = "6000000";

class RealPrograms : public CairnTest {
 protected:
  // Runs argv to completion (stdin empty, output files in `dir`) and expects exit 0.
  ::testing::AssertionResult RunToEnd(const std::vector<std::string>& argv, const std::string& dir,
                                      const std::vector<std::string>& env = {}) {
    fs::create_directories(dir);
    WriteFile(dir + "/stdin", "");
    pid_t pid = SpawnProgram(argv, dir + "/stdin", dir + "/stdout", dir + "/stderr", env);
    Track(pid, argv[0]);
    Ending end = WaitGone(pid, 120s);
    if (!end.ExitedWith(0)) {
      return ::testing::AssertionFailure() << argv[0] << " " << end.Describe() << "; stderr: " << ReadFile(dir + "/stderr");
    }
    return ::testing::AssertionSuccess();
  }

  // Dumps `pid` (killing it) and restores it detached.
  ::testing::AssertionResult DumpRestoreStart(pid_t pid, const std::string& ckpt) {
    CommandResult dump = Dump(pid, ckpt);
    if (!dump.Exited(0)) return ::testing::AssertionFailure() << "cairn dump failed " << dump.Describe();
    Ending killed = WaitGone(pid, 10s);
    if (!killed.gone || !killed.status || !WIFSIGNALED(*killed.status)) {
      return ::testing::AssertionFailure() << "after dump the program " << killed.Describe();
    }
    CommandResult restore = Restore(ckpt, /*detach=*/true, WithTimeout(120s));
    if (!restore.Exited(0)) return ::testing::AssertionFailure() << "cairn restore failed " << restore.Describe();
    return ::testing::AssertionSuccess();
  }

  // Dumps `pid` (killing it), restores it detached and waits for it to finish.
  ::testing::AssertionResult DumpRestoreFinish(pid_t pid, const std::string& ckpt, const std::string& dir) {
    auto started = DumpRestoreStart(pid, ckpt);
    if (!started) return started;
    Ending end = WaitGone(pid, 120s);
    if (!end.gone) return ::testing::AssertionFailure() << "restored program did not finish in 120 s";
    if (end.status && !end.ExitedWith(0)) {
      return ::testing::AssertionFailure() << "restored program " << end.Describe() << "; stderr: " << ReadFile(dir + "/stderr");
    }
    return ::testing::AssertionSuccess();
  }
};

TEST_F(RealPrograms, Python3MidComputation) {
  ASSERT_TRUE(fs::exists(kPython)) << kPython << " is required (scripts/install-deps.sh installs it)";
  const std::vector<std::string> env = {"PYTHONHASHSEED=0"};
  std::string plain = *temp_ / "plain";
  ASSERT_TRUE(RunToEnd({kPython, "-I", "-c", kPythonHashChain, plain + "/result", kPythonRounds}, plain, env));
  std::string expected = ReadFile(plain + "/result");
  ASSERT_FALSE(expected.empty());

  std::string dir = *temp_ / "work";
  fs::create_directories(dir);
  WriteFile(dir + "/stdin", "");
  pid_t pid = SpawnProgram({kPython, "-I", "-c", kPythonHashChain, dir + "/result", kPythonRounds}, dir + "/stdin",
                           dir + "/stdout", dir + "/stderr", env);
  ASSERT_GT(pid, 0);
  Track(pid, kPython);
  std::this_thread::sleep_for(1s);
  ASSERT_TRUE(IsAlive(pid)) << "python3 finished or died within 1 s: " << ReadFile(dir + "/stderr");
  ASSERT_FALSE(Exists(dir + "/result")) << "python3 already finished; the checkpoint would not be mid-computation";
  ASSERT_TRUE(DumpRestoreFinish(pid, *temp_ / "ckpt", dir));
  EXPECT_EQ(ReadFile(dir + "/result"), expected);
  EXPECT_EQ(ReadFile(dir + "/stdout"), "done\n");
}

// A JVM (OpenJDK from Debian) running a program from source (`java Main.java`, which compiles
// it in memory first: the source launcher also holds a unix socket whose peer it closed, the
// case that once made every JVM uncheckpointable), checkpointed mid-computation, killed and
// restored: it must finish with the result of an uninterrupted run.
constexpr char kJava[] = "/usr/bin/java";
constexpr char kJavaMain[] = R"(import java.nio.file.*;
public class Main {
  public static void main(String[] args) throws Exception {
    long rounds = Long.parseLong(args[1]);
    Files.writeString(Path.of(args[0] + ".started"), "started\n");
    long h = 1469598103934665603L;
    for (long i = 0; i < rounds; i++) {
      h ^= i;
      h *= 1099511628211L;
      h = Long.rotateLeft(h, (int) (i & 31));
    }
    Files.writeString(Path.of(args[0]), Long.toHexString(h) + "\n");
    System.out.println("done");
  }
}
)";
constexpr char kJavaRounds[] = "4000000000";

TEST_F(RealPrograms, JvmMidComputation) {
  ASSERT_TRUE(fs::exists(kJava)) << kJava << " is required (scripts/install-deps.sh installs openjdk-17-jdk-headless)";
  std::string src = *temp_ / "Main.java";
  WriteFile(src, kJavaMain);
  // The JVM sizes its heap and GC threads from the machine: fixed here so both runs match.
  const std::vector<std::string> java = {kJava, "-Xmx256m", "-XX:+UseSerialGC", src};
  std::string plain = *temp_ / "plain";
  std::vector<std::string> argv = java;
  argv.insert(argv.end(), {plain + "/result", kJavaRounds});
  ASSERT_TRUE(RunToEnd(argv, plain));
  std::string expected = ReadFile(plain + "/result");
  ASSERT_FALSE(expected.empty());

  std::string dir = *temp_ / "work";
  fs::create_directories(dir);
  WriteFile(dir + "/stdin", "");
  argv = java;
  argv.insert(argv.end(), {dir + "/result", kJavaRounds});
  pid_t pid = SpawnProgram(argv, dir + "/stdin", dir + "/stdout", dir + "/stderr");
  ASSERT_GT(pid, 0);
  Track(pid, kJava);
  for (int i = 0; i < 300 && !Exists(dir + "/result.started"); ++i) std::this_thread::sleep_for(50ms);
  ASSERT_TRUE(Exists(dir + "/result.started")) << "the JVM did not start computing: " << ReadFile(dir + "/stderr");
  std::this_thread::sleep_for(300ms);
  ASSERT_FALSE(Exists(dir + "/result")) << "the JVM already finished; the checkpoint would not be mid-computation";
  ASSERT_TRUE(DumpRestoreFinish(pid, *temp_ / "ckpt", dir));
  EXPECT_EQ(ReadFile(dir + "/result"), expected);
  EXPECT_EQ(ReadFile(dir + "/stdout"), "done\n");
}

// 200 MiB of compressible but not trivial data: words drawn from a seeded vocabulary.
void WriteTestInput(const std::string& path, size_t size) {
  uint64_t s = 0x2545F4914F6CDD1Dull;
  auto next = [&s] {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    return s;
  };
  std::vector<std::string> words(4096);
  for (auto& w : words) {
    size_t len = 3 + next() % 10;
    for (size_t i = 0; i < len; i++) w.push_back(static_cast<char>(next() & 0xff));
  }
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  std::string chunk;
  size_t written = 0;
  while (written < size) {
    chunk.clear();
    while (chunk.size() < (1u << 20)) chunk += words[next() % words.size()];
    size_t n = std::min(chunk.size(), size - written);
    out.write(chunk.data(), static_cast<std::streamsize>(n));
    written += n;
  }
}

TEST_F(RealPrograms, ZstdMultiThreadedMidCompression) {
  if (!fs::exists(kZstd)) GTEST_SKIP() << kZstd << " is not installed";
  std::string input = *temp_ / "input.bin";
  WriteTestInput(input, 200u << 20);

  std::string plain = *temp_ / "plain";
  fs::create_directories(plain);
  WriteFile(plain + "/stdin", "");
  pid_t ref = SpawnProgram({kZstd, "-q", "-T2", "-9", "-c", input}, plain + "/stdin", plain + "/out.zst", plain + "/stderr");
  Track(ref, kZstd);
  Ending ref_end = WaitGone(ref, 120s);
  ASSERT_TRUE(ref_end.ExitedWith(0)) << "zstd " << ref_end.Describe() << ": " << ReadFile(plain + "/stderr");
  uintmax_t final_size = fs::file_size(plain + "/out.zst");

  std::string dir = *temp_ / "work";
  fs::create_directories(dir);
  WriteFile(dir + "/stdin", "");
  std::string out = dir + "/out.zst";
  pid_t pid = SpawnProgram({kZstd, "-q", "-T2", "-9", "-c", input}, dir + "/stdin", out, dir + "/stderr");
  ASSERT_GT(pid, 0);
  Track(pid, kZstd);
  // Mid-way: the worker threads exist and some output has been written.
  int threads = 0;
  auto deadline = std::chrono::steady_clock::now() + 20s;
  while (std::chrono::steady_clock::now() < deadline && IsAlive(pid)) {
    threads = ThreadCount(pid);
    struct stat st;
    if (threads > 1 && ::stat(out.c_str(), &st) == 0 && st.st_size > 0) break;
    std::this_thread::sleep_for(5ms);
  }
  ASSERT_TRUE(IsAlive(pid)) << "zstd finished before it could be checkpointed";
  ASSERT_GT(threads, 1) << "zstd -T2 should be running worker threads";
  uintmax_t size_at_dump = fs::file_size(out);
  ASSERT_LT(size_at_dump, final_size) << "zstd had already written everything";

  ASSERT_TRUE(DumpRestoreFinish(pid, *temp_ / "ckpt", dir));
  EXPECT_EQ(fs::file_size(out), final_size);
  EXPECT_TRUE(ReadFile(out) == ReadFile(plain + "/out.zst")) << "restored zstd wrote different bytes";
}

// ---- Process trees: python3 multiprocessing (fork start method), checkpointed with `dump --tree`
// while its worker processes compute. The results must be exactly those of an uninterrupted run.

// Pool(2) maps a hash chain over 16 tasks while a separate Process sends 4 more results through a
// one-way multiprocessing.Pipe (os.pipe underneath; a duplex Pipe would be a socketpair). The Pool's
// queues are pipes too, guarded by multiprocessing Locks: POSIX semaphores in /dev/shm, mapped shared
// by every process of the tree.
constexpr char kPythonPoolScript[] = R"(
import hashlib, multiprocessing as mp, os, sys

def chain(args):
    i, rounds = args
    h = hashlib.sha256(b"cairn-%d" % i).digest()
    for _ in range(rounds):
        h = hashlib.sha256(h).digest()
    return i, h.hex()

def producer(conn, n, rounds):
    for i in range(n):
        conn.send(chain((1000 + i, rounds)))
    conn.close()

if __name__ == "__main__":
    mp.set_start_method("fork")
    out, tasks, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    r, w = mp.Pipe(duplex=False)
    p = mp.Process(target=producer, args=(w, 4, rounds))
    p.start()
    w.close()
    with mp.Pool(2) as pool:
        results = pool.map(chain, [(i, rounds) for i in range(tasks)], chunksize=1)
    piped = [r.recv() for _ in range(4)]
    p.join()
    with open(out + ".tmp", "w") as f:
        for i, h in results + piped:
            f.write("%d %s\n" % (i, h))
        f.write("producer exit code %s\n" % p.exitcode)
    os.rename(out + ".tmp", out)
    print("done")
)";

// Two Processes, each sending its share of the results through its own one-way Pipe; no Pool, so no
// semaphores: only processes, pipes and regular files.
constexpr char kPythonProcessesScript[] = R"(
import hashlib, multiprocessing as mp, os, sys

def chain(i, rounds):
    h = hashlib.sha256(b"cairn-%d" % i).digest()
    for _ in range(rounds):
        h = hashlib.sha256(h).digest()
    return h.hex()

def worker(conn, ids, rounds):
    for i in ids:
        conn.send((i, chain(i, rounds)))
    conn.close()

if __name__ == "__main__":
    mp.set_start_method("fork")
    out, tasks, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    procs, conns = [], []
    for k in range(2):
        r, w = mp.Pipe(duplex=False)
        p = mp.Process(target=worker, args=(w, range(k, tasks, 2), rounds))
        p.start()
        w.close()
        procs.append(p)
        conns.append(r)
    results = []
    for r in conns:
        while True:
            try:
                results.append(r.recv())
            except EOFError:
                break
    for p in procs:
        p.join()
    with open(out + ".tmp", "w") as f:
        for i, h in sorted(results):
            f.write("%d %s\n" % (i, h))
        f.write("exit codes %s\n" % [p.exitcode for p in procs])
    os.rename(out + ".tmp", out)
    print("done")
)";

// Two Processes accumulate into multiprocessing shared memory: a sum and a count in an Array of
// its own lock (a deleted file in /dev/shm, the lock a POSIX semaphore), each task's digest in an
// anonymous mmap (MAP_SHARED|MAP_ANONYMOUS, inherited by fork) and its reverse in a
// shared_memory.SharedMemory (POSIX shm in /dev/shm, which starts the resource tracker, an exec'd
// python3, as a third child). Each worker, halfway through its tasks, creates OUT.half<k> and waits
// for GATE: the first half of the results then lives only in that shared memory, so the checkpoint
// is mid-computation by construction, however fast the machine; the result, written once the
// workers are done, depends on every byte of it.
constexpr char kPythonSharedMemoryScript[] = R"(
import hashlib, mmap, multiprocessing as mp, os, sys, time
from multiprocessing import shared_memory

def chain(i, rounds):
    h = hashlib.sha256(b"cairn-%d" % i).digest()
    for _ in range(rounds):
        h = hashlib.sha256(h).digest()
    return h

def worker(k, ids, rounds, acc, anon, shm, half, gate):
    for n, i in enumerate(ids):
        if n == len(ids) // 2:
            open(half + str(k), "w").close()
            while not os.path.exists(gate):
                time.sleep(0.01)
        h = chain(i, rounds)
        with acc.get_lock():
            acc[0] = (acc[0] + int.from_bytes(h[:8], "little")) % 2**64
            acc[1] += 1
        anon[32 * i:32 * i + 32] = h
        shm.buf[32 * i:32 * i + 32] = h[::-1]

if __name__ == "__main__":
    mp.set_start_method("fork")
    out, tasks, rounds, gate = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    acc = mp.Array("Q", 2)
    anon = mmap.mmap(-1, 32 * tasks)
    shm = shared_memory.SharedMemory(create=True, size=32 * tasks)
    procs = [mp.Process(target=worker, args=(k, range(k, tasks, 2), rounds, acc, anon, shm, out + ".half", gate))
             for k in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    with open(out + ".tmp", "w") as f:
        f.write("sum %d count %d\n" % (acc[0], acc[1]))
        for i in range(tasks):
            f.write("%d %s %s\n" % (i, anon[32 * i:32 * i + 32].hex(), bytes(shm.buf[32 * i:32 * i + 32]).hex()))
        f.write("exit codes %s\n" % [p.exitcode for p in procs])
    shm.close()
    shm.unlink()
    os.rename(out + ".tmp", out)
    print("done")
)";

// 16 tasks of this many rounds take about 1.5 s on two cores.
constexpr char kPythonTreeTasks[] = "16";
constexpr char kPythonTreeRounds[] = "400000";

class RealProgramTrees : public RealPrograms {
 protected:
  // Direct children of `pid` (from /proc/PID/task/PID/children; python's helper threads fork none).
  static std::vector<pid_t> Children(pid_t pid) {
    std::vector<pid_t> out;
    std::string text = ReadFile("/proc/" + std::to_string(pid) + "/task/" + std::to_string(pid) + "/children");
    size_t pos = 0;
    while (pos < text.size()) {
      size_t end = text.find(' ', pos);
      if (end == std::string::npos) end = text.size();
      if (end > pos) out.push_back(std::stoi(text.substr(pos, end - pos)));
      pos = end + 1;
    }
    return out;
  }

  // The pids `cairn inspect` lists for a checkpoint: the root and every "descendant process N".
  static std::vector<pid_t> CheckpointPids(const std::string& inspect_out) {
    std::vector<pid_t> out;
    for (const char* prefix : {"process ", "descendant process "}) {
      size_t pos = 0;
      while ((pos = inspect_out.find(prefix, pos)) != std::string::npos) {
        bool line_start = pos == 0 || inspect_out[pos - 1] == '\n';
        pos += strlen(prefix);
        if (line_start) out.push_back(std::stoi(inspect_out.substr(pos)));
      }
    }
    return out;
  }

  // Runs `script` to completion as a reference, then again, checkpointing the tree with --tree
  // (killing it) once `min_children` children compute, restoring it and letting it finish; the
  // result files must be identical. A `gated` script takes a GATE path as its last argument and
  // creates RESULT.half0 and RESULT.half1 once mid-computation, then waits for GATE: the checkpoint
  // is taken once both exist and GATE is created after the restore (at once in the reference run).
  void RoundTripTree(const char* script, size_t min_children, bool gated = false) {
    ASSERT_TRUE(fs::exists(kPython)) << kPython << " is required (scripts/install-deps.sh installs it)";
    const std::vector<std::string> env = {"PYTHONHASHSEED=0"};
    std::string plain = *temp_ / "plain";
    std::vector<std::string> plain_argv = {kPython, "-I", "-c", script, plain + "/result", kPythonTreeTasks, kPythonTreeRounds};
    if (gated) {
      fs::create_directories(plain);
      WriteFile(plain + "/gate", "");
      plain_argv.push_back(plain + "/gate");
    }
    ASSERT_TRUE(RunToEnd(plain_argv, plain, env));
    std::string expected = ReadFile(plain + "/result");
    ASSERT_FALSE(expected.empty());

    std::string dir = *temp_ / "work";
    fs::create_directories(dir);
    WriteFile(dir + "/stdin", "");
    std::vector<std::string> argv = {kPython, "-I", "-c", script, dir + "/result", kPythonTreeTasks, kPythonTreeRounds};
    if (gated) argv.push_back(dir + "/gate");
    pid_t pid = SpawnProgram(argv, dir + "/stdin", dir + "/stdout", dir + "/stderr", env);
    ASSERT_GT(pid, 0);
    Track(pid, kPython);
    auto deadline = std::chrono::steady_clock::now() + (gated ? 60s : 10s);
    auto started = [&] {
      if (Children(pid).size() < min_children) return false;
      return !gated || (Exists(dir + "/result.half0") && Exists(dir + "/result.half1"));
    };
    while (!started() && IsAlive(pid) && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(5ms);
    }
    std::vector<pid_t> children = Children(pid);
    for (pid_t c : children) Track(c, kPython);
    ASSERT_GE(children.size(), min_children) << "python3 did not start its workers: " << ReadFile(dir + "/stderr");
    if (gated) {
      ASSERT_TRUE(started()) << "python3's workers did not get halfway in 60 s: " << ReadFile(dir + "/stderr");
    } else {
      std::this_thread::sleep_for(500ms);  // into the computation
    }
    ASSERT_TRUE(IsAlive(pid)) << "python3 ended early: " << ReadFile(dir + "/stderr");
    ASSERT_FALSE(Exists(dir + "/result")) << "python3 already finished; the checkpoint would not be mid-computation";

    std::string ckpt = *temp_ / "ckpt";
    CommandResult dump = Cairn({"dump", "--pid", std::to_string(pid), "--tree", "--dir", ckpt}, WithTimeout(60s));
    ASSERT_TRUE(dump.Exited(0)) << "cairn dump --tree of python3 multiprocessing failed " << dump.Describe();
    CommandResult inspect = Inspect(ckpt);
    ASSERT_TRUE(inspect.Exited(0)) << inspect.Describe();
    std::vector<pid_t> pids = CheckpointPids(inspect.out);
    ASSERT_GT(pids.size(), min_children) << "the checkpoint lacks the workers:\n" << inspect.out;
    // The killed tree is re-parented to this process (the subreaper): reap it so its pids are free.
    for (pid_t p : pids) {
      Ending end = WaitGone(p, 10s);
      ASSERT_TRUE(end.gone) << "pid " << p << " survived cairn dump";
    }
    CommandResult restore = Restore(ckpt, /*detach=*/true, WithTimeout(120s));
    ASSERT_TRUE(restore.Exited(0)) << "cairn restore failed " << restore.Describe();
    if (gated) {
      std::this_thread::sleep_for(100ms);
      ASSERT_FALSE(Exists(dir + "/result")) << "the restored python3 wrote its result before the gate opened";
      WriteFile(dir + "/gate", "");
    }
    Ending end = WaitGone(pid, 60s);
    ASSERT_TRUE(end.gone) << "restored python3 did not finish in 60 s";
    if (end.status) {
      EXPECT_TRUE(end.ExitedWith(0)) << end.Describe() << "; stderr: " << ReadFile(dir + "/stderr");
    }
    EXPECT_EQ(ReadFile(dir + "/result"), expected);
    EXPECT_EQ(ReadFile(dir + "/stdout"), "done\n");
    for (pid_t p : pids) EXPECT_TRUE(WaitGone(p, 10s).gone) << "pid " << p << " of the restored tree is left behind";
  }
};

TEST_F(RealProgramTrees, Python3MultiprocessingPoolAndPipeMidComputation) {
  // The producer Process and the Pool's two workers.
  RoundTripTree(kPythonPoolScript, 3);
}

TEST_F(RealProgramTrees, Python3MultiprocessingProcessesAndPipesMidComputation) {
  RoundTripTree(kPythonProcessesScript, 2);
}

TEST_F(RealProgramTrees, Python3MultiprocessingSharedMemoryMidComputation) {
  // The two workers and the shared_memory resource tracker.
  RoundTripTree(kPythonSharedMemoryScript, 3, /*gated=*/true);
}

// redis-server (threads, epoll, a listening TCP socket, pipes) holding 1,000 keys written by a
// client before the checkpoint. After the restore it must answer on the same port with the same
// data, and accept new clients that read and change it, exactly as the uninterrupted server would.
class RealRedis : public RealPrograms {
 public:


 protected:
  // `redis-cli -p PORT args...`: its stdout without the trailing newline, or "ERROR: ..." if it failed.
  std::string Cli(int port, std::vector<std::string> args) {
    std::vector<std::string> argv = {kRedisCli, "-h", "127.0.0.1", "-p", std::to_string(port)};
    argv.insert(argv.end(), args.begin(), args.end());
    CommandResult r = RunCommand(argv, temp_->path(), WithTimeout(10s));
    if (!r.Exited(0)) return "ERROR: " + r.Describe();
    std::string out = r.out;
    while (!out.empty() && out.back() == '\n') out.pop_back();
    return out;
  }

  // The number of sockets `pid` holds (its listener, plus one per connected client).
  static int Sockets(pid_t pid) {
    int n = 0;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator("/proc/" + std::to_string(pid) + "/fd", ec)) {
      std::error_code lec;
      if (fs::read_symlink(e.path(), lec).string().rfind("socket:", 0) == 0) ++n;
    }
    return n;
  }
};

TEST_F(RealRedis, ServesTheSameDataOnTheSamePortAfterRestore) {
  if (!fs::exists(kRedisServer) || !fs::exists(kRedisCli)) {
    GTEST_SKIP() << kRedisServer << " or " << kRedisCli << " is not installed (scripts/install-deps.sh installs them)";
  }
  int port = FreeLoopbackPort();
  ASSERT_GT(port, 0);
  std::string dir = *temp_ / "redis";
  fs::create_directories(dir);
  WriteFile(dir + "/stdin", "");
  pid_t pid = SpawnProgram({kRedisServer, "--port", std::to_string(port), "--bind", "127.0.0.1", "--save", "",
                            "--appendonly", "no", "--dir", dir, "--daemonize", "no", "--protected-mode", "no"},
                           dir + "/stdin", dir + "/stdout", dir + "/stderr");
  ASSERT_GT(pid, 0);
  Track(pid, kRedisServer);
  auto deadline = std::chrono::steady_clock::now() + 10s;
  while (Cli(port, {"PING"}) != "PONG" && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(20ms);
  }
  ASSERT_EQ(Cli(port, {"PING"}), "PONG") << "redis-server did not start: " << ReadFile(dir + "/stdout");
  // Its own sockets (the listener) without clients: the PING's connection may still be open for
  // a moment, so the fewest seen over a short while.
  int idle_sockets = Sockets(pid);
  for (int i = 0; i < 30; ++i) {
    std::this_thread::sleep_for(10ms);
    idle_sockets = std::min(idle_sockets, Sockets(pid));
  }
  ASSERT_EQ(Cli(port, {"EVAL", "for i=1,1000 do redis.call('SET','key:'..i,'value:'..i) end return 1", "0"}), "1");
  ASSERT_EQ(Cli(port, {"SET", "counter", "41"}), "OK");
  ASSERT_EQ(Cli(port, {"DBSIZE"}), "1001");
  // The clients are gone once redis has closed their connections.
  deadline = std::chrono::steady_clock::now() + 5s;
  while (Sockets(pid) != idle_sockets && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(10ms);
  }
  ASSERT_EQ(Sockets(pid), idle_sockets) << "redis still holds client connections";

  std::string ckpt = *temp_ / "ckpt";
  ASSERT_TRUE(DumpRestoreStart(pid, ckpt));
  EXPECT_EQ(Cli(port, {"DBSIZE"}), "1001");
  EXPECT_EQ(Cli(port, {"GET", "key:500"}), "value:500");
  EXPECT_EQ(Cli(port, {"INCR", "counter"}), "42");
  EXPECT_EQ(Cli(port, {"SET", "after", "restore"}), "OK");
  EXPECT_EQ(Cli(port, {"EVAL", "local n=0 for i=1,1000 do n=n+#redis.call('GET','key:'..i) end return n", "0"}),
            "8893");
  EXPECT_EQ(Cli(port, {"DBSIZE"}), "1002");
  Cli(port, {"SHUTDOWN", "NOSAVE"});
  Ending end = WaitGone(pid, 10s);
  EXPECT_TRUE(end.gone) << "the restored redis-server did not shut down";
}

// nginx as it is usually run: a root master and two workers that run as nobody, serving a file.
// The tree is checkpointed (killed) and restored; the restored nginx serves the same file on the
// same port, with two workers again.
TEST_F(RealPrograms, NginxMasterAndWorkersServeAfterRestore) {
  if (!fs::exists(kNginx) || !fs::exists(kCurl)) {
    GTEST_SKIP() << kNginx << " or " << kCurl << " is not installed (scripts/install-deps.sh installs them)";
  }
  int port = FreeLoopbackPort();
  ASSERT_GT(port, 0);
  std::string dir = *temp_ / "nginx";
  fs::create_directories(dir + "/www");
  fs::create_directories(dir + "/logs");
  // The workers (nobody) must reach the file.
  for (fs::path p = dir + "/www"; p.string().size() > 1; p = p.parent_path()) {
    if (p == fs::path("/tmp")) break;
    fs::permissions(p, fs::perms::others_exec | fs::perms::others_read, fs::perm_options::add);
  }
  std::string body;
  for (int i = 0; i < 2000; ++i) body += "line " + std::to_string(i) + " of the file nginx serves\n";
  WriteFile(dir + "/www/file.txt", body);
  fs::permissions(dir + "/www/file.txt", fs::perms::others_read, fs::perm_options::add);
  WriteFile(dir + "/nginx.conf",
            "daemon off;\nmaster_process on;\nworker_processes 2;\npid " + dir + "/nginx.pid;\nerror_log " + dir +
                "/logs/error.log;\nevents { worker_connections 64; }\nhttp {\n  access_log off;\n"
                "  client_body_temp_path " + dir + "/body;\n  server {\n    listen 127.0.0.1:" + std::to_string(port) +
                ";\n    root " + dir + "/www;\n  }\n}\n");
  WriteFile(dir + "/stdin", "");
  pid_t pid = SpawnProgram({kNginx, "-p", dir, "-c", dir + "/nginx.conf"}, dir + "/stdin", dir + "/stdout",
                           dir + "/stderr");
  ASSERT_GT(pid, 0);
  Track(pid, kNginx);
  std::string url = "http://127.0.0.1:" + std::to_string(port) + "/file.txt";
  auto get = [&] {
    CommandResult r = RunCommand({kCurl, "-s", "--max-time", "5", url}, temp_->path(), WithTimeout(10s));
    return r.Exited(0) ? r.out : "ERROR: " + r.Describe();
  };
  auto workers = [&] {  // the master's children
    std::vector<pid_t> out;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator("/proc", ec)) {
      auto st = ReadFile(e.path().string() + "/stat");
      size_t close = st.rfind(')');
      if (close != std::string::npos && st.find(" " + std::to_string(pid) + " ", close) == close + 3) {
        out.push_back(std::atoi(e.path().filename().c_str()));
      }
    }
    return out;
  };
  auto deadline = std::chrono::steady_clock::now() + 10s;
  while (get() != body && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(50ms);
  ASSERT_EQ(get(), body) << "nginx did not serve: " << ReadFile(dir + "/logs/error.log") << ReadFile(dir + "/stderr");
  std::vector<pid_t> before = workers();
  ASSERT_EQ(before.size(), 2u);

  std::string ckpt = *temp_ / "ckpt";
  CommandResult dump = Cairn({"dump", "--tree", "--pid", std::to_string(pid), "--dir", ckpt}, WithTimeout(60s));
  ASSERT_TRUE(dump.Exited(0)) << dump.Describe();
  ASSERT_TRUE(WaitGone(pid, 10s).gone);
  for (pid_t w : before) ASSERT_TRUE(WaitGone(w, 10s).gone);  // re-parented to us: reaped, their pids free
  CommandResult restore = Restore(ckpt, /*detach=*/true, WithTimeout(60s));
  ASSERT_TRUE(restore.Exited(0)) << restore.Describe();
  EXPECT_EQ(workers(), before) << "the restored master does not have its two workers";
  for (int i = 0; i < 5; ++i) EXPECT_EQ(get(), body) << "request " << i << " after the restore";
  ::kill(pid, SIGQUIT);
  EXPECT_TRUE(WaitGone(pid, 10s).gone) << "the restored nginx did not stop on SIGQUIT";
}

// A tmux session running a shell: the tmux server holds the pseudo-terminal's master, the shell
// runs on its slave as its controlling terminal. Both are checkpointed (killed) and restored; the
// pane shows the same screen, the shell keeps its variables and runs new commands, and Ctrl-C
// (the terminal's signal to its foreground group) still interrupts what it runs.
TEST_F(RealPrograms, TmuxSessionWithAShellComesBack) {
  if (!fs::exists(kTmux)) GTEST_SKIP() << kTmux << " is not installed (scripts/install-deps.sh installs it)";
  std::string sock = *temp_ / "tmux.sock";
  const CommandOptions env = WithEnv({"TERM=xterm"});
  auto tmux = [&](std::vector<std::string> args) {
    std::vector<std::string> argv = {kTmux, "-S", sock};
    argv.insert(argv.end(), args.begin(), args.end());
    CommandResult r = RunCommand(argv, temp_->path(), env);
    return r.Exited(0) ? r.out : "ERROR: " + r.Describe();
  };
  auto screen_has = [&](const std::string& text) {
    auto deadline = std::chrono::steady_clock::now() + 10s;
    while (std::chrono::steady_clock::now() < deadline) {
      if (tmux({"capture-pane", "-p", "-t", "t"}).find(text) != std::string::npos) return true;
      std::this_thread::sleep_for(50ms);
    }
    return false;
  };
  ASSERT_EQ(tmux({"new-session", "-d", "-s", "t", "-x", "100", "-y", "30", "bash --norc --noprofile"}), "");
  std::string server_text = tmux({"display", "-p", "#{pid}"});
  pid_t server = std::atoi(server_text.c_str());
  ASSERT_GT(server, 0) << server_text;
  Track(server, kTmux);
  tmux({"send-keys", "-t", "t", "X=41; echo hello-$X", "Enter"});
  ASSERT_TRUE(screen_has("hello-41")) << tmux({"capture-pane", "-p", "-t", "t"});
  std::this_thread::sleep_for(200ms);  // the prompt after the output
  std::string screen = tmux({"capture-pane", "-p", "-t", "t"});
  std::vector<pid_t> shells;
  for (const auto& e : fs::directory_iterator("/proc")) {
    std::string st = ReadFile(e.path().string() + "/stat");
    size_t close = st.rfind(')');
    if (close != std::string::npos && st.find(" " + std::to_string(server) + " ", close) == close + 3) {
      shells.push_back(std::atoi(e.path().filename().c_str()));
    }
  }
  ASSERT_EQ(shells.size(), 1u) << "the tmux server should have one shell";

  std::string ckpt = *temp_ / "ckpt";
  CommandResult dump = Cairn({"dump", "--tree", "--pid", std::to_string(server), "--dir", ckpt}, WithTimeout(60s));
  ASSERT_TRUE(dump.Exited(0)) << dump.Describe();
  ASSERT_TRUE(WaitGone(server, 10s).gone);
  ASSERT_TRUE(WaitGone(shells[0], 10s).gone);
  CommandResult restore = Restore(ckpt, /*detach=*/true, WithTimeout(60s));
  ASSERT_TRUE(restore.Exited(0)) << restore.Describe();

  EXPECT_EQ(tmux({"capture-pane", "-p", "-t", "t"}), screen) << "the pane shows another screen after the restore";
  tmux({"send-keys", "-t", "t", "echo again-$((X+1))", "Enter"});
  EXPECT_TRUE(screen_has("again-42")) << tmux({"capture-pane", "-p", "-t", "t"});
  tmux({"send-keys", "-t", "t", "sleep 600; echo not-interrupted", "Enter"});
  std::this_thread::sleep_for(300ms);
  tmux({"send-keys", "-t", "t", "C-c"});
  tmux({"send-keys", "-t", "t", "echo interrupted-$X", "Enter"});
  EXPECT_TRUE(screen_has("interrupted-41")) << "Ctrl-C did not reach the shell's foreground job: "
                                            << tmux({"capture-pane", "-p", "-t", "t"});
  tmux({"kill-server"});
  EXPECT_TRUE(WaitGone(server, 10s).gone);
}

// A Go program (Debian's golang, built here from source): goroutines fanning work out and in
// over channels, paced by a time.Ticker, the Go runtime's own threads, timers and netpoller.
// Checkpointed mid-way, killed and restored, it must finish with the uninterrupted run's result.
constexpr char kGoMain[] = R"(package main

import (
	"fmt"
	"os"
	"sync"
	"time"
)

func main() {
	var steps int
	fmt.Sscan(os.Args[1], &steps)
	gen, squares, out := make(chan uint64, 4), make(chan uint64, 4), make(chan uint64, 4)
	ticker := time.NewTicker(50 * time.Millisecond)
	go func() {
		for i := 0; i < steps; i++ {
			<-ticker.C
			gen <- uint64(i)
		}
		close(gen)
	}()
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for v := range gen {
				x := v*v + 7
				for k := 0; k < 20000; k++ {
					x = x*6364136223846793005 + 1442695040888963407
				}
				squares <- x ^ v
			}
		}()
	}
	go func() { wg.Wait(); close(squares) }()
	go func() {
		for v := range squares {
			out <- v
		}
		close(out)
	}()
	var sum uint64
	n := 0
	for v := range out {
		sum += v
		n++
		if n%10 == 0 {
			fmt.Printf("progress %d\n", n)
		}
	}
	fmt.Printf("RESULT n=%d sum=%d\n", n, sum)
}
)";

TEST_F(RealPrograms, GoProgramWithGoroutinesAndTimers) {
  if (!fs::exists(kGo)) GTEST_SKIP() << kGo << " is not installed (scripts/install-deps.sh installs golang-go)";
  std::string src = *temp_ / "main.go", prog = *temp_ / "goprog";
  WriteFile(src, kGoMain);
  CommandOptions go_env = WithEnv({"GOCACHE=/var/tmp/cairn-test-gocache", "HOME=" + temp_->path(), "GO111MODULE=off",
                                   "GOFLAGS=", "CGO_ENABLED=0"});
  go_env.timeout = 300s;
  CommandResult build = RunCommand({kGo, "build", "-o", prog, src}, temp_->path(), go_env);
  ASSERT_TRUE(build.Exited(0)) << build.Describe();
  const std::string steps = "80";  // 4 s at one step per 50 ms
  std::string plain = *temp_ / "plain";
  ASSERT_TRUE(RunToEnd({prog, steps}, plain));
  std::string expected = LineStartingWith(ReadFile(plain + "/stdout"), "RESULT ");
  ASSERT_NE(expected, "");

  std::string dir = *temp_ / "work";
  fs::create_directories(dir);
  WriteFile(dir + "/stdin", "");
  pid_t pid = SpawnProgram({prog, steps}, dir + "/stdin", dir + "/stdout", dir + "/stderr");
  ASSERT_GT(pid, 0);
  Track(pid, prog);
  auto deadline = std::chrono::steady_clock::now() + 20s;
  while (ReadFile(dir + "/stdout").find("progress 20") == std::string::npos && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(20ms);
  }
  ASSERT_NE(ReadFile(dir + "/stdout").find("progress 20"), std::string::npos) << ReadFile(dir + "/stderr");
  ASSERT_EQ(LineStartingWith(ReadFile(dir + "/stdout"), "RESULT "), "") << "finished before the checkpoint";
  ASSERT_TRUE(DumpRestoreFinish(pid, *temp_ / "ckpt", dir));
  EXPECT_EQ(LineStartingWith(ReadFile(dir + "/stdout"), "RESULT "), expected);
}

}  // namespace
}  // namespace cairn::testing
