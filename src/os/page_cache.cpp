#include "os/page_cache.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <vector>

#include "os/fault_hook.hpp"

namespace ferry::detail {

double resident_fraction(int fd, std::uint64_t size, int max_samples) {
    if (size == 0) return 1.0;
    const std::uint64_t page = static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
    // The planner asks before every large read into GPU memory: one mapping of the whole file
    // (address space only, never touched) and mincore over small windows of it. Windows of
    // 4 MiB, each mapped on its own, cost 1.4-2.3 ms for an 800 MiB file, a tenth of its hot
    // read; mincore walks every page of a window.
    const std::uint64_t window = 256ull << 10;
    std::uint64_t windows = (size + window - 1) / window;
    std::uint64_t step = std::max<std::uint64_t>(1, windows / static_cast<std::uint64_t>(max_samples));
    if (sys::inject("mmap")) return -1;
    void* base = ::mmap(nullptr, static_cast<std::size_t>(size), PROT_READ, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED) return -1;
    std::uint64_t resident = 0, total = 0;
    std::vector<unsigned char> vec(window / page);
    bool failed = false;
    for (std::uint64_t w = 0; w < windows; w += step) {
        std::uint64_t off = w * window;
        std::size_t len = static_cast<std::size_t>(std::min(window, size - off));
        std::size_t pages = (len + page - 1) / page;
        if (sys::inject("mincore") || ::mincore(static_cast<char*>(base) + off, len, vec.data()) != 0) {
            failed = true;
            break;
        }
        for (std::size_t i = 0; i < pages; ++i) resident += vec[i] & 1;
        total += pages;
    }
    ::munmap(base, static_cast<std::size_t>(size));
    if (failed) return -1;
    return total ? static_cast<double>(resident) / static_cast<double>(total) : 1.0;
}

}  // namespace ferry::detail
