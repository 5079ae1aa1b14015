#include "common/stop_points.h"

#include <signal.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>

#include "absl/strings/str_cat.h"

namespace cairn {
namespace {

std::atomic<int> cancel_signal{0};
std::atomic<bool> fault_points_off{false};

}  // namespace

void RequestCancel(int signal) { cancel_signal.store(signal == 0 ? -1 : signal, std::memory_order_relaxed); }

absl::Status CheckCancelled() {
  int sig = cancel_signal.load(std::memory_order_relaxed);
  if (sig == 0) return absl::OkStatus();
  return absl::CancelledError(sig > 0 ? absl::StrCat("the dump was interrupted by ", sigabbrev_np(sig) ? "SIG" : "",
                                                     sigabbrev_np(sig) ? sigabbrev_np(sig) : "a signal")
                                      : std::string("the dump was cancelled"));
}

void FaultPoint(const char* stage) {
  static const char* pause_at = std::getenv("CAIRN_FAULT_PAUSE");
  if (fault_points_off.load(std::memory_order_relaxed) || pause_at == nullptr || ::strcmp(pause_at, stage) != 0) return;
  const char* parts[] = {"cairn: fault point ", stage, "\n"};
  for (const char* p : parts) (void)!::write(2, p, ::strlen(p));
  // CAIRN_FAULT_PAUSE_S=N: go on after N seconds of wall-clock time (a process stopped and
  // continued meanwhile goes on at once if they have passed), e.g. a controller deposed while
  // it waited.
  static const char* pause_s = std::getenv("CAIRN_FAULT_PAUSE_S");
  const double limit = pause_s != nullptr ? std::atof(pause_s) : -1;
  timespec start{};
  ::clock_gettime(CLOCK_REALTIME, &start);
  // Polled, not pause(): a signal landing between the test of the flag and pause() would
  // leave it waiting forever.
  while (cancel_signal.load(std::memory_order_relaxed) == 0) {
    if (limit >= 0) {
      timespec now{};
      ::clock_gettime(CLOCK_REALTIME, &now);
      if (static_cast<double>(now.tv_sec - start.tv_sec) + (now.tv_nsec - start.tv_nsec) / 1e9 >= limit) return;
    }
    ::usleep(1000);
  }
}

void DisableFaultPoints() { fault_points_off.store(true, std::memory_order_relaxed); }

absl::Status StopPoint(const char* stage) {
  FaultPoint(stage);
  return CheckCancelled();
}

}  // namespace cairn
