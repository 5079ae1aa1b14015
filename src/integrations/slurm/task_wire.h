#pragma once
// What a SLURM task hands its cairn agent (src/integrations/slurm/spank_plugin.cc sends it,
// agent.cc receives it) over their socket pair: the task's command, environment, working
// directory and node name, with its stdout and stderr descriptors (SCM_RIGHTS). Also the
// --cairn=INTERVAL syntax both sides check. Header-only and libc-only: the plugin is loaded into
// SLURM's daemons and commands and links nothing else.
//
// Wire: "CRN1", a 32-bit length (host order: both ends are one machine), then NUL-ended fields:
// argc, argv..., envc, env..., workdir, node.
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <string>
#include <vector>

namespace cairn::slurm {

struct TaskRequest {
  std::vector<std::string> argv;
  std::vector<std::string> env;
  std::string workdir;
  std::string node;  // SLURMD_NODENAME: the SLURM node the task runs on
};

constexpr uint32_t kMaxTaskRequest = 16u << 20;

// "90", "90s", "10m", "2h" -> seconds (at least 1, at most a year).
inline bool ParseInterval(const char* text, double* seconds) {
  char* end = nullptr;
  errno = 0;
  double v = strtod(text, &end);
  if (end == text || errno != 0 || !(v > 0)) return false;
  double unit = 1;
  if (*end == 's') ++end;
  else if (*end == 'm') unit = 60, ++end;
  else if (*end == 'h') unit = 3600, ++end;
  if (*end != '\0') return false;
  *seconds = v * unit;
  return *seconds >= 1 && *seconds <= 365 * 86400.0;
}

inline bool SendTaskRequest(int fd, const TaskRequest& req, std::string* error) {
  std::string payload;
  auto put = [&](const std::string& s) {
    payload += s;
    payload.push_back('\0');
  };
  put(std::to_string(req.argv.size()));
  for (const std::string& a : req.argv) put(a);
  put(std::to_string(req.env.size()));
  for (const std::string& e : req.env) put(e);
  put(req.workdir);
  put(req.node);
  if (payload.size() > kMaxTaskRequest) {
    *error = "the task's command and environment exceed 16 MiB";
    return false;
  }
  std::string head = "CRN1";
  uint32_t n = static_cast<uint32_t>(payload.size());
  head.append(reinterpret_cast<const char*>(&n), sizeof n);
  // The header carries the task's stdout and stderr.
  int fds[2] = {1, 2};
  union {
    char buf[CMSG_SPACE(sizeof fds)];
    cmsghdr align;
  } control = {};
  iovec iov{head.data(), head.size()};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control.buf;
  msg.msg_controllen = sizeof control.buf;
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof fds);
  memcpy(CMSG_DATA(c), fds, sizeof fds);
  ssize_t w;
  do w = sendmsg(fd, &msg, MSG_NOSIGNAL);
  while (w < 0 && errno == EINTR);
  if (w != static_cast<ssize_t>(head.size())) {
    *error = std::string("send to the agent: ") + (w < 0 ? strerror(errno) : "short write");
    return false;
  }
  for (size_t off = 0; off < payload.size();) {
    w = send(fd, payload.data() + off, payload.size() - off, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      *error = std::string("send to the agent: ") + (w < 0 ? strerror(errno) : "closed");
      return false;
    }
    off += static_cast<size_t>(w);
  }
  return true;
}

// Reads one request; `out_fd`/`err_fd` get the task's stdout and stderr (owned by the caller).
inline bool ReceiveTaskRequest(int fd, TaskRequest* req, int* out_fd, int* err_fd, std::string* error) {
  char head[8];
  int fds[2] = {-1, -1};
  union {
    char buf[CMSG_SPACE(sizeof fds)];
    cmsghdr align;
  } control = {};
  iovec iov{head, sizeof head};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control.buf;
  msg.msg_controllen = sizeof control.buf;
  ssize_t r;
  do r = recvmsg(fd, &msg, MSG_CMSG_CLOEXEC | MSG_WAITALL);
  while (r < 0 && errno == EINTR);
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS && c->cmsg_len == CMSG_LEN(sizeof fds)) {
      memcpy(fds, CMSG_DATA(c), sizeof fds);
    }
  }
  *out_fd = fds[0];
  *err_fd = fds[1];
  if (r != static_cast<ssize_t>(sizeof head) || memcmp(head, "CRN1", 4) != 0 || fds[0] < 0 || fds[1] < 0) {
    *error = r == 0 ? "the task closed its channel before it said what to run" : "a malformed request from the task";
    return false;
  }
  uint32_t n = 0;
  memcpy(&n, head + 4, sizeof n);
  if (n > kMaxTaskRequest) {
    *error = "the task's request exceeds 16 MiB";
    return false;
  }
  std::string payload(n, '\0');
  for (size_t off = 0; off < n;) {
    r = recv(fd, payload.data() + off, n - off, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      *error = "the task closed its channel in the middle of its request";
      return false;
    }
    off += static_cast<size_t>(r);
  }
  size_t at = 0;
  auto next = [&](std::string* s) {
    size_t end = payload.find('\0', at);
    if (end == std::string::npos) return false;
    *s = payload.substr(at, end - at);
    at = end + 1;
    return true;
  };
  auto list = [&](std::vector<std::string>* v) {
    std::string count;
    if (!next(&count)) return false;
    char* end = nullptr;
    unsigned long k = strtoul(count.c_str(), &end, 10);
    // Each entry takes at least its NUL byte: no more of them than bytes left.
    if (count.empty() || *end != '\0' || k > payload.size() - at) return false;
    v->resize(k);
    for (std::string& s : *v) {
      if (!next(&s)) return false;
    }
    return true;
  };
  if (!list(&req->argv) || !list(&req->env) || !next(&req->workdir) || !next(&req->node) || req->argv.empty()) {
    *error = "a malformed request from the task";
    return false;
  }
  return true;
}

}  // namespace cairn::slurm
