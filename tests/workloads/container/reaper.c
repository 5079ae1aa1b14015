// A pod's first process, as Kubernetes' pause container is (tests/integration/container_test.cc):
// the init of a PID namespace other containers join, which does nothing but reap the children
// that namespace hands it, at once.
#include <signal.h>
#include <stddef.h>
#include <sys/wait.h>

static void on_child(int sig) { (void)sig; }

int main(void) {
  struct sigaction sa = {.sa_handler = on_child};
  sigaction(SIGCHLD, &sa, NULL);
  sigset_t chld, rest;
  sigemptyset(&chld);
  sigaddset(&chld, SIGCHLD);
  sigprocmask(SIG_BLOCK, &chld, &rest);
  for (;;) {
    while (waitpid(-1, NULL, WNOHANG) > 0) {
    }
    sigsuspend(&rest);  // until the next child ends (blocked between: none is missed)
  }
}
