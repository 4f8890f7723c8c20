// Host path: pread/pwrite straight between the file and host memory (pageable or pinned).
#pragma once

#include <cstddef>
#include <cstdint>

#include "ferry/error.hpp"

namespace ferry::detail {

/// Reads exactly n bytes; throws end_of_file_error when the file ends first.
void host_read(int fd, char* dst, std::size_t n, std::uint64_t offset, const io_context& where);
void host_write(int fd, const char* src, std::size_t n, std::uint64_t offset, const io_context& where);

}  // namespace ferry::detail
