#include "os/reopen.hpp"

#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>

#include "os/sys.hpp"

namespace ferry::detail {
namespace {

std::atomic<std::size_t> open_count{0};

// A place under the cap, taken before the open so that racing workers cannot overshoot it.
bool take_place() noexcept {
    const std::size_t cap = reopened_descriptor_cap();
    std::size_t n = open_count.load(std::memory_order_relaxed);
    do {
        if (n >= cap) return false;
    } while (!open_count.compare_exchange_weak(n, n + 1, std::memory_order_relaxed));
    return true;
}

void give_place() noexcept { open_count.fetch_sub(1, std::memory_order_relaxed); }

int refuse(const char** why, const char* reason, int code) noexcept {
    if (why) *why = reason;
    errno = code;
    return -1;
}

}  // namespace

std::size_t reopened_descriptor_cap() noexcept {
    // Read at each open, not once: a process may lower (or raise) its limit after ferry started.
    rlimit r{};
    if (::getrlimit(RLIMIT_NOFILE, &r) != 0) return 0;
    if (r.rlim_cur == RLIM_INFINITY) return 1024;
    return static_cast<std::size_t>(std::min<rlim_t>(1024, r.rlim_cur / 4));
}

std::size_t reopened_descriptors() noexcept { return open_count.load(std::memory_order_relaxed); }

int reopen_for_reading(int fd, const char** why) noexcept {
    if (!take_place()) return refuse(why, "the process holds its cap of extra descriptors", 0);
    // The same open file, not the same path: a rename over the path or an unlink since the
    // first open cannot switch it to other bytes.
    char self[32];
    std::snprintf(self, sizeof self, "/proc/self/fd/%d", fd);
    int mine = sys::open(self, O_RDONLY | O_CLOEXEC);
    if (mine < 0) {
        int e = errno;
        give_place();
        return refuse(why, "cannot open it again through /proc/self/fd", e);
    }
    struct stat a {}, b {};
    if (sys::fstat(mine, &a) != 0 || sys::fstat(fd, &b) != 0) {
        int e = errno;
        close_reopened(mine);
        return refuse(why, "fstat failed", e);
    }
    if (a.st_dev != b.st_dev || a.st_ino != b.st_ino) {
        close_reopened(mine);
        return refuse(why, "/proc/self/fd opened another file", 0);
    }
    return mine;
}

void close_reopened(int fd) noexcept {
    // Read-only: a failed close loses no data, and Linux releases the descriptor either way.
    sys::close(fd);
    give_place();
}

}  // namespace ferry::detail
