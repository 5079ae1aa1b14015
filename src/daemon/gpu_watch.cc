#include "daemon/gpu_watch.h"

#include <dlfcn.h>

#include <chrono>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "common/log.h"

namespace cairn::daemon {
namespace {

// The parts of NVML's C API used here, declared from its documentation.
using nvmlReturn_t = int;
using nvmlDevice_t = struct nvmlDevice_st*;
using nvmlEventSet_t = struct nvmlEventSet_st*;
struct nvmlEventData_t {
  nvmlDevice_t device;
  unsigned long long eventType;
  unsigned long long eventData;
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
};
constexpr nvmlReturn_t kNvmlSuccess = 0;
constexpr nvmlReturn_t kNvmlErrorTimeout = 10;
constexpr nvmlReturn_t kNvmlErrorNotSupported = 3;

struct NvmlApi {
  nvmlReturn_t (*Init)();
  nvmlReturn_t (*Shutdown)();
  const char* (*ErrorString)(nvmlReturn_t);
  nvmlReturn_t (*DeviceGetCount)(unsigned int*);
  nvmlReturn_t (*DeviceGetHandleByIndex)(unsigned int, nvmlDevice_t*);
  nvmlReturn_t (*DeviceGetName)(nvmlDevice_t, char*, unsigned int);
  nvmlReturn_t (*EventSetCreate)(nvmlEventSet_t*);
  nvmlReturn_t (*EventSetFree)(nvmlEventSet_t);
  nvmlReturn_t (*DeviceRegisterEvents)(nvmlDevice_t, unsigned long long, nvmlEventSet_t);
  nvmlReturn_t (*EventSetWait)(nvmlEventSet_t, nvmlEventData_t*, unsigned int);
};

class NvmlSource : public GpuEventSource {
 public:
  NvmlSource(void* lib, NvmlApi api) : lib_(lib), api_(api) {}
  ~NvmlSource() override {
    if (set_ != nullptr) api_.EventSetFree(set_);
    api_.Shutdown();
    ::dlclose(lib_);
  }

  std::string Error(nvmlReturn_t r) const {
    const char* s = api_.ErrorString != nullptr ? api_.ErrorString(r) : nullptr;
    return s != nullptr ? absl::StrCat(s, " (", r, ")") : absl::StrCat("NVML error ", r);
  }

  absl::Status Setup() {
    unsigned int n = 0;
    if (nvmlReturn_t r = api_.DeviceGetCount(&n); r != kNvmlSuccess) {
      return absl::UnavailableError("nvmlDeviceGetCount_v2: " + Error(r));
    }
    if (n == 0) return absl::NotFoundError("NVML finds no GPU");
    if (nvmlReturn_t r = api_.EventSetCreate(&set_); r != kNvmlSuccess) {
      return absl::UnavailableError("nvmlEventSetCreate: " + Error(r));
    }
    for (unsigned int i = 0; i < n; ++i) {
      nvmlDevice_t d = nullptr;
      if (nvmlReturn_t r = api_.DeviceGetHandleByIndex(i, &d); r != kNvmlSuccess) {
        return absl::UnavailableError(absl::StrCat("nvmlDeviceGetHandleByIndex_v2(", i, "): ", Error(r)));
      }
      char name[96] = {};
      (void)api_.DeviceGetName(d, name, sizeof(name));
      handles_.push_back(d);
      devices_.push_back({static_cast<int>(i), name});
      // ECC events are not supported on GPUs without ECC: register what the GPU supports.
      unsigned long long want = kNvmlEventXidCritical | kNvmlEventDoubleBitEcc | kNvmlEventSingleBitEcc;
      nvmlReturn_t r = api_.DeviceRegisterEvents(d, want, set_);
      if (r == kNvmlErrorNotSupported) r = api_.DeviceRegisterEvents(d, kNvmlEventXidCritical, set_);
      if (r != kNvmlSuccess) {
        return absl::UnavailableError(absl::StrCat("nvmlDeviceRegisterEvents(GPU ", i, "): ", Error(r)));
      }
    }
    return absl::OkStatus();
  }

  std::vector<GpuDevice> Devices() const override { return devices_; }

  absl::StatusOr<std::optional<GpuEvent>> Wait(int timeout_ms) override {
    nvmlEventData_t data{};
    nvmlReturn_t r = api_.EventSetWait(set_, &data, static_cast<unsigned int>(timeout_ms));
    if (r == kNvmlErrorTimeout) return std::nullopt;
    if (r != kNvmlSuccess) return absl::UnavailableError("nvmlEventSetWait_v2: " + Error(r));
    GpuEvent e;
    e.type = data.eventType;
    e.data = data.eventData;
    for (size_t i = 0; i < handles_.size(); ++i) {
      if (handles_[i] == data.device) e.device = static_cast<int>(i);
    }
    return e;
  }

  NvmlSource(const NvmlSource&) = delete;
  NvmlSource& operator=(const NvmlSource&) = delete;

 private:
  void* lib_;
  NvmlApi api_;
  nvmlEventSet_t set_ = nullptr;
  std::vector<nvmlDevice_t> handles_;
  std::vector<GpuDevice> devices_;
};

std::string DeviceName(int index, const std::vector<GpuDevice>& devices) {
  for (const GpuDevice& d : devices) {
    if (d.index == index) return absl::StrCat("GPU ", index, " (", d.name, ")");
  }
  return absl::StrCat("GPU ", index);
}

}  // namespace

std::optional<GpuSignal> SignalFor(const GpuEvent& e, const std::vector<GpuDevice>& devices) {
  GpuSignal s;
  s.device = e.device;
  std::string gpu = DeviceName(e.device, devices);
  if (e.type & kNvmlEventXidCritical) {
    s.kind = "xid";
    s.xid = static_cast<int>(e.data);
    s.report = true;
    s.detail = absl::StrCat(gpu, ": Xid ", s.xid, " (critical error)");
    return s;
  }
  if (e.type & kNvmlEventDoubleBitEcc) {
    s.kind = "ecc-uncorrectable";
    s.ecc_uncorrectable = 1;
    s.report = true;
    s.detail = absl::StrCat(gpu, ": uncorrectable (double-bit) ECC error");
    return s;
  }
  if (e.type & kNvmlEventSingleBitEcc) {
    s.kind = "ecc-corrected";
    s.detail = absl::StrCat(gpu, ": corrected (single-bit) ECC error");
    return s;
  }
  return std::nullopt;
}

std::string GpuTypeOf(const std::string& nvml_name) {
  std::string s(absl::StripAsciiWhitespace(nvml_name));
  for (const char* prefix : {"NVIDIA ", "Tesla ", "GeForce ", "Quadro "}) {
    if (absl::StartsWith(s, prefix)) s = s.substr(std::string(prefix).size());
  }
  size_t end = s.find_first_of(" -");
  return s.substr(0, end);
}

absl::StatusOr<std::unique_ptr<GpuEventSource>> OpenNvml(const std::string& library) {
  void* lib = ::dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* err = ::dlerror();
    return absl::NotFoundError(absl::StrCat("cannot load ", library, ": ", err != nullptr ? err : "dlopen failed",
                                            " (no NVIDIA driver on this node)"));
  }
  NvmlApi api{};
  std::string missing;
  auto sym = [&](auto& fn, const char* name) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(::dlsym(lib, name));
    if (fn == nullptr) absl::StrAppend(&missing, missing.empty() ? "" : ", ", name);
  };
  sym(api.Init, "nvmlInit_v2");
  sym(api.Shutdown, "nvmlShutdown");
  sym(api.ErrorString, "nvmlErrorString");
  sym(api.DeviceGetCount, "nvmlDeviceGetCount_v2");
  sym(api.DeviceGetHandleByIndex, "nvmlDeviceGetHandleByIndex_v2");
  sym(api.DeviceGetName, "nvmlDeviceGetName");
  sym(api.EventSetCreate, "nvmlEventSetCreate");
  sym(api.EventSetFree, "nvmlEventSetFree");
  sym(api.DeviceRegisterEvents, "nvmlDeviceRegisterEvents");
  sym(api.EventSetWait, "nvmlEventSetWait_v2");
  if (!missing.empty()) {
    ::dlclose(lib);
    return absl::UnavailableError(absl::StrCat(library, " lacks ", missing, " (driver too old?)"));
  }
  if (nvmlReturn_t r = api.Init(); r != kNvmlSuccess) {
    std::string why = api.ErrorString != nullptr && api.ErrorString(r) != nullptr ? api.ErrorString(r) : "";
    ::dlclose(lib);
    return absl::UnavailableError(absl::StrCat("nvmlInit_v2: ", why, " (", r, ")"));
  }
  auto src = std::make_unique<NvmlSource>(lib, api);  // owns lib and the NVML session from here
  if (absl::Status s = src->Setup(); !s.ok()) return s;
  return src;
}

GpuWatcher::GpuWatcher(std::unique_ptr<GpuEventSource> source, SignalFn on_signal)
    : source_(std::move(source)), on_signal_(std::move(on_signal)), devices_(source_->Devices()) {
  thread_ = std::thread([this] { Loop(); });
}

GpuWatcher::~GpuWatcher() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

void GpuWatcher::Loop() {
  bool warned = false;
  while (!stop_) {
    absl::StatusOr<std::optional<GpuEvent>> e = source_->Wait(500);
    if (!e.ok()) {
      if (!warned) CAIRN_LOG_WARN("gpu watcher: waiting for NVML events failed: {}", e.status().ToString());
      warned = true;
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
      continue;
    }
    warned = false;
    if (!e->has_value()) continue;
    if (std::optional<GpuSignal> s = SignalFor(**e, devices_)) on_signal_(*s);
  }
}

}  // namespace cairn::daemon
