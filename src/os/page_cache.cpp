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
    const std::uint64_t window = 4ull << 20;  // map at most 4 MiB at a time
    std::uint64_t windows = (size + window - 1) / window;
    std::uint64_t step = std::max<std::uint64_t>(1, windows / static_cast<std::uint64_t>(max_samples));
    std::uint64_t resident = 0, total = 0;
    std::vector<unsigned char> vec(window / page);
    for (std::uint64_t w = 0; w < windows; w += step) {
        std::uint64_t off = w * window;
        std::size_t len = static_cast<std::size_t>(std::min(window, size - off));
        if (sys::inject("mmap")) return -1;
        void* p = ::mmap(nullptr, len, PROT_READ, MAP_SHARED, fd, static_cast<off_t>(off));
        if (p == MAP_FAILED) return -1;
        std::size_t pages = (len + page - 1) / page;
        int rc = sys::inject("mincore") ? -1 : ::mincore(p, len, vec.data());
        ::munmap(p, len);
        if (rc != 0) return -1;
        for (std::size_t i = 0; i < pages; ++i) resident += vec[i] & 1;
        total += pages;
    }
    return total ? static_cast<double>(resident) / static_cast<double>(total) : 1.0;
}

}  // namespace ferry::detail
