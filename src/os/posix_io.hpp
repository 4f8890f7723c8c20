// Whole-range pread/pwrite: retries EINTR, EAGAIN (with backoff) and short counts, and splits
// requests below the kernel's per-call cap.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "ferry/error.hpp"

namespace ferry::detail {

/// Linux transfers at most this many bytes in one read or write call.
inline constexpr std::size_t max_io_per_call = 0x7ffff000;

/// Reads until n bytes or end of file; returns the count. Throws system_error.
std::size_t pread_full(int fd, void* dst, std::size_t n, std::uint64_t offset, const io_context& where);
/// Writes all n bytes. Throws system_error.
void pwrite_full(int fd, const void* src, std::size_t n, std::uint64_t offset, const io_context& where);
/// Asks the kernel to start writing [offset, offset + n) of fd back to storage now, without
/// waiting, so that a later fsync finds little left to do. A hint: returns false (and does
/// nothing) where the file system or the descriptor does not take it; errors of the writeback
/// itself are reported by the fsync that makes the data durable.
bool start_writeback(int fd, std::uint64_t offset, std::uint64_t n);
/// Current size (fstat). Throws system_error.
std::uint64_t file_size(int fd, const std::string& path);
/// The identity of an open file (device, inode, size, mtime) as text: two equal texts are the
/// same bytes unless rewritten within the clock's step. Empty where fstat fails.
std::string file_version(int fd);
/// The same for a path, without opening it; `why` gets strerror where stat fails (empty result).
std::string file_version(const std::string& path, std::string* why);

/// Before the k-th retry of a call that failed with EAGAIN: nothing for the first few, then a
/// yield, then sleeps growing to 1 ms, so that a busy device is not spun on.
void eagain_backoff(unsigned k);

}  // namespace ferry::detail
