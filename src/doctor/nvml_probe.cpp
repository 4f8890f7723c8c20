#include "doctor/nvml_probe.hpp"

#include <dlfcn.h>

#include <mutex>

namespace ferry::doctor {
namespace {

// The few NVML entry points used, by their documented C signatures (nvml.h is not part of the
// CUDA toolkit everywhere). Every call returns 0 (NVML_SUCCESS) on success.
using nvml_device = void*;
struct nvml_bar1 {
    unsigned long long total, free, used;
};
struct nvml_api {
    int (*init)() = nullptr;
    int (*by_bus_id)(const char*, nvml_device*) = nullptr;
    int (*curr_gen)(nvml_device, unsigned*) = nullptr;
    int (*curr_width)(nvml_device, unsigned*) = nullptr;
    int (*max_gen)(nvml_device, unsigned*) = nullptr;
    int (*max_width)(nvml_device, unsigned*) = nullptr;
    int (*bar1)(nvml_device, nvml_bar1*) = nullptr;
    bool ok = false;
};

template <class F>
void bind(void* lib, const char* name, F& fn) {
    fn = reinterpret_cast<F>(::dlsym(lib, name));
}

/// Loaded and initialised once per process; NVML stays initialised (it is reference counted
/// and cheap to keep, and shutting it down at exit races other users).
const nvml_api& nvml() {
    static nvml_api api;
    static std::once_flag once;
    std::call_once(once, [] {
        void* lib = ::dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
        if (!lib) return;
        bind(lib, "nvmlInit_v2", api.init);
        bind(lib, "nvmlDeviceGetHandleByPciBusId_v2", api.by_bus_id);
        bind(lib, "nvmlDeviceGetCurrPcieLinkGeneration", api.curr_gen);
        bind(lib, "nvmlDeviceGetCurrPcieLinkWidth", api.curr_width);
        bind(lib, "nvmlDeviceGetMaxPcieLinkGeneration", api.max_gen);
        bind(lib, "nvmlDeviceGetMaxPcieLinkWidth", api.max_width);
        bind(lib, "nvmlDeviceGetBAR1MemoryInfo", api.bar1);
        api.ok = api.init && api.by_bus_id && api.init() == 0;
    });
    return api;
}

json unsigned_of(int (*fn)(nvml_device, unsigned*), nvml_device d) {
    unsigned v = 0;
    if (fn && fn(d, &v) == 0 && v > 0) return v;
    return nullptr;
}

}  // namespace

std::optional<json> probe_nvml_device(const std::string& bdf) {
    const nvml_api& api = nvml();
    if (!api.ok) return std::nullopt;
    nvml_device d = nullptr;
    if (api.by_bus_id(bdf.c_str(), &d) != 0 || !d) return std::nullopt;
    json j;
    j["generation"] = unsigned_of(api.curr_gen, d);
    j["width"] = unsigned_of(api.curr_width, d);
    j["max_generation"] = unsigned_of(api.max_gen, d);
    j["max_width"] = unsigned_of(api.max_width, d);
    nvml_bar1 b{};
    j["bar1_bytes"] = api.bar1 && api.bar1(d, &b) == 0 && b.total > 0 ? json(b.total) : json(nullptr);
    return j;
}

}  // namespace ferry::doctor
