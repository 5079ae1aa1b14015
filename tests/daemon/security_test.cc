// Issue 21's security gaps, against real daemons: job names that are not safe identifiers and
// numbers that are not finite or not sane are refused by the CLI before it sends anything and by
// cairnd itself when they come straight through its gRPC API; job logs are private (as stat()
// sees them) for jobs started, restored and migrated in, and after a restart on files an older
// version left open; the metrics port answers only a scrape that carries the daemon's token.

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <limits>
#include <set>
#include <thread>

#include <grpcpp/grpcpp.h>

#include "daemon.grpc.pb.h"
#include "daemon_harness.h"

namespace cairn::testing {
namespace {

namespace fs = std::filesystem;
namespace dapi = cairn::daemon::api;
using nlohmann::json;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

class SecurityTest : public DaemonFixture {
 protected:
  // The mode bits of `path` as stat() gives them (-1 when it is not there).
  static int Mode(const std::string& path) {
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0) return -1;
    return static_cast<int>(st.st_mode & 07777);
  }

  // A gRPC stub on `d`'s unix socket: the API itself, with no CLI in front of it.
  static std::unique_ptr<dapi::Daemon::Stub> Stub(const DaemonProcess& d) {
    return dapi::Daemon::NewStub(grpc::CreateChannel("unix:" + d.socket(), grpc::InsecureChannelCredentials()));
  }
  static grpc::Status Run(dapi::Daemon::Stub& stub, const dapi::JobSpec& spec) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + 30s);
    dapi::RunJobRequest req;
    *req.mutable_spec() = spec;
    dapi::RunJobResponse resp;
    return stub.RunJob(&ctx, req, &resp);
  }
  static dapi::JobSpec Spec(const std::string& name) {
    dapi::JobSpec s;
    s.set_name(name);
    s.add_command("/bin/sleep");
    s.add_command("300");
    return s;
  }

  // `cairn ARGS` against a socket nothing listens on: a refusal here was made by the CLI itself,
  // before it tried to reach a daemon.
  CommandResult CliAlone(std::vector<std::string> args) {
    std::vector<std::string> argv = {CAIRN_BIN};
    auto dashes = std::find(args.begin(), args.end(), "--");
    args.insert(dashes, {"--socket", Dir() + "/nobody.sock"});
    argv.insert(argv.end(), args.begin(), args.end());
    return RunCommand(argv, Dir(), WithTimeout(30s));
  }

  // No job of `d` and nothing in its STATE/jobs but what `allowed` names.
  ::testing::AssertionResult NothingStarted(const DaemonProcess& d, const std::set<std::string>& allowed = {}) {
    json jobs = d.Json({"job", "list"})["jobs"];
    for (const json& j : jobs) {
      if (!allowed.count(j.value("name", ""))) return ::testing::AssertionFailure() << "job started: " << j.dump();
    }
    // A started job has its directory and the engine's record NODE.JOB.job there.
    for (const auto& e : fs::directory_iterator(d.state_dir() + "/jobs")) {
      std::string f = e.path().filename().string();
      std::string prefix = d.node() + ".", suffix = ".job";
      if (f.size() > prefix.size() + suffix.size() && f.compare(0, prefix.size(), prefix) == 0 &&
          f.compare(f.size() - suffix.size(), suffix.size(), suffix) == 0) {
        f = f.substr(prefix.size(), f.size() - prefix.size() - suffix.size());
      }
      if (!allowed.count(f)) return ::testing::AssertionFailure() << "left in the state directory: " << e.path();
    }
    return ::testing::AssertionSuccess();
  }
};

// Names an option parser or a path would take for something else are refused everywhere, with
// the bad name and the rule in the message; safe names still work.
TEST_F(SecurityTest, JobNamesMustBeSafeIdentifiers) {
  DaemonProcess a(Dir(), "node-a");
  ASSERT_TRUE(a.Start());
  const std::string rule = "1 to 64 letters, digits, '\\.', '_' or '-', the first a letter or digit";
  const std::vector<std::string> bad = {"-x", "--", "-", "--help", ".hidden", "..", "a/b", "a b", "x;y", "caf\xc3\xa9",
                                        std::string(65, 'a')};

  // The CLI refuses before it sends anything (nothing listens on its socket).
  for (const std::string& name : bad) {
    CommandResult r = CliAlone({"job", "run", "--name=" + name, "--", "/bin/true"});
    EXPECT_TRUE(r.FailedCleanly()) << name << ": " << r.Describe();
    EXPECT_TRUE(Matches(r.err, "invalid job name '")) << name << ": " << r.err;
    EXPECT_TRUE(Matches(r.err, rule)) << name << ": " << r.err;
    EXPECT_FALSE(Matches(r.err, "does not answer")) << "the CLI tried the daemon first: " << r.err;
  }
  // The daemon refuses the same names coming straight through its API.
  auto stub = Stub(a);
  for (const std::string& name : bad) {
    grpc::Status s = Run(*stub, Spec(name));
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << name << ": " << s.error_message();
    EXPECT_TRUE(Matches(s.error_message(), "invalid job name '")) << s.error_message();
    EXPECT_TRUE(Matches(s.error_message(), rule)) << s.error_message();
  }
  EXPECT_TRUE(Matches(Run(*stub, Spec("--")).error_message(), "invalid job name '--'"));
  // Restoring or importing under such a name is refused too.
  {
    grpc::ClientContext ctx;
    dapi::RestoreJobRequest req;
    req.set_name("-x");
    req.set_from(Dir() + "/store/-x/ck");
    dapi::RestoreJobResponse resp;
    grpc::Status s = stub->RestoreJob(&ctx, req, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  }
  EXPECT_TRUE(NothingStarted(a));

  // The engine's own `cairn run` (its registry and cgroup are named after the job).
  CommandResult engine = RunCommand({CAIRN_BIN, "run", "--name=--", "--dir", Dir() + "/run-dir", "--", "/bin/true"},
                                    Dir(), WithEnv({"CAIRN_STATE_DIR=" + Dir() + "/engine-state"}));
  EXPECT_TRUE(engine.FailedCleanly()) << engine.Describe();
  EXPECT_TRUE(Matches(engine.err, "invalid job name '--'")) << engine.err;
  EXPECT_FALSE(Exists(Dir() + "/run-dir"));

  // NODE.JOB names the job's cgroup: a name that fits the rule but not beside the node's name
  // is refused saying how long it may be; the longest that fits runs, as do digits first and
  // '.', '_', '-' inside.
  size_t room = 64 - a.node().size() - 1;
  CommandResult too_long = a.Cairn({"job", "run", "--name", std::string(room + 1, 'n'), "--", "/bin/true"});
  EXPECT_TRUE(too_long.FailedCleanly());
  EXPECT_TRUE(Matches(too_long.err, "too long for node .*at most " + std::to_string(room))) << too_long.err;
  for (const std::string& name : {std::string(room, 'n'), std::string("0day"), std::string("a.b_c-d")}) {
    CommandResult ok = a.Cairn({"job", "run", "--name", name, "--", "/bin/true"});
    EXPECT_TRUE(ok.Exited(0)) << name << ": " << ok.Describe();
  }
  EXPECT_TRUE(NothingStarted(a, {std::string(room, 'n'), "0day", "a.b_c-d"}));
}

// Every number a job carries must be finite and sane: the CLI says which field, the value and
// the range before it sends; the daemon refuses the same when it comes through the API, stores
// nothing and starts nothing; sane values are still taken as given.
TEST_F(SecurityTest, NonFiniteAndAbsurdNumbersAreRefused) {
  DaemonProcess a(Dir(), "node-a");
  ASSERT_TRUE(a.Start());
  struct Case {
    std::vector<std::string> args;
    std::string field;  // as the message names it
  };
  const std::vector<Case> cli = {
      {{"--cpus", "nan"}, "limits\\.cpus \\(--cpus\\) nan"},
      {{"--cpus", "inf"}, "limits\\.cpus \\(--cpus\\) inf"},
      {{"--cpus", "1e308"}, "limits\\.cpus \\(--cpus\\) 1e\\+308"},
      {{"--cpus", "-1"}, "limits\\.cpus \\(--cpus\\) -1"},
      {{"--cpus", "0.001"}, "limits\\.cpus \\(--cpus\\) 0\\.001"},
      {{"--memory", "2000T"}, "limits\\.memory_bytes \\(--memory\\) 2199023255552000"},
      {{"--checkpoint-every", "nan"}, "checkpoint\\.interval_s \\(--checkpoint-every\\) nan"},
      {{"--checkpoint-every", "Infinity"}, "checkpoint\\.interval_s \\(--checkpoint-every\\) inf"},
      {{"--checkpoint-every", "-5"}, "checkpoint\\.interval_s \\(--checkpoint-every\\) -5"},
      {{"--keep", "1000000"}, "checkpoint\\.keep_last \\(--keep\\) 1000000"},
      {{"--full-every", "5000"}, "checkpoint\\.full_every \\(--full-every\\) 5000"},
      {{"--hang-after", "inf"}, "health\\.hang_after_s \\(--hang-after\\) inf"},
      {{"--memory-pressure", "2"}, "health\\.memory_pressure_ratio \\(--memory-pressure\\) 2"},
      {{"--oom-horizon", "nan"}, "health\\.oom_horizon_s \\(--oom-horizon\\) nan"},
  };
  for (const Case& c : cli) {
    // --opt=value: a negative value is not taken for an option.
    std::vector<std::string> args = {"job", "run", "--name", "n", c.args[0] + "=" + c.args[1], "--", "/bin/true"};
    CommandResult r = CliAlone(args);
    EXPECT_TRUE(r.FailedCleanly()) << c.args[0] << " " << c.args[1] << ": " << r.Describe();
    EXPECT_TRUE(Matches(r.err, "job run: " + c.field + ": give a (finite|whole) number from ")) << r.err;
    EXPECT_FALSE(Matches(r.err, "does not answer")) << "the CLI tried the daemon first: " << r.err;
  }
  CommandResult restore = CliAlone({"job", "restore", "n", "--newest-stored", "--taken-before", "nan"});
  EXPECT_TRUE(Matches(restore.err, "taken_before \\(--taken-before, unix seconds\\) nan")) << restore.Describe();
  CommandResult migrate = CliAlone({"job", "migrate", "n", "--to", "b", "--restore-timeout", "inf"});
  EXPECT_TRUE(Matches(migrate.err, "restore_timeout_s \\(--restore-timeout\\) inf: give a finite number from 0\\.1 to 3600"))
      << migrate.Describe();

  // Straight through the API: the daemon is the authority.
  auto stub = Stub(a);
  struct ApiCase {
    std::function<void(dapi::JobSpec*)> set;
    std::string message;
  };
  const std::vector<ApiCase> api = {
      {[](dapi::JobSpec* s) { s->mutable_limits()->set_cpus(kNaN); }, "limits\\.cpus \\(--cpus\\) nan"},
      {[](dapi::JobSpec* s) { s->mutable_limits()->set_cpus(kInf); }, "limits\\.cpus \\(--cpus\\) inf"},
      {[](dapi::JobSpec* s) { s->mutable_limits()->set_cpus(-kInf); }, "limits\\.cpus \\(--cpus\\) -inf"},
      {[](dapi::JobSpec* s) { s->mutable_limits()->set_cpus(1e308); }, "limits\\.cpus \\(--cpus\\) 1e\\+308"},
      {[](dapi::JobSpec* s) { s->mutable_limits()->set_memory_bytes(int64_t{1} << 62); }, "limits\\.memory_bytes"},
      {[](dapi::JobSpec* s) { s->mutable_limits()->set_memory_bytes(-1); }, "limits\\.memory_bytes \\(--memory\\) -1"},
      {[](dapi::JobSpec* s) { s->mutable_checkpoint()->set_interval_s(kNaN); }, "checkpoint\\.interval_s .* nan"},
      {[](dapi::JobSpec* s) { s->mutable_checkpoint()->set_interval_s(kInf); }, "checkpoint\\.interval_s .* inf"},
      {[](dapi::JobSpec* s) { s->mutable_checkpoint()->set_interval_s(1e308); }, "checkpoint\\.interval_s .* 1e\\+308"},
      {[](dapi::JobSpec* s) { s->mutable_checkpoint()->set_keep_last(4000000000u); }, "checkpoint\\.keep_last"},
      {[](dapi::JobSpec* s) { s->mutable_health()->set_hang_after_s(kNaN); }, "health\\.hang_after_s .* nan"},
      {[](dapi::JobSpec* s) { s->mutable_health()->set_memory_pressure_ratio(kInf); }, "memory_pressure_ratio .* inf"},
      {[](dapi::JobSpec* s) { s->mutable_health()->set_oom_horizon_s(-kInf); }, "oom_horizon_s .* -inf"},
  };
  for (const ApiCase& c : api) {
    dapi::JobSpec spec = Spec("n");
    c.set(&spec);
    grpc::Status s = Run(*stub, spec);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << c.message << ": " << s.error_message();
    EXPECT_TRUE(Matches(s.error_message(), c.message)) << s.error_message();
    EXPECT_TRUE(Matches(s.error_message(), "give a (finite|whole) number from [-0-9.e+]+ to [0-9.e+]+"))
        << s.error_message();
  }
  {
    grpc::ClientContext ctx;
    dapi::RestoreJobRequest req;
    req.set_name("n");
    req.set_newest_stored(true);
    req.set_taken_before(kNaN);
    dapi::RestoreJobResponse resp;
    grpc::Status s = stub->RestoreJob(&ctx, req, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
    EXPECT_TRUE(Matches(s.error_message(), "taken_before .* nan")) << s.error_message();
  }
  {
    grpc::ClientContext ctx;
    dapi::MigrateJobRequest req;
    req.set_name("n");
    req.set_to("elsewhere");
    req.set_restore_timeout_s(kInf);
    dapi::MigrateJobResponse resp;
    grpc::Status s = stub->MigrateJob(&ctx, req, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
    EXPECT_TRUE(Matches(s.error_message(), "restore_timeout_s .* inf")) << s.error_message();
  }
  EXPECT_TRUE(NothingStarted(a));

  // Sane values are taken and stored as given, through the CLI and through the API.
  ASSERT_TRUE(a.Cairn({"job", "run", "--name", "fine", "--cpus", "0.5", "--memory", "64M", "--checkpoint-every", "3600",
                       "--oom-horizon=-1", "--", "/bin/sleep", "300"})
                  .Exited(0));
  json fine = Job(a, "fine")["spec"];
  EXPECT_EQ(fine["limits"]["cpus"], 0.5) << fine.dump();
  EXPECT_EQ(fine["checkpoint"]["interval_s"], 3600) << fine.dump();
  EXPECT_EQ(fine["health"]["oom_horizon_s"], -1) << fine.dump();
  dapi::JobSpec ok = Spec("api-fine");
  ok.mutable_limits()->set_cpus(2);
  ok.mutable_checkpoint()->set_interval_s(0.5);
  grpc::Status s = Run(*stub, ok);
  EXPECT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(Job(a, "api-fine")["spec"]["checkpoint"]["interval_s"], 0.5);
}

// Job logs are 0600 in a 0700 directory, as stat() sees them, even under umask 000: for a job
// started here, restored here, and migrated in; and a daemon started on files an older version
// left 0644/0755 makes them private again, leaving a planted symlink's target alone.
TEST_F(SecurityTest, JobLogsArePrivate) {
  // umask 000 while the daemons start: they and their jobs inherit it, so only the modes the
  // program asks for protect the files.
  struct Umask {
    mode_t old = ::umask(0);
    ~Umask() { ::umask(old); }
  };
  auto umask0 = std::make_unique<Umask>();
  std::string token_b = Token("token-b", "token-of-node-b-0123456789");
  std::string addr_b = "127.0.0.1:" + std::to_string(FreeTcpPort());
  DaemonProcess b(Dir(), "node-b", {"--listen", addr_b, "--token-file", token_b});
  DaemonProcess a(Dir(), "node-a",
                  {"--peer", b.node() + "=" + addr_b, "--peer-token-file", token_b, "--spool-dir", Dir() + "/spool"});
  ASSERT_TRUE(b.Start());
  ASSERT_TRUE(a.Start());
  umask0.reset();
  auto private_logs = [&](const DaemonProcess& d, const std::string& job) -> ::testing::AssertionResult {
    const std::string dir = d.state_dir() + "/jobs/" + job;
    for (const auto& [path, want] : std::vector<std::pair<std::string, int>>{
             {d.state_dir() + "/jobs", 0700}, {dir, 0700}, {dir + "/stdout.log", 0600}, {dir + "/stderr.log", 0600}}) {
      if (Mode(path) != want) {
        char modes[32];
        std::snprintf(modes, sizeof modes, "%o, not %o", Mode(path), want);
        return ::testing::AssertionFailure() << path << " is " << modes;
      }
    }
    return ::testing::AssertionSuccess();
  };
  const std::vector<std::string> talk = {"/bin/sh", "-c", "echo secret=hunter2; echo oops >&2; while true; do sleep 0.1; done"};
  std::vector<std::string> run = {"job", "run", "--name", "talk", "--"};
  run.insert(run.end(), talk.begin(), talk.end());
  ASSERT_TRUE(a.Cairn(run).Exited(0));
  ASSERT_TRUE(WaitFor([&] { return a.Cairn({"job", "logs", "talk"}).out == "secret=hunter2\n"; }, 10s));
  EXPECT_TRUE(private_logs(a, "talk"));

  // An older version's modes, and a symlink planted beside the jobs: tightened at start, the
  // link left alone (its target keeps its mode).
  a.Kill(SIGKILL);
  a.Wait();
  const std::string dir = a.state_dir() + "/jobs/talk";
  ASSERT_EQ(::chmod((a.state_dir() + "/jobs").c_str(), 0755), 0);
  ASSERT_EQ(::chmod(dir.c_str(), 0755), 0);
  ASSERT_EQ(::chmod((dir + "/stdout.log").c_str(), 0644), 0);
  ASSERT_EQ(::chmod((dir + "/stderr.log").c_str(), 0644), 0);
  WriteFile(Dir() + "/elsewhere.log", "not the daemon's\n");
  ASSERT_EQ(::chmod((Dir() + "/elsewhere.log").c_str(), 0644), 0);
  fs::create_directory(a.state_dir() + "/jobs/planted");
  fs::create_symlink(Dir() + "/elsewhere.log", a.state_dir() + "/jobs/planted/stdout.log");
  ASSERT_FALSE(private_logs(a, "talk"));
  ASSERT_TRUE(a.Start());
  EXPECT_TRUE(private_logs(a, "talk"));
  EXPECT_EQ(Mode(Dir() + "/elsewhere.log"), 0644) << "a symlink in the state directory was followed";
  EXPECT_EQ(Job(a, "talk")["state"], "running");  // adopted; its logs still written
  fs::remove_all(a.state_dir() + "/jobs/planted");

  // Restored: the logs are made private again before the job writes to them.
  ASSERT_EQ(a.Json({"job", "checkpoint", "talk", "--kill"})["checkpoint"]["state"], "complete");
  ASSERT_TRUE(WaitState(a, "talk", "killed"));
  ASSERT_EQ(::chmod((dir + "/stdout.log").c_str(), 0644), 0);
  ASSERT_TRUE(a.Cairn({"job", "restore", "talk"}).Exited(0)) << a.Log();
  EXPECT_TRUE(private_logs(a, "talk"));

  // Migrated in: the destination writes the logs it receives 0600 in a 0700 directory.
  CommandResult moved = a.Cairn({"job", "migrate", "talk", "--to", b.node()});
  ASSERT_TRUE(moved.Exited(0)) << moved.Describe() << a.Log() << b.Log();
  EXPECT_TRUE(private_logs(b, "talk"));
  EXPECT_EQ(b.Cairn({"job", "logs", "talk"}).out, "secret=hunter2\n");
}

// The metrics port answers nothing without the daemon's token, and everything with it; a daemon
// asked for metrics without a token does not start.
TEST_F(SecurityTest, MetricsNeedTheToken) {
  DaemonProcess none(Dir(), "node-n", {"--metrics-port", "0"});
  ::testing::AssertionResult started = none.Start(10s);
  EXPECT_FALSE(started);
  EXPECT_TRUE(Matches(started.message(), "--metrics-port needs --token-file")) << started.message();

  const std::string token = "metrics-token-0123456789";
  DaemonProcess a(Dir(), "node-a", {"--metrics-port", "0", "--token-file", Token("token", token)});
  ASSERT_TRUE(a.Start());
  ASSERT_GT(a.MetricsPort(), 0) << a.Log();
  std::string info = a.Cairn({"node", "info"}).out;
  EXPECT_TRUE(Matches(info, "metrics: http://127.0.0.1:" + std::to_string(a.MetricsPort()) + "/metrics")) << info;

  auto refused = [](const std::string& resp) -> ::testing::AssertionResult {
    if (!Matches(resp, "^HTTP/1.0 401 Unauthorized")) return ::testing::AssertionFailure() << "not 401: " << resp;
    if (!Matches(resp, "WWW-Authenticate: Bearer")) return ::testing::AssertionFailure() << "no challenge: " << resp;
    if (Matches(resp, "cairnd_")) return ::testing::AssertionFailure() << "metrics leaked: " << resp;
    return ::testing::AssertionSuccess();
  };
  const int port = a.MetricsPort();
  EXPECT_TRUE(refused(ScrapeMetrics(a)));                                  // no header
  EXPECT_TRUE(refused(ScrapeMetrics(a, "metrics-token-0123456788")));      // another token, same length
  EXPECT_TRUE(refused(ScrapeMetrics(a, token + "x")));                     // a longer one
  EXPECT_TRUE(refused(ScrapeMetrics(a, token.substr(0, 8))));              // its start
  EXPECT_TRUE(refused(HttpExchange(port, "GET /metrics HTTP/1.0\r\nAuthorization: Basic " + token + "\r\n\r\n")));
  EXPECT_TRUE(refused(HttpExchange(port, "GET /metrics HTTP/1.0\r\nX-Authorization: Bearer " + token + "\r\n\r\n")));
  EXPECT_TRUE(refused(HttpExchange(port, "GET / HTTP/1.0\r\n\r\n")));      // nothing said about other paths either

  std::string ok = ScrapeMetrics(a, token);
  EXPECT_TRUE(Matches(ok, "^HTTP/1.0 200 OK")) << ok;
  EXPECT_TRUE(Matches(ok, "\ncairnd_up\\{node=\"" + a.node() + "\"\\} 1")) << ok;
  // Header names and the scheme are case-insensitive (RFC 9110), as Prometheus and curl send them.
  std::string lower = HttpExchange(port, "GET /metrics HTTP/1.0\r\nauthorization: bearer " + token + "\r\n\r\n");
  EXPECT_TRUE(Matches(lower, "^HTTP/1.0 200 OK")) << lower;
  std::string other = HttpExchange(port, "GET /other HTTP/1.0\r\nAuthorization: Bearer " + token + "\r\n\r\n");
  EXPECT_TRUE(Matches(other, "^HTTP/1.0 404")) << other;
}

}  // namespace
}  // namespace cairn::testing
