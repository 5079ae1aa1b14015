#include "integrations/slurm/scontrol.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/unique_fd.h"

extern char** environ;

namespace cairn::slurm {

absl::StatusOr<std::string> Scontrol(const std::vector<std::string>& args) {
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
  // scontrol says little: read stdout, then stderr (neither fills a pipe meanwhile).
  auto drain = [](int fd) {
    std::string s;
    char buf[4096];
    for (;;) {
      ssize_t n = ::read(fd, buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      s.append(buf, static_cast<size_t>(n));
    }
    return s;
  };
  std::string o = drain(out_r.get()), e = drain(err_r.get());
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return absl::FailedPreconditionError(absl::StrCat(what, ": ", absl::StripAsciiWhitespace(e.empty() ? o : e)));
  }
  return o;
}

absl::StatusOr<std::map<std::string, std::string>> ScontrolShow(const std::string& what, const std::string& id) {
  std::vector<std::string> args = {"-o", "show", what};
  if (!id.empty()) args.push_back(id);
  absl::StatusOr<std::string> out = Scontrol(args);
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
    if (eq != absl::string_view::npos) fields.emplace(std::string(kv.substr(0, eq)), std::string(kv.substr(eq + 1)));
  }
  return fields;
}

}  // namespace cairn::slurm
