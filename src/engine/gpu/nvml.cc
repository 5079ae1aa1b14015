#include "engine/gpu/nvml.h"

#include <dlfcn.h>

#include <string_view>
#include <type_traits>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace cairn::gpu {
namespace {

using Return = int;  // nvmlReturn_t: 0 is NVML_SUCCESS
constexpr Return kInsufficientSize = 7;
using Device = void*;
struct Memory {  // nvmlMemory_t
  unsigned long long total, free, used;
};
struct ProcessInfo {  // nvmlProcessInfo_t, as nvmlDeviceGetComputeRunningProcesses_v3 fills it
  unsigned int pid;
  unsigned long long used_gpu_memory;
  unsigned int gpu_instance_id;
  unsigned int compute_instance_id;
};

}  // namespace

struct Nvml::Api {
  Return (*init)() = nullptr;
  Return (*shutdown)() = nullptr;
  const char* (*error_string)(Return) = nullptr;
  Return (*count)(unsigned*) = nullptr;
  Return (*handle)(unsigned, Device*) = nullptr;
  Return (*name)(Device, char*, unsigned) = nullptr;
  Return (*uuid)(Device, char*, unsigned) = nullptr;
  Return (*memory)(Device, Memory*) = nullptr;
  Return (*processes)(Device, unsigned*, ProcessInfo*) = nullptr;

  std::string Error(Return r) const {
    const char* s = error_string != nullptr ? error_string(r) : nullptr;
    return s != nullptr ? absl::StrCat(s, " (", r, ")") : absl::StrCat("NVML error ", r);
  }
};

Nvml::Nvml(void* lib, std::unique_ptr<Api> api) : lib_(lib), api_(std::move(api)) {}

Nvml::~Nvml() {
  api_->shutdown();
  ::dlclose(lib_);
}

absl::StatusOr<std::unique_ptr<Nvml>> Nvml::Load(const std::string& library) {
  void* lib = ::dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* err = ::dlerror();
    return absl::NotFoundError(absl::StrCat("cannot load ", library, " (NVIDIA's NVML): ", err ? err : "dlopen failed"));
  }
  auto api = std::make_unique<Api>();
  bool missing = false;
  std::string which;
  auto sym = [&](auto& fn, const char* name) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(::dlsym(lib, name));
    if (fn == nullptr && !missing) {
      missing = true;
      which = name;
    }
  };
  sym(api->init, "nvmlInit_v2");
  sym(api->shutdown, "nvmlShutdown");
  sym(api->error_string, "nvmlErrorString");
  sym(api->count, "nvmlDeviceGetCount_v2");
  sym(api->handle, "nvmlDeviceGetHandleByIndex_v2");
  sym(api->name, "nvmlDeviceGetName");
  sym(api->uuid, "nvmlDeviceGetUUID");
  sym(api->memory, "nvmlDeviceGetMemoryInfo");
  sym(api->processes, "nvmlDeviceGetComputeRunningProcesses_v3");
  if (missing) {
    ::dlclose(lib);
    return absl::UnavailableError(absl::StrCat(library, " has no ", which, " (an NVIDIA driver too old)"));
  }
  if (Return r = api->init(); r != 0) {
    std::string why = api->Error(r);
    ::dlclose(lib);
    return absl::UnavailableError(absl::StrCat("nvmlInit_v2: ", why));
  }
  std::unique_ptr<Nvml> n(new Nvml(lib, std::move(api)));
  unsigned count = 0;
  if (Return r = n->api_->count(&count); r != 0) {
    return absl::UnavailableError(absl::StrCat("nvmlDeviceGetCount_v2: ", n->api_->Error(r)));
  }
  for (unsigned i = 0; i < count; ++i) {
    Device d = nullptr;
    if (Return r = n->api_->handle(i, &d); r != 0) {
      return absl::UnavailableError(absl::StrCat("nvmlDeviceGetHandleByIndex_v2(", i, "): ", n->api_->Error(r)));
    }
    GpuInfo g;
    g.index = static_cast<int>(i);
    char buf[96] = {};
    if (n->api_->name(d, buf, sizeof buf) == 0) g.name = buf;
    char uuid[96] = {};
    if (Return r = n->api_->uuid(d, uuid, sizeof uuid); r != 0) {
      return absl::UnavailableError(absl::StrCat("nvmlDeviceGetUUID(", i, "): ", n->api_->Error(r)));
    }
    g.uuid = uuid;
    Memory m{};
    if (n->api_->memory(d, &m) == 0) {
      g.memory_total = m.total;
      g.memory_free = m.free;
    }
    n->handles_.push_back(d);
    n->gpus_.push_back(std::move(g));
  }
  return n;
}

absl::StatusOr<std::vector<std::pair<int, uint64_t>>> Nvml::UsedBy(pid_t pid) {
  std::vector<std::pair<int, uint64_t>> out;
  for (size_t i = 0; i < handles_.size(); ++i) {
    std::vector<ProcessInfo> infos(64);
    unsigned n = static_cast<unsigned>(infos.size());
    Return r = api_->processes(handles_[i], &n, infos.data());
    if (r == kInsufficientSize) {
      infos.resize(n + 64);
      n = static_cast<unsigned>(infos.size());
      r = api_->processes(handles_[i], &n, infos.data());
    }
    if (r != 0) {
      return absl::UnavailableError(
          absl::StrCat("nvmlDeviceGetComputeRunningProcesses_v3(GPU ", i, "): ", api_->Error(r)));
    }
    for (unsigned k = 0; k < n && k < infos.size(); ++k) {
      if (static_cast<pid_t>(infos[k].pid) == pid) out.emplace_back(static_cast<int>(i), infos[k].used_gpu_memory);
    }
  }
  return out;
}

absl::StatusOr<std::array<uint8_t, 16>> UuidBytes(const std::string& nvml_uuid) {
  std::string hex;
  bool bad = false;
  std::string_view s = nvml_uuid;
  if (s.substr(0, 4) == "GPU-") s.remove_prefix(4);
  for (char c : s) {
    if (c == '-') continue;
    bad |= !absl::ascii_isxdigit(static_cast<unsigned char>(c));
    hex.push_back(c);
  }
  if (bad || hex.size() != 32) {
    return absl::InvalidArgumentError(absl::StrCat("'", nvml_uuid, "' is not a GPU UUID (GPU- and 32 hex digits)"));
  }
  std::array<uint8_t, 16> out{};
  for (size_t i = 0; i < 16; ++i) {
    auto nibble = [](char c) { return static_cast<uint8_t>(absl::ascii_isdigit(c) ? c - '0' : absl::ascii_tolower(c) - 'a' + 10); };
    out[i] = static_cast<uint8_t>(nibble(hex[2 * i]) << 4 | nibble(hex[2 * i + 1]));
  }
  return out;
}

}  // namespace cairn::gpu
