// Every system call the library makes goes through here, so that a test build
// (FERRY_FAULT_INJECTION) can make any of them fail; in other builds these are the calls.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstddef>

namespace ferry::sys {

#ifdef FERRY_FAULT_INJECTION
/// Returns -1 with errno set to fail the call named `call`, or 0 to let it run.
/// Installed by tests; null in production.
using fault_hook = int (*)(const char* call);
extern fault_hook hook;
#define FERRY_SYS_FAULT(name)                      \
    do {                                           \
        if (::ferry::sys::hook && ::ferry::sys::hook(name)) return -1; \
    } while (0)
#else
#define FERRY_SYS_FAULT(name) \
    do {                      \
    } while (0)
#endif

inline int open(const char* path, int flags, mode_t mode = 0) {
    FERRY_SYS_FAULT("open");
    return ::open(path, flags | O_CLOEXEC, mode);
}
inline int close(int fd) { return ::close(fd); }
inline ssize_t pread(int fd, void* buf, std::size_t n, off_t off) {
    FERRY_SYS_FAULT("pread");
    return ::pread(fd, buf, n, off);
}
inline ssize_t pwrite(int fd, const void* buf, std::size_t n, off_t off) {
    FERRY_SYS_FAULT("pwrite");
    return ::pwrite(fd, buf, n, off);
}
inline int fstat(int fd, struct stat* st) {
    FERRY_SYS_FAULT("fstat");
    return ::fstat(fd, st);
}
inline int fsync(int fd) {
    FERRY_SYS_FAULT("fsync");
    return ::fsync(fd);
}
inline int ftruncate(int fd, off_t size) {
    FERRY_SYS_FAULT("ftruncate");
    return ::ftruncate(fd, size);
}

}  // namespace ferry::sys
