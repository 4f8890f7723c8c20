#include "cuda/cuda_runtime.hpp"

#include <atomic>
#include <cerrno>
#include <unistd.h>

#include <cstring>
#include <mutex>
#include <utility>

#include "os/fault_hook.hpp"
#include "os/once_per_process.hpp"

namespace ferry::detail {
namespace {

struct cuda_probe {
    int devices = 0;
    std::string reason;
};

}  // namespace

// The oldest Linux driver each CUDA major version runs on (NVIDIA's CUDA compatibility guide: a
// build runs on any driver of its major version's range through minor version compatibility),
// 0 where there is no ferry build for that major version.
int minimum_driver(int cuda_major) { return cuda_major == 13 ? 580 : cuda_major == 12 ? 525 : 0; }

// The build names itself as its wheel does (ferry-cu<major>, scripts/wheel.py): the CUDA major
// version comes from the headers it was compiled with, the major version of the runtime linked in.
std::string driver_too_old_reason(int driver) {
    const int built = CUDART_VERSION;
    const int major = built / 1000;
    const int has = driver / 1000;
    const std::string flavour = "ferry-cu" + std::to_string(major);
    std::string text = "the NVIDIA driver supports CUDA " + std::to_string(has) + "." +
                       std::to_string(driver % 1000 / 10) + ", and this " + flavour + " (built with CUDA " +
                       std::to_string(major) + "." + std::to_string(built % 1000 / 10) + ") needs ";
    text += minimum_driver(major) ? "an NVIDIA driver >= " + std::to_string(minimum_driver(major))
                                  : std::string("a newer NVIDIA driver");
    text += ": update the driver";
    if (has < major && minimum_driver(has))
        text += ", or install the ferry-cu" + std::to_string(has) + " wheel instead (for drivers >= " +
                std::to_string(minimum_driver(has)) + ")";
    return text;
}

namespace {

cuda_probe run_probe() {
    cuda_probe r;
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        // Without any driver the runtime says "insufficient driver": say what is true.
        int driver = 0;
        cudaDriverGetVersion(&driver);  // 0 when no driver is installed
        if (driver == 0)
            r.reason = "no CUDA driver is installed (libcuda.so.1 is not found)";
        else if (e == cudaErrorInsufficientDriver)
            r.reason = driver_too_old_reason(driver);
        else
            r.reason = std::string("no usable CUDA driver or device: ") + cudaGetErrorString(e);
        cudaGetLastError();
    } else if (n == 0) {
        r.reason = "no CUDA device found";
    } else {
        r.devices = n;
    }
    return r;
}

// Once per process; a child forked while another thread was inside cudaGetDeviceCount does not
// wait for it (os/once_per_process.hpp) and does not touch the runtime.
once_per_process<cuda_probe> probe_once;
const cuda_probe forked_mid_probe{0, "this process was forked while CUDA was being initialized"};

const cuda_probe& probe() { return probe_once.get(run_probe, forked_mid_probe); }

std::atomic<long> live_device{0};
std::atomic<long> live_pinned{0};
thread_local bool host_function_thread = false;

}  // namespace

cuda_host_function_scope::cuda_host_function_scope() { host_function_thread = true; }
cuda_host_function_scope::~cuda_host_function_scope() { host_function_thread = false; }
bool in_cuda_host_function() noexcept { return host_function_thread; }

cudaError_t cuda_fault(const char* call) {
    if (host_function_thread) return cudaErrorNotPermitted;
    if (sys::inject(call) == 0) return cudaSuccess;
    return errno == ENOMEM ? cudaErrorMemoryAllocation : cudaErrorUnknown;
}

live_allocations live_cuda_allocations() { return {live_device.load(), live_pinned.load()}; }

void count_pinned_allocation(int delta) { live_pinned += delta; }

bool cuda_available() { return probe().devices > 0; }

void cuda_check(cudaError_t e, const char* what, const io_context& where) {
    if (e == cudaSuccess) return;
    cudaGetLastError();  // clear sticky-free errors so the next call starts clean
    throw cuda_error(static_cast<int>(e), std::string(what) + ": " + cudaGetErrorString(e), where);
}

int device_of(const void* p) {
    cudaPointerAttributes a{};
    cuda_check(FERRY_CUDA(cudaPointerGetAttributes, &a, p), "cudaPointerGetAttributes");
    return a.device;
}

void set_device(int device) {
    thread_local int current = -1;
    if (current == device) return;
    cuda_check(FERRY_CUDA(cudaSetDevice, device), "cudaSetDevice");
    current = device;
}

}  // namespace ferry::detail

namespace ferry {

int cuda_device_count() { return detail::probe().devices; }

std::string cuda_unavailable_reason() { return detail::probe().reason; }

std::string to_string(memory_kind k) {
    switch (k) {
        case memory_kind::host: return "host";
        case memory_kind::pinned: return "pinned";
        case memory_kind::device: return "device";
        case memory_kind::managed: return "managed";
    }
    return "?";
}

memory_kind memory_kind_of(const void* p) {
    if (!p || !detail::cuda_available()) return memory_kind::host;
    cudaPointerAttributes a{};
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        cudaGetLastError();
        return memory_kind::host;
    }
    switch (a.type) {
        case cudaMemoryTypeDevice: return memory_kind::device;
        case cudaMemoryTypeManaged: return memory_kind::managed;
        case cudaMemoryTypeHost: return memory_kind::pinned;
        default: return memory_kind::host;
    }
}

int device_of(const void* p) {
    memory_kind k = memory_kind_of(p);
    if (k != memory_kind::device && k != memory_kind::managed)
        throw usage_error("not GPU memory: " + to_string(k) + " memory has no device");
    return detail::device_of(p);
}

void synchronize(stream_t s) {
    if (!detail::cuda_available()) throw cuda_error(cudaErrorNoDevice, "cannot synchronize a stream: " + cuda_unavailable_reason());
    detail::cuda_check(FERRY_CUDA(cudaStreamSynchronize, s), "cudaStreamSynchronize");
}

// ---- device_buffer ----

device_buffer::device_buffer(std::size_t size, int device) : size_(size), device_(device) {
    if (!detail::cuda_available()) throw cuda_error(cudaErrorNoDevice, "cannot allocate GPU memory: " + cuda_unavailable_reason());
    detail::set_device(device);
    if (size) {
        detail::cuda_check(FERRY_CUDA(cudaMalloc, &ptr_, size), "cudaMalloc");
        ++detail::live_device;
    }
}
device_buffer::device_buffer(device_buffer&& o) noexcept
    : ptr_(std::exchange(o.ptr_, nullptr)), size_(std::exchange(o.size_, 0)), device_(o.device_) {}
device_buffer& device_buffer::operator=(device_buffer&& o) noexcept {
    if (this != &o) {
        try { reset(); } catch (...) {}
        ptr_ = std::exchange(o.ptr_, nullptr);
        size_ = std::exchange(o.size_, 0);
        device_ = o.device_;
    }
    return *this;
}
device_buffer::~device_buffer() {
    // At process exit the runtime may be unloading already: ignore what cudaFree says.
    if (ptr_) {
        cudaFree(ptr_);
        --detail::live_device;
    }
}
void device_buffer::reset() {
    if (!ptr_) return;
    void* p = std::exchange(ptr_, nullptr);
    size_ = 0;
    --detail::live_device;
    detail::cuda_check(cudaFree(p), "cudaFree");
}

// ---- pinned_buffer ----

pinned_buffer::pinned_buffer(std::size_t size) : size_(size) {
    if (!detail::cuda_available()) throw cuda_error(cudaErrorNoDevice, "cannot allocate pinned memory: " + cuda_unavailable_reason());
    if (size) {
        detail::cuda_check(FERRY_CUDA(cudaHostAlloc, &ptr_, size, cudaHostAllocPortable), "cudaHostAlloc");
        detail::count_pinned_allocation(+1);
    }
}
pinned_buffer::pinned_buffer(pinned_buffer&& o) noexcept
    : ptr_(std::exchange(o.ptr_, nullptr)), size_(std::exchange(o.size_, 0)) {}
pinned_buffer& pinned_buffer::operator=(pinned_buffer&& o) noexcept {
    if (this != &o) {
        try { reset(); } catch (...) {}
        ptr_ = std::exchange(o.ptr_, nullptr);
        size_ = std::exchange(o.size_, 0);
    }
    return *this;
}
pinned_buffer::~pinned_buffer() {
    if (ptr_) {
        cudaFreeHost(ptr_);
        detail::count_pinned_allocation(-1);
    }
}
void pinned_buffer::reset() {
    if (!ptr_) return;
    void* p = std::exchange(ptr_, nullptr);
    size_ = 0;
    detail::count_pinned_allocation(-1);
    detail::cuda_check(cudaFreeHost(p), "cudaFreeHost");
}

// ---- copies ----

void copy_memory(void* dst, const void* src, std::size_t n) {
    if (n == 0) return;
    bool gpu = memory_kind_of(dst) != memory_kind::host || memory_kind_of(src) != memory_kind::host;
    if (!gpu) {
        std::memcpy(dst, src, n);
        return;
    }
    detail::cuda_check(FERRY_CUDA(cudaMemcpy, dst, src, n, cudaMemcpyDefault), "cudaMemcpy");
    // From pageable memory cudaMemcpy may return once the bytes are staged, before they land;
    // work on other (non-blocking) streams must see them, so wait for the copy itself.
    detail::cuda_check(FERRY_CUDA(cudaStreamSynchronize, cudaStreamLegacy), "cudaStreamSynchronize");
}

void fill_memory(void* dst, int byte, std::size_t n) {
    if (n == 0) return;
    memory_kind k = memory_kind_of(dst);
    if (k == memory_kind::host || k == memory_kind::pinned) {
        std::memset(dst, byte, n);
        return;
    }
    detail::cuda_check(FERRY_CUDA(cudaMemset, dst, byte, n), "cudaMemset");
    detail::cuda_check(FERRY_CUDA(cudaDeviceSynchronize), "cudaDeviceSynchronize");
}

// ---- stream ----

stream::stream(int device) {
    if (!detail::cuda_available()) throw cuda_error(cudaErrorNoDevice, "cannot create a stream: " + cuda_unavailable_reason());
    detail::set_device(device);
    cudaStream_t s = nullptr;
    detail::cuda_check(FERRY_CUDA(cudaStreamCreateWithFlags, &s, cudaStreamNonBlocking), "cudaStreamCreate");
    s_ = reinterpret_cast<stream_t>(s);
}
stream::stream(stream&& o) noexcept : s_(std::exchange(o.s_, nullptr)) {}
stream& stream::operator=(stream&& o) noexcept {
    if (this != &o) {
        if (s_) cudaStreamDestroy(reinterpret_cast<cudaStream_t>(s_));
        s_ = std::exchange(o.s_, nullptr);
    }
    return *this;
}
stream::~stream() {
    if (s_) cudaStreamDestroy(reinterpret_cast<cudaStream_t>(s_));
}
void stream::synchronize() const {
    detail::cuda_check(FERRY_CUDA(cudaStreamSynchronize, reinterpret_cast<cudaStream_t>(s_)), "cudaStreamSynchronize");
}

}  // namespace ferry
