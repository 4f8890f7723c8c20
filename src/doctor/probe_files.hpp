// What the path probes share: an owner that closes a descriptor, and the limits of a scan.
#pragma once

#include <unistd.h>

#include <cstddef>
#include <cstdint>

namespace ferry::doctor {

/// Closes an fd on scope exit.
struct fd_owner {
    int fd = -1;
    explicit fd_owner(int f) : fd(f) {}
    fd_owner(const fd_owner&) = delete;
    fd_owner& operator=(const fd_owner&) = delete;
    ~fd_owner() {
        if (fd >= 0) ::close(fd);
    }
};

// A directory holding more files than this is measured on its first files only, and the
// residency scan of one path stops after this many bytes of files (mincore is cheap, not free).
inline constexpr std::size_t max_files_scanned = 1024;
inline constexpr std::uint64_t max_bytes_scanned = 16ull << 40;

}  // namespace ferry::doctor
