// Page-locked host memory for staging. cudaHostAlloc made pinned memory at about 2 GB/s on the
// H200 machine (128 MiB in 70 ms, on the first call's critical path); anonymous memory mapped
// with transparent huge pages, touched by several threads at once and then registered with
// cudaHostRegister took 14.7 ms to touch on one thread and 2.6 ms to register for 64 MiB, so
// with the touching spread over threads the whole costs a few milliseconds. Registration can be
// refused (some virtual machines, old drivers): then cudaHostAlloc, as before.
#include <sys/mman.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "cuda/cuda_runtime.hpp"

namespace ferry::detail {
namespace {

constexpr std::size_t huge_page = 2u << 20;
// Below this, cudaHostAlloc is as quick and maps no more than asked.
constexpr std::size_t map_from = 4u << 20;
// Each touching thread takes at least this much.
constexpr std::size_t touch_per_thread = 8u << 20;

std::mutex mapped_mutex;
// The mapped (registered) allocations and their mapped sizes; the others came from cudaHostAlloc.
std::unordered_map<char*, std::size_t>& mapped() {
    static auto* m = new std::unordered_map<char*, std::size_t>();  // lives to exit
    return *m;
}

// Touches every page, so that the huge pages are made (and zeroed) by several threads at once
// rather than one fault at a time under cudaHostRegister.
void touch(char* p, std::size_t n) {
    const std::size_t threads = std::clamp<std::size_t>(n / touch_per_thread, 1, 8);
    const std::size_t per = (n / threads + huge_page - 1) / huge_page * huge_page;
    auto slice = [p, n, per](std::size_t t) {
        if (t * per < n) std::memset(p + t * per, 0, std::min(per, n - t * per));
    };
    std::vector<std::thread> ts;
    std::size_t t = 1;
    try {
        for (; t < threads; ++t) ts.emplace_back(slice, t);
    } catch (...) {
        // No thread to be had: this thread touches the slices left.
    }
    for (std::size_t rest = t; rest < threads; ++rest) slice(rest);
    slice(0);
    for (auto& th : ts) th.join();
}

char* map_and_register(std::size_t bytes) {
    std::size_t n = (bytes + huge_page - 1) / huge_page * huge_page;
    void* m = ::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) return nullptr;
    char* p = static_cast<char*>(m);
    ::madvise(p, n, MADV_HUGEPAGE);  // a hint: without huge pages it is slower, not wrong
    touch(p, n);
    if (FERRY_CUDA(cudaHostRegister, p, n, cudaHostRegisterPortable) != cudaSuccess) {
        cudaGetLastError();
        ::munmap(p, n);
        return nullptr;
    }
    std::lock_guard lock(mapped_mutex);
    mapped()[p] = n;
    return p;
}

}  // namespace

char* pin_host_memory(std::size_t bytes, const char* what) {
    // Without a driver cudaHostAlloc says "insufficient driver" (35) after the memory was
    // mapped and touched: say what is true, as pinned_buffer does, before any of that.
    if (!cuda_available())
        throw cuda_error(cudaErrorNoDevice, std::string(what) + ": " + cuda_unavailable_reason());
    char* p = bytes >= map_from ? map_and_register(bytes) : nullptr;
    if (!p) {
        void* h = nullptr;
        cuda_check(FERRY_CUDA(cudaHostAlloc, &h, bytes, cudaHostAllocPortable), what);
        p = static_cast<char*>(h);
    }
    count_pinned_allocation(+1);
    return p;
}

void unpin_host_memory(char* p) noexcept {
    if (!p) return;
    std::size_t n = 0;
    {
        std::lock_guard lock(mapped_mutex);
        auto it = mapped().find(p);
        if (it != mapped().end()) {
            n = it->second;
            mapped().erase(it);
        }
    }
    if (n) {
        cudaHostUnregister(p);
        ::munmap(p, n);
    } else {
        cudaFreeHost(p);
    }
    count_pinned_allocation(-1);
}

}  // namespace ferry::detail
