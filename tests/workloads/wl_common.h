// The protocol every cairn test workload follows, and small helpers they share.
//
// A workload is started as `wl_<name> WORKDIR`. It builds the state it is about (phase 1), calls
// wl_signal_ready(), waits in wl_wait_go() until WORKDIR/go exists, checks that its state survived
// (phase 2) and ends with wl_pass() or wl_fail(): exactly one line "PASS" or "FAIL: <reason>" on
// stdout, exit status 0 or 1. Between ready and go the harness may checkpoint the process, kill it and
// restore it, so nothing here may depend on state outside the process other than WORKDIR.
//
// None of these helpers allocate with malloc after wl_init(): some workloads check the heap and brk.
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

// How long a workload waits for the harness before giving up, so that a dead harness leaves no
// process behind for long.
#define WL_GO_TIMEOUT_S 120

// Parses argv (exactly one argument, WORKDIR) and remembers WORKDIR. Exits with a FAIL line otherwise.
void wl_init(int argc, char** argv);

// WORKDIR as given on the command line.
const char* wl_workdir(void);

// Writes WORKDIR/<name> into buf (fails the workload if it does not fit).
void wl_path(char* buf, size_t size, const char* name);

// Writes WORKDIR/ready atomically (ready.tmp, then rename); its content is the pid and a newline.
// The descriptor used is closed before returning.
void wl_signal_ready(void);

// Returns non-zero once WORKDIR/go exists.
int wl_go_exists(void);

// Polls for WORKDIR/go every 10 ms (nanosleep, restarted on EINTR). Fails after WL_GO_TIMEOUT_S.
void wl_wait_go(void);

// Prints "FAIL: <reason>" and exits 1. Safe to call from any thread.
__attribute__((noreturn, format(printf, 1, 2))) void wl_fail(const char* fmt, ...);

// Prints "PASS" and exits 0.
__attribute__((noreturn)) void wl_pass(void);

#define WL_CHECK(cond, ...)   \
  do {                        \
    if (!(cond)) {            \
      wl_fail(__VA_ARGS__);   \
    }                         \
  } while (0)

// Fails with the call's name and errno when a libc call returned -1.
#define WL_SYS(call)                                                          \
  ({                                                                          \
    __typeof__(call) wl_sys_rc_ = (call);                                     \
    if (wl_sys_rc_ == -1) wl_fail("%s: %s (line %d)", #call, wl_errstr(), __LINE__); \
    wl_sys_rc_;                                                               \
  })

// strerror(errno) without allocating.
const char* wl_errstr(void);

// Current time of `clock` in nanoseconds.
int64_t wl_now_ns(int clock);

// Sleeps for `ms` milliseconds, resuming after signals.
void wl_sleep_ms(int64_t ms);

// The calling thread's kernel id.
pid_t wl_gettid(void);

// Deterministic pseudo-random data: fills `len` bytes with a stream derived from `seed`; the check
// returns the offset of the first byte that differs, or -1 when all match.
void wl_fill_pattern(void* buf, size_t len, uint64_t seed);
ptrdiff_t wl_check_pattern(const void* buf, size_t len, uint64_t seed);
uint64_t wl_xorshift64(uint64_t* state);

// Reads a whole small file into buf (NUL-terminated); returns its length, or -1 with errno set.
ssize_t wl_read_file(const char* path, char* buf, size_t size);

// The syscall number thread `tid` of this process is blocked in, or -1 while it runs in user space.
long wl_thread_syscall(pid_t tid);

// Waits (up to 5 s) until thread `tid` is blocked in syscall `nr`; fails the workload otherwise.
// Used so that the checkpoint is taken while the call is really in progress.
void wl_wait_in_syscall(pid_t tid, long nr);
