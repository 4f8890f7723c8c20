// Every system call the library makes on file data goes through here, so that tests can make
// any of them fail or come up short (the fault-injection seam). Without a hook installed, each
// wrapper is the call itself plus one predictable branch.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstddef>

namespace ferry::sys {

/// Called before each system call with its name and, for transfers, the byte count, which the
/// hook may lower to force a short transfer. Return -1 with errno set to fail the call, 0 to
/// let it run. Installed by tests only.
using fault_hook = int (*)(const char* call, std::size_t* length);
extern std::atomic<fault_hook> hook;

inline int inject(const char* call, std::size_t* length = nullptr) {
    fault_hook h = hook.load(std::memory_order_relaxed);
    return h ? h(call, length) : 0;
}

inline int open(const char* path, int flags, mode_t mode = 0) {
    if (inject("open")) return -1;
    return ::open(path, flags | O_CLOEXEC, mode);
}
inline ssize_t pread(int fd, void* buf, std::size_t n, off_t off) {
    if (inject("pread", &n)) return -1;
    return ::pread(fd, buf, n, off);
}
inline ssize_t pwrite(int fd, const void* buf, std::size_t n, off_t off) {
    if (inject("pwrite", &n)) return -1;
    return ::pwrite(fd, buf, n, off);
}
inline int fstat(int fd, struct stat* st) {
    if (inject("fstat")) return -1;
    return ::fstat(fd, st);
}
inline int fsync(int fd) {
    if (inject("fsync")) return -1;
    return ::fsync(fd);
}
inline int ftruncate(int fd, off_t size) {
    if (inject("ftruncate")) return -1;
    return ::ftruncate(fd, size);
}

}  // namespace ferry::sys
