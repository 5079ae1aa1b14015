#include "integrations/slurm/scontrol.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/unique_fd.h"

extern char** environ;

namespace cairn::slurm {

absl::StatusOr<std::string> Scontrol(const std::vector<std::string>& args, int timeout_s) {
  std::vector<std::string> all = {"scontrol"};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  int out[2], err[2];
  if (::pipe2(out, O_CLOEXEC) != 0) return absl::InternalError(absl::StrCat("pipe: ", std::strerror(errno)));
  if (::pipe2(err, O_CLOEXEC) != 0) {
    ::close(out[0]);
    ::close(out[1]);
    return absl::InternalError(absl::StrCat("pipe: ", std::strerror(errno)));
  }
  UniqueFd out_r(out[0]), out_w(out[1]), err_r(err[0]), err_w(err[1]);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, out_w.get(), 1);
  posix_spawn_file_actions_adddup2(&fa, err_w.get(), 2);
  // Not the caller's blocked signals (the agent blocks SLURM's for its signalfd).
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK);
  pid_t pid = 0;
  int rc = ::posix_spawnp(&pid, "scontrol", &fa, &attr, argv.data(), environ);
  posix_spawnattr_destroy(&attr);
  posix_spawn_file_actions_destroy(&fa);
  out_w.Reset();
  err_w.Reset();
  std::string what = absl::StrJoin(all, " ");
  if (rc != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(what, ": ", std::strerror(rc), " (is SLURM's scontrol on PATH? apt install slurm-client)"));
  }
  // scontrol says little: both pipes read as they come, until both end or the time is up (then
  // it is killed).
  std::string o, e;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s > 0 ? timeout_s : 3600);
  bool timed_out = false;
  for (bool out_open = true, err_open = true; out_open || err_open;) {
    pollfd fds[2] = {{out_open ? out_r.get() : -1, POLLIN, 0}, {err_open ? err_r.get() : -1, POLLIN, 0}};
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      timed_out = true;
      ::kill(pid, SIGKILL);
      break;
    }
    int n = ::poll(fds, 2, static_cast<int>(left.count()));
    if (n < 0 && errno != EINTR) break;
    for (int i = 0; i < 2 && n > 0; ++i) {
      if (fds[i].revents == 0) continue;
      char buf[4096];
      ssize_t r = ::read(fds[i].fd, buf, sizeof buf);
      if (r > 0) {
        (i == 0 ? o : e).append(buf, static_cast<size_t>(r));
      } else if (r == 0 || errno != EINTR) {
        (i == 0 ? out_open : err_open) = false;
      }
    }
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (timed_out) return absl::DeadlineExceededError(absl::StrCat(what, ": no answer within ", timeout_s, " s"));
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return absl::FailedPreconditionError(absl::StrCat(what, ": ", absl::StripAsciiWhitespace(e.empty() ? o : e)));
  }
  return o;
}

absl::StatusOr<std::map<std::string, std::string>> ScontrolShow(const std::string& what, const std::string& id,
                                                                int timeout_s) {
  std::vector<std::string> args = {"-o", "show", what};
  if (!id.empty()) args.push_back(id);
  absl::StatusOr<std::string> out = Scontrol(args, timeout_s);
  if (!out.ok()) return out.status();
  std::map<std::string, std::string> fields;
  if (what == "config") {  // "Name   = value" lines
    for (absl::string_view line : absl::StrSplit(*out, '\n')) {
      size_t eq = line.find(" = ");
      if (eq == absl::string_view::npos) continue;
      fields.emplace(std::string(absl::StripAsciiWhitespace(line.substr(0, eq))),
                     std::string(absl::StripAsciiWhitespace(line.substr(eq + 3))));
    }
    return fields;
  }
  for (absl::string_view kv : absl::StrSplit(*out, absl::ByAnyChar(" \n"), absl::SkipEmpty())) {
    size_t eq = kv.find('=');
    if (eq != absl::string_view::npos) fields[std::string(kv.substr(0, eq))] = std::string(kv.substr(eq + 1));
  }
  return fields;
}

}  // namespace cairn::slurm
