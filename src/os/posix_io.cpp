#include "os/posix_io.hpp"

#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "os/sys.hpp"

namespace ferry::detail {

void eagain_backoff(unsigned k) {
    if (k < 4) return;
    if (k < 16) {
        std::this_thread::yield();
        return;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(std::min(1000u, 10u << std::min(k - 16, 7u))));
}

std::size_t pread_full(int fd, void* dst, std::size_t n, std::uint64_t offset, const io_context& where) {
    auto* p = static_cast<char*>(dst);
    std::size_t done = 0;
    unsigned again = 0;
    while (done < n) {
        std::size_t want = std::min(n - done, max_io_per_call);
        ssize_t r = sys::pread(fd, p + done, want, static_cast<off_t>(offset + done));
        if (r < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN) {
                eagain_backoff(again++);
                continue;
            }
            throw system_error(errno, "read failed", where);
        }
        if (r == 0) break;  // end of file
        done += static_cast<std::size_t>(r);
    }
    return done;
}

void pwrite_full(int fd, const void* src, std::size_t n, std::uint64_t offset, const io_context& where) {
    auto* p = static_cast<const char*>(src);
    std::size_t done = 0;
    int zero_writes = 0;
    unsigned again = 0;
    while (done < n) {
        std::size_t want = std::min(n - done, max_io_per_call);
        ssize_t r = sys::pwrite(fd, p + done, want, static_cast<off_t>(offset + done));
        if (r < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN) {
                eagain_backoff(again++);
                continue;
            }
            throw system_error(errno, "write failed", where);
        }
        if (r == 0 && ++zero_writes > 3) throw system_error(ENOSPC, "write made no progress", where);
        done += static_cast<std::size_t>(r);
    }
}

bool start_writeback(int fd, std::uint64_t offset, std::uint64_t n) {
    for (int tries = 0; tries < 3; ++tries) {
        if (sys::sync_file_range_write(fd, static_cast<off_t>(offset), static_cast<off_t>(n)) == 0) return true;
        if (errno != EINTR) return false;
    }
    return false;
}

std::uint64_t file_size(int fd, const std::string& path) {
    struct stat st {};
    if (sys::fstat(fd, &st) != 0) throw system_error(errno, "fstat failed", {path});
    return static_cast<std::uint64_t>(st.st_size);
}

namespace {

std::string version_text(const struct stat& st) {
    return "inode " + std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino) + " size " +
           std::to_string(st.st_size) + " mtime " + std::to_string(st.st_mtim.tv_sec) + "." +
           std::to_string(st.st_mtim.tv_nsec);
}

}  // namespace

std::string file_version(int fd) {
    struct stat st {};
    if (sys::fstat(fd, &st) != 0) return {};
    return version_text(st);
}

std::string file_version(const std::string& path, std::string* why) {
    struct stat st {};
    if (sys::stat(path.c_str(), &st) == 0) return version_text(st);
    if (why) *why = std::strerror(errno);
    return {};
}

}  // namespace ferry::detail
