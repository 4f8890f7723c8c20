// Whole-range pread/pwrite: retries EINTR, EAGAIN and short counts, and splits requests below
// the kernel's per-call cap. Alignment queries for O_DIRECT.
#pragma once

#include <cstddef>
#include <cstdint>

#include "ferry/error.hpp"

namespace ferry::detail {

/// Linux transfers at most this many bytes in one read or write call.
inline constexpr std::size_t max_io_per_call = 0x7ffff000;

/// Reads until n bytes or end of file; returns the count. Throws system_error.
std::size_t pread_full(int fd, void* dst, std::size_t n, std::uint64_t offset, const io_context& where);
/// Writes all n bytes. Throws system_error.
void pwrite_full(int fd, const void* src, std::size_t n, std::uint64_t offset, const io_context& where);
/// Current size (fstat). Throws system_error.
std::uint64_t file_size(int fd, const std::string& path);

/// O_DIRECT alignment of an open file.
struct direct_alignment {
    std::size_t memory = 4096;  ///< buffer address alignment
    std::size_t offset = 4096;  ///< file offset and length alignment
    bool from_statx = false;    ///< reported by statx(STATX_DIOALIGN), else the 4096 fallback
};
direct_alignment query_direct_alignment(int fd);

inline std::uint64_t align_down(std::uint64_t v, std::uint64_t a) { return v / a * a; }
inline std::uint64_t align_up(std::uint64_t v, std::uint64_t a) { return (v + a - 1) / a * a; }

}  // namespace ferry::detail
