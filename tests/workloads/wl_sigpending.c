// Pending signals: while blocked, signals wait in two kinds of queue, one per process (kill, sigqueue)
// and one per thread (pthread_kill, pthread_sigqueue). Before the checkpoint the workload queues
// SIGUSR1 and two instances of SIGRTMIN+2 (values 42, 43) to the process, SIGRTMIN+3 (value 99) to the
// main thread, and SIGUSR2 plus SIGRTMIN+4 (value 7) to a second thread. After restore each must
// still be pending in the right queue (ShdPnd/SigPnd in /proc/self/task/TID/status), and on
// unblocking each must arrive once (realtime ones once per instance, in order) with its si_code,
// si_pid and si_value, in the right thread.
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "wl_common.h"

struct Received {
  int sig;
  int code;
  int value;
  pid_t pid;
  pid_t tid;
};

static struct Received g_received[32];
static int g_count;  // updated with atomics

static void OnSignal(int sig, siginfo_t* info, void* ctx) {
  (void)ctx;
  int i = __atomic_fetch_add(&g_count, 1, __ATOMIC_SEQ_CST);
  if (i >= 32) return;
  g_received[i].sig = sig;
  g_received[i].code = info->si_code;
  g_received[i].value = info->si_value.sival_int;
  g_received[i].pid = info->si_pid;
  g_received[i].tid = wl_gettid();
}

static int Sig(int which) {
  switch (which) {
    case 0: return SIGUSR1;
    case 1: return SIGRTMIN + 2;
    case 2: return SIGRTMIN + 3;
    case 3: return SIGUSR2;
    default: return SIGRTMIN + 4;
  }
}

static uint64_t Bit(int sig) { return 1ull << (sig - 1); }

// Reads the hex mask `field` ("SigPnd" or "ShdPnd") of thread `tid`.
static uint64_t PendingMask(pid_t tid, const char* field) {
  char path[64], buf[4096];
  snprintf(path, sizeof path, "/proc/self/task/%d/status", (int)tid);
  if (wl_read_file(path, buf, sizeof buf) < 0) wl_fail("read %s: %s", path, wl_errstr());
  char key[16];
  snprintf(key, sizeof key, "\n%s:", field);
  char* p = strstr(buf, key);
  if (!p) wl_fail("%s has no %s", path, field);
  return strtoull(p + strlen(key), NULL, 16);
}

static volatile int g_go;
static volatile int g_parked;
static volatile pid_t g_thread_tid;

static void BlockAll(void) {
  sigset_t set;
  sigemptyset(&set);
  for (int i = 0; i < 5; i++) sigaddset(&set, Sig(i));
  pthread_sigmask(SIG_BLOCK, &set, NULL);
}

static void* ThreadMain(void* arg) {
  (void)arg;
  g_thread_tid = wl_gettid();
  g_parked = 1;
  while (g_go != 2) wl_sleep_ms(5);
  sigset_t mine;
  sigemptyset(&mine);
  sigaddset(&mine, SIGUSR2);
  sigaddset(&mine, SIGRTMIN + 4);
  pthread_sigmask(SIG_UNBLOCK, &mine, NULL);  // SIGUSR1 and SIGRTMIN+2/3 stay blocked here
  return NULL;
}

static const struct Received* Find(int sig, int value, int nth) {
  for (int i = 0; i < g_count && i < 32; i++) {
    if (g_received[i].sig == sig && (value < 0 || g_received[i].value == value) && nth-- == 0) return &g_received[i];
  }
  return NULL;
}

static void Expect(int sig, int value, int code, pid_t tid, const char* what) {
  const struct Received* r = Find(sig, value, 0);
  if (!r) wl_fail("%s (signal %d) never arrived", what, sig);
  if (r->code != code) wl_fail("%s: si_code %d, want %d", what, r->code, code);
  if (r->pid != getpid()) wl_fail("%s: si_pid %d, want %d", what, (int)r->pid, (int)getpid());
  if (r->tid != tid) wl_fail("%s: handled by thread %d, want %d", what, (int)r->tid, (int)tid);
  if (Find(sig, value, 1)) wl_fail("%s arrived twice", what);
}

int main(int argc, char** argv) {
  wl_init(argc, argv);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = OnSignal;
  sa.sa_flags = SA_SIGINFO;
  for (int i = 0; i < 5; i++) WL_SYS(sigaction(Sig(i), &sa, NULL));
  BlockAll();  // inherited by the thread
  pthread_t thread;
  int rc = pthread_create(&thread, NULL, ThreadMain, NULL);
  WL_CHECK(rc == 0, "pthread_create: %s", strerror(rc));
  while (!g_parked) wl_sleep_ms(1);
  pid_t main_tid = wl_gettid();

  WL_SYS(kill(getpid(), SIGUSR1));
  WL_SYS(sigqueue(getpid(), SIGRTMIN + 2, (union sigval){.sival_int = 42}));
  WL_SYS(sigqueue(getpid(), SIGRTMIN + 2, (union sigval){.sival_int = 43}));
  rc = pthread_sigqueue(pthread_self(), SIGRTMIN + 3, (union sigval){.sival_int = 99});
  WL_CHECK(rc == 0, "pthread_sigqueue main: %s", strerror(rc));
  rc = pthread_kill(thread, SIGUSR2);
  WL_CHECK(rc == 0, "pthread_kill: %s", strerror(rc));
  rc = pthread_sigqueue(thread, SIGRTMIN + 4, (union sigval){.sival_int = 7});
  WL_CHECK(rc == 0, "pthread_sigqueue thread: %s", strerror(rc));

  const uint64_t shared_want = Bit(SIGUSR1) | Bit(SIGRTMIN + 2);
  const uint64_t main_want = Bit(SIGRTMIN + 3);
  const uint64_t thread_want = Bit(SIGUSR2) | Bit(SIGRTMIN + 4);
  WL_CHECK(PendingMask(main_tid, "ShdPnd") == shared_want, "process-wide pending set wrong before checkpoint");
  WL_CHECK(PendingMask(main_tid, "SigPnd") == main_want, "main thread pending set wrong before checkpoint");
  WL_CHECK(PendingMask(g_thread_tid, "SigPnd") == thread_want, "thread pending set wrong before checkpoint");

  wl_signal_ready();
  wl_wait_go();

  WL_CHECK(g_count == 0, "a blocked signal was delivered (%d)", g_received[0].sig);
  uint64_t shd = PendingMask(main_tid, "ShdPnd");
  uint64_t mpnd = PendingMask(main_tid, "SigPnd");
  uint64_t tpnd = PendingMask(g_thread_tid, "SigPnd");
  WL_CHECK(shd == shared_want, "process-wide pending %#llx, want %#llx", (unsigned long long)shd, (unsigned long long)shared_want);
  WL_CHECK(mpnd == main_want, "main thread pending %#llx, want %#llx", (unsigned long long)mpnd, (unsigned long long)main_want);
  WL_CHECK(tpnd == thread_want, "thread pending %#llx, want %#llx", (unsigned long long)tpnd, (unsigned long long)thread_want);
  sigset_t pending;
  sigpending(&pending);
  WL_CHECK(sigismember(&pending, SIGUSR1) && sigismember(&pending, SIGRTMIN + 2) &&
               sigismember(&pending, SIGRTMIN + 3) && !sigismember(&pending, SIGUSR2),
           "sigpending() in the main thread is wrong");

  // Unblock in the main thread: it takes the process-wide ones and its own.
  sigset_t unblock;
  sigemptyset(&unblock);
  sigaddset(&unblock, SIGUSR1);
  sigaddset(&unblock, SIGRTMIN + 2);
  sigaddset(&unblock, SIGRTMIN + 3);
  pthread_sigmask(SIG_UNBLOCK, &unblock, NULL);
  WL_CHECK(g_count == 4, "main thread received %d signals after unblocking, want 4", g_count);
  Expect(SIGUSR1, -1, SI_USER, main_tid, "process-wide SIGUSR1");
  Expect(SIGRTMIN + 2, 42, SI_QUEUE, main_tid, "process-wide SIGRTMIN+2 value 42");
  Expect(SIGRTMIN + 2, 43, SI_QUEUE, main_tid, "process-wide SIGRTMIN+2 value 43");
  WL_CHECK(Find(SIGRTMIN + 2, 42, 0) < Find(SIGRTMIN + 2, 43, 0), "SIGRTMIN+2 instances arrived out of order");
  Expect(SIGRTMIN + 3, 99, SI_QUEUE, main_tid, "main thread's SIGRTMIN+3 value 99");

  g_go = 2;  // the thread unblocks its own
  pthread_join(thread, NULL);
  WL_CHECK(g_count == 6, "%d signals in total, want 6", g_count);
  Expect(SIGUSR2, -1, SI_TKILL, g_thread_tid, "thread's SIGUSR2");
  Expect(SIGRTMIN + 4, 7, SI_QUEUE, g_thread_tid, "thread's SIGRTMIN+4 value 7");
  wl_pass();
}
