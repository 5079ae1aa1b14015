#pragma once
// GPU health events (Xid critical errors, ECC errors) through NVML, where a GPU exists
// (docs/daemon.md, "Node signals").
//
// NVML is loaded at run time (dlopen of libnvidia-ml.so.1), so cairnd builds and runs on nodes
// without a GPU or a driver: there the watcher says why it is off and stays off. The few NVML
// functions used are declared here from NVML's documented C API; nothing of NVML's headers is
// needed at build time.
//
// GpuEventSource is the interface between the watcher and NVML, so the event -> signal mapping
// and the watcher's loop are tested with a fake source.
//
// Thread safety: a GpuWatcher waits for events on its own thread and calls its callback there.
// A GpuEventSource is used by one thread at a time.

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <atomic>
#include <vector>

#include "absl/status/statusor.h"

namespace cairn::daemon {

// NVML's event type bits (nvmlEventType*), as documented.
inline constexpr uint64_t kNvmlEventSingleBitEcc = 0x1;
inline constexpr uint64_t kNvmlEventDoubleBitEcc = 0x2;
inline constexpr uint64_t kNvmlEventXidCritical = 0x8;

struct GpuDevice {
  int index = 0;
  std::string name;  // e.g. "NVIDIA H100 80GB HBM3"
};

// One NVML event as delivered.
struct GpuEvent {
  int device = 0;       // index
  uint64_t type = 0;    // one of the kNvmlEvent* bits
  uint64_t data = 0;    // the Xid for Xid events
};

// What the daemon makes of an event: a node event, and (when `report`) a GPU_HEALTH signal
// for the controller, whose GPU rule decides between checkpoint-and-drain and restore elsewhere.
struct GpuSignal {
  std::string kind;           // xid | ecc-uncorrectable | ecc-corrected
  int device = 0;
  int xid = 0;                // for kind xid
  int ecc_uncorrectable = 0;  // for kind ecc-uncorrectable
  bool report = false;        // worth a controller signal (corrected ECC errors are not)
  std::string detail;
};

// The signal an event stands for; nullopt for event types the watcher did not ask for.
std::optional<GpuSignal> SignalFor(const GpuEvent& e, const std::vector<GpuDevice>& devices);

// "NVIDIA H100 80GB HBM3" -> "H100", "Tesla V100-SXM2-16GB" -> "V100": the GPU type the
// controller's placement knows nodes by.
std::string GpuTypeOf(const std::string& nvml_name);

class GpuEventSource {
 public:
  virtual ~GpuEventSource() = default;
  virtual std::vector<GpuDevice> Devices() const = 0;
  // Waits up to `timeout_ms` for the next event: nullopt on timeout; an error when waiting fails.
  virtual absl::StatusOr<std::optional<GpuEvent>> Wait(int timeout_ms) = 0;
};

// Loads NVML from `library`, initializes it and registers every GPU for Xid and ECC events.
// Fails (and leaves nothing loaded) without the library, without a GPU, or when NVML refuses.
absl::StatusOr<std::unique_ptr<GpuEventSource>> OpenNvml(const std::string& library = "libnvidia-ml.so.1");

class GpuWatcher {
 public:
  using SignalFn = std::function<void(const GpuSignal&)>;
  // Starts waiting for events of `source` on a thread; each mapped event goes to `on_signal`.
  GpuWatcher(std::unique_ptr<GpuEventSource> source, SignalFn on_signal);
  ~GpuWatcher();  // stops (within about a second) and joins

  const std::vector<GpuDevice>& devices() const { return devices_; }

 private:
  void Loop();

  std::unique_ptr<GpuEventSource> source_;
  const SignalFn on_signal_;
  const std::vector<GpuDevice> devices_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace cairn::daemon
