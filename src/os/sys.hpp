// Every system call the library makes on files goes through here, so that tests can make any
// of them fail or come up short (the fault-injection seam; CUDA and cuFile calls have theirs in
// cuda/cuda_runtime.hpp and backend/cufile). Without a hook installed, each wrapper is the call itself
// plus one predictable branch. The doctor's read-only probes are diagnostics, not data paths,
// and call libc directly.
#pragma once

#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdio>   // rename
#include <cstdlib>  // mkstemp

#include "os/fault_hook.hpp"

namespace ferry::sys {

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
inline ssize_t write(int fd, const void* buf, std::size_t n) {
    if (inject("write", &n)) return -1;
    return ::write(fd, buf, n);
}
/// A read-only shared mapping of `n` bytes of `fd` (MAP_FAILED and errno on failure).
inline void* mmap_read_only(int fd, std::size_t n) {
    if (inject("mmap")) return MAP_FAILED;
    return ::mmap(nullptr, n, PROT_READ, MAP_SHARED, fd, 0);
}
inline int access(const char* path, int mode) {
    if (inject("access")) return -1;
    return ::access(path, mode);
}
/// Creates and opens a unique file from `name_template` (ending in XXXXXX), close-on-exec.
inline int mkstemp(char* name_template) {
    if (inject("mkstemp")) return -1;
    return ::mkostemp(name_template, O_CLOEXEC);
}
inline int fstat(int fd, struct stat* st) {
    if (inject("fstat")) return -1;
    return ::fstat(fd, st);
}
inline int stat(const char* path, struct stat* st) {
    if (inject("stat")) return -1;
    return ::stat(path, st);
}
inline int fsync(int fd) {
    if (inject("fsync")) return -1;
    return ::fsync(fd);
}
/// Starts the writeback of the dirty pages in [off, off + n) without waiting for it
/// (sync_file_range with SYNC_FILE_RANGE_WRITE): a hint, durable only after fsync.
inline int sync_file_range_write(int fd, off_t off, off_t n) {
    if (inject("sync_file_range")) return -1;
    return ::sync_file_range(fd, off, n, SYNC_FILE_RANGE_WRITE);
}
inline int ftruncate(int fd, off_t size) {
    if (inject("ftruncate")) return -1;
    return ::ftruncate(fd, size);
}
inline int fcntl(int fd, int cmd, int arg = 0) {
    if (inject("fcntl")) return -1;
    return ::fcntl(fd, cmd, arg);
}
inline int flock(int fd, int op) {
    if (inject("flock")) return -1;
    return ::flock(fd, op);
}
inline int chmod(const char* path, mode_t mode) {
    if (inject("chmod")) return -1;
    return ::chmod(path, mode);
}
inline int rename(const char* from, const char* to) {
    if (inject("rename")) return -1;
    return ::rename(from, to);
}
inline int unlink(const char* path) {
    if (inject("unlink")) return -1;
    return ::unlink(path);
}
/// Linux releases the descriptor even when close reports an error (EIO from a deferred write,
/// say), so an injected failure closes it too: a test sees the error without a leak that the
/// real call could never cause.
inline int close(int fd) {
    int injected = inject("close");
    int e = errno;
    int rc = ::close(fd);
    if (injected) {
        errno = e;
        return -1;
    }
    return rc;
}

}  // namespace ferry::sys
