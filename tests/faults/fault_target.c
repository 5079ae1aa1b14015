// The process a fault test checkpoints and then kills the checkpointer of: it must carry on
// exactly as before, whatever instant the dumper died at. It checks that itself.
//
//   fault_target MIB [novdso]
//
// With "novdso" it first unmaps its vDSO and vvar (the dump then injects from the end of its
// highest executable file mapping), and the "vDSO bytes" it records and checks are the last
// 128 bytes of that mapping instead.
//
// Sets up: MIB MiB of memory filled with a pattern; a worker thread that keeps counting
// in a register-heavy loop and checking its own mask (SIGUSR1 blocked); a reader thread
// asleep in read(2) on a pipe (a call the dump interrupts and that must be restarted); its
// own signal mask (SIGUSR2 and SIGRTMIN+1 blocked); handlers for SIGUSR1 and SIGTRAP and
// SIG_IGN for SIGPIPE; a unix socket pair with 6 bytes waiting in one end (whose queue the dump
// copies with a peek offset of its own: the socket's must be unset again after).
// Then it records what it sees: its mappings (/proc/self/maps), its descriptors, its vDSO's
// bytes. Prints "ready PID" and loops, checking the pattern of one page in each 64 per
// pass (every page every 64 passes).
//
// On SIGUSR1 it checks everything against what it recorded: every page of its memory, both
// masks, the three actions, the mappings (no area added, none gone), the descriptors, the
// vDSO bytes, the unix socket's queue and unset peek offset, that the worker still counts with
// its mask and arithmetic right, that the
// reader gets a byte written to its pipe; prints
// "PASS N" (N: verifications so far) or "FAIL what", and goes on. Any mismatch found in the
// loop prints "FAIL" at once and exits 1.
#define _GNU_SOURCE
#include <dirent.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#define kPage 4096

static uint8_t* g_mem;
static size_t g_pages;
static char g_maps[65536];
static int g_fds;
static char g_vdso[8192 * 4];
static size_t g_vdso_len;
static void* g_vdso_at;
static volatile sig_atomic_t g_verify;
static atomic_ulong g_worker_count;
static volatile pid_t g_worker_tid;
static volatile int g_worker_bad;
static int g_passes;
static int g_pipe[2];
static int g_queue[2];  // a unix socket pair with bytes waiting in g_queue[1]: the dump peeks at them
static atomic_int g_read_bytes;

static uint64_t Pattern(size_t page, size_t word) { return (page * 0x9e3779b97f4a7c15ULL) ^ (word * 0xbf58476d1ce4e5b9ULL); }

static void OnUsr1(int sig) {
  (void)sig;
  g_verify = 1;
}
static void OnTrap(int sig) { (void)sig; }

static int ReadAll(const char* path, char* buf, size_t cap) {
  FILE* f = fopen(path, "r");
  if (!f) return -1;
  size_t n = fread(buf, 1, cap - 1, f);
  fclose(f);
  buf[n] = 0;
  return (int)n;
}

// With FAULT_TARGET_TRACKED=1 (a job whose periodic checkpoints are incremental), the write
// tracker cairn keeps in the process on purpose (a userfaultfd) is not counted.
static int CountFds(void) {
  static int tracked = -1;
  if (tracked < 0) tracked = getenv("FAULT_TARGET_TRACKED") != NULL && strcmp(getenv("FAULT_TARGET_TRACKED"), "1") == 0;
  DIR* d = opendir("/proc/self/fd");
  int n = 0;
  for (struct dirent* e; (e = readdir(d)) != NULL;) {
    if (e->d_name[0] == '.') continue;
    if (tracked) {
      char path[300], link[64];
      snprintf(path, sizeof path, "/proc/self/fd/%s", e->d_name);
      ssize_t len = readlink(path, link, sizeof link - 1);
      if (len > 0 && (size_t)len == strlen("anon_inode:[userfaultfd]") &&
          memcmp(link, "anon_inode:[userfaultfd]", (size_t)len) == 0) {
        continue;
      }
    }
    ++n;
  }
  closedir(d);
  return n - 1;  // opendir's own
}

// The vDSO, or, for a process without one, the last 128 bytes of its highest executable file
// mapping: where the dump puts its injection code.
static void FindVdso(int novdso) {
  FILE* f = fopen("/proc/self/maps", "r");
  char line[512];
  while (fgets(line, sizeof line, f)) {
    unsigned long a, b;
    sscanf(line, "%lx-%lx", &a, &b);
    if (novdso && strstr(line, " r-xp ") && strchr(line, '/')) {
      g_vdso_at = (void*)(b - 128);
      g_vdso_len = 128;
    }
    if (novdso || !strstr(line, "[vdso]")) continue;
    g_vdso_at = (void*)a;
    g_vdso_len = b - a;
  }
  fclose(f);
  if (g_vdso_len > sizeof g_vdso) g_vdso_len = sizeof g_vdso;
  memcpy(g_vdso, g_vdso_at, g_vdso_len);
}

// Unmaps the vDSO and vvar areas (nothing here calls into them afterwards: no clock_gettime).
static void UnmapVdso(void) {
  static char maps[sizeof g_maps];
  ReadAll("/proc/self/maps", maps, sizeof maps);
  for (char* line = strtok(maps, "\n"); line != NULL; line = strtok(NULL, "\n")) {
    if (!strstr(line, "[vdso]") && !strstr(line, "[vvar")) continue;
    unsigned long a, b;
    sscanf(line, "%lx-%lx", &a, &b);
    munmap((void*)a, b - a);
  }
}

static int CheckPage(size_t p) {
  const uint64_t* w = (const uint64_t*)(g_mem + p * kPage);
  for (size_t i = 0; i < kPage / 8; ++i) {
    if (w[i] != Pattern(p, i)) return 0;
  }
  return 1;
}

// Counts with values kept in registers; a register changed under it shows as a wrong sum.
static void* Worker(void* arg) {
  (void)arg;
  g_worker_tid = gettid();
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGUSR1);
  pthread_sigmask(SIG_SETMASK, &set, NULL);
  for (;;) {
    uint64_t a = 1, b = 2, c = 3, d = 5, e = 8, f = 13;
    for (int i = 0; i < 1000; ++i) {
      a += b; b += c; c += d; d += e; e += f; f += a;
      a ^= f >> 3; c ^= b << 1;
    }
    // The same computation, once more, must give the same answer.
    uint64_t a2 = 1, b2 = 2, c2 = 3, d2 = 5, e2 = 8, f2 = 13;
    for (int i = 0; i < 1000; ++i) {
      a2 += b2; b2 += c2; c2 += d2; d2 += e2; e2 += f2; f2 += a2;
      a2 ^= f2 >> 3; c2 ^= b2 << 1;
    }
    if (a != a2 || c != c2 || f != f2) g_worker_bad = 1;
    sigset_t now;
    pthread_sigmask(SIG_SETMASK, NULL, &now);
    for (int s = 1; s < 32; ++s) {
      if (s != SIGKILL && s != SIGSTOP && sigismember(&now, s) != (s == SIGUSR1)) g_worker_bad = 2;
    }
    atomic_fetch_add(&g_worker_count, 1);
  }
  return NULL;
}

// Sleeps in read(2) on the pipe; counts the bytes it gets.
static void* Reader(void* arg) {
  (void)arg;
  for (;;) {
    char c;
    if (read(g_pipe[0], &c, 1) == 1) atomic_fetch_add(&g_read_bytes, 1);
  }
  return NULL;
}

static int Verify(char* why, size_t cap) {
  for (size_t p = 0; p < g_pages; ++p) {
    if (!CheckPage(p)) return snprintf(why, cap, "page %zu of its memory differs", p), 0;
  }
  sigset_t now;
  pthread_sigmask(SIG_SETMASK, NULL, &now);
  for (int s = 1; s < 65; ++s) {
    int want = s == SIGUSR2 || s == SIGRTMIN + 1;
    if (s == SIGKILL || s == SIGSTOP || (s > 31 && s < SIGRTMIN)) continue;
    if (sigismember(&now, s) != want) return snprintf(why, cap, "signal %d %sblocked in its mask", s, want ? "not " : ""), 0;
  }
  struct sigaction sa;
  sigaction(SIGUSR1, NULL, &sa);
  if (sa.sa_handler != OnUsr1) return snprintf(why, cap, "the SIGUSR1 handler is gone"), 0;
  sigaction(SIGTRAP, NULL, &sa);
  if (sa.sa_handler != OnTrap) return snprintf(why, cap, "the SIGTRAP handler is gone"), 0;
  sigaction(SIGPIPE, NULL, &sa);
  if (sa.sa_handler != SIG_IGN) return snprintf(why, cap, "SIGPIPE is no longer ignored"), 0;
  static char maps[sizeof g_maps];
  ReadAll("/proc/self/maps", maps, sizeof maps);
  if (strcmp(maps, g_maps) != 0) return snprintf(why, cap, "its mappings changed:\n%s\nwas:\n%s", maps, g_maps), 0;
  if (CountFds() != g_fds) return snprintf(why, cap, "it has %d descriptors, had %d", CountFds(), g_fds), 0;
  if (memcmp(g_vdso_at, g_vdso, g_vdso_len) != 0) {
    return snprintf(why, cap, "its vDSO's bytes (without one, its last text bytes) changed"), 0;
  }
  unsigned long before = atomic_load(&g_worker_count);
  for (int i = 0; i < 1000 && atomic_load(&g_worker_count) == before; ++i) usleep(1000);
  if (atomic_load(&g_worker_count) == before) {
    char path[64], stat[512] = "";
    snprintf(path, sizeof path, "/proc/self/task/%d/stat", g_worker_tid);
    ReadAll(path, stat, sizeof stat);
    return snprintf(why, cap, "the worker thread stopped counting for 1 s: %s", stat), 0;
  }
  if (g_worker_bad == 1) return snprintf(why, cap, "the worker thread's arithmetic went wrong"), 0;
  if (g_worker_bad == 2) return snprintf(why, cap, "the worker thread's mask changed"), 0;
  int off = 0, queued = 0;
  socklen_t len = sizeof off;
  if (getsockopt(g_queue[1], SOL_SOCKET, SO_PEEK_OFF, &off, &len) != 0 || off != -1) {
    return snprintf(why, cap, "its unix socket's peek offset is %d, was -1 (unset)", off), 0;
  }
  if (ioctl(g_queue[1], FIONREAD, &queued) != 0 || queued != 6) {
    return snprintf(why, cap, "its unix socket holds %d bytes, held 6", queued), 0;
  }
  int got = atomic_load(&g_read_bytes);
  if (write(g_pipe[1], "x", 1) != 1) return snprintf(why, cap, "cannot write to the reader's pipe"), 0;
  for (int i = 0; i < 200 && atomic_load(&g_read_bytes) == got; ++i) usleep(5000);
  if (atomic_load(&g_read_bytes) != got + 1) return snprintf(why, cap, "the reader thread did not get its byte"), 0;
  return 1;
}

__attribute__((noinline)) static void GrowStack(void) {
  volatile char deep[512 * 1024];
  for (size_t i = 0; i < sizeof deep; i += 4096) deep[i] = 0;
}

int main(int argc, char** argv) {
  size_t mib = argc > 1 ? strtoul(argv[1], NULL, 10) : 64;
  int novdso = argc > 2 && strcmp(argv[2], "novdso") == 0;
  setvbuf(stdout, NULL, _IOLBF, 0);
  g_pages = mib * 256;
  g_mem = mmap(NULL, g_pages * kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (g_mem == MAP_FAILED) return perror("mmap"), 2;
  for (size_t p = 0; p < g_pages; ++p) {
    uint64_t* w = (uint64_t*)(g_mem + p * kPage);
    for (size_t i = 0; i < kPage / 8; ++i) w[i] = Pattern(p, i);
  }
  struct sigaction sa = {0};
  sa.sa_handler = OnUsr1;
  sigaction(SIGUSR1, &sa, NULL);
  sa.sa_handler = OnTrap;
  sigaction(SIGTRAP, &sa, NULL);
  signal(SIGPIPE, SIG_IGN);
  if (pipe(g_pipe) != 0) return perror("pipe"), 2;
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, g_queue) != 0 || write(g_queue[0], "queued", 6) != 6) {
    return perror("socketpair"), 2;
  }
  pthread_t t, r;
  pthread_create(&t, NULL, Worker, NULL);
  pthread_create(&r, NULL, Reader, NULL);
  sigset_t mask;
  sigemptyset(&mask);
  sigaddset(&mask, SIGUSR2);
  sigaddset(&mask, SIGRTMIN + 1);
  pthread_sigmask(SIG_SETMASK, &mask, NULL);
  usleep(10000);  // the worker's stack and mask in place before the snapshot
  // The main stack grown past the deepest it will reach (Verify's buffer, a signal frame on top):
  // its own growth later must not read as a changed mapping.
  GrowStack();
  if (novdso) UnmapVdso();
  ReadAll("/proc/self/maps", g_maps, sizeof g_maps);
  g_fds = CountFds();
  FindVdso(novdso);
  printf("ready %d\n", getpid());
  for (size_t pass = 0;; ++pass) {
    for (size_t p = pass % 64; p < g_pages; p += 64) {
      if (!CheckPage(p)) {
        printf("FAIL page %zu differs\n", p);
        return 1;
      }
    }
    if (g_verify) {
      g_verify = 0;
      char why[sizeof g_maps * 2 + 64];
      if (Verify(why, sizeof why)) {
        printf("PASS %d\n", ++g_passes);
      } else {
        printf("FAIL %s\n", why);
      }
    }
  }
}
