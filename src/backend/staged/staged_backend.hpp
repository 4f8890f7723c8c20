// Staged path: file <-> pinned staging buffers <-> memory, pipelined. Each worker cycles
// through its own buffers: while the copy out of buffer k runs on the GPU, the worker reads the
// next chunk into buffer k+1; a buffer is reused only after the event of its last copy fired.
// No synchronize per chunk; one stream synchronize at the end of each task.
#pragma once

#include <cstddef>
#include <cstdint>

#include "backend/staged/staging_pool.hpp"
#include "ferry/error.hpp"

namespace ferry::detail {

/// Where the bytes of a staged read come from.
struct staged_source {
    int fd = -1;            ///< the descriptor to read
    std::size_t align = 0;  ///< 0: buffered reads; else O_DIRECT with this alignment
};

/// Reads exactly n bytes at `offset` into `dst`: device or managed memory on `device` when
/// `to_device`, else host memory (bounce through the buffers, used for O_DIRECT into host).
void staged_read(staging_slot& slot, std::size_t buffer_size, const staged_source& src, char* dst,
                 bool to_device, int device, std::size_t n, std::uint64_t offset, const io_context& where);

/// Writes n bytes of device (or managed) memory `src` on `device` at `offset` of `fd`.
void staged_write(staging_slot& slot, std::size_t buffer_size, int fd, const char* src, int device,
                  std::size_t n, std::uint64_t offset, const io_context& where);

}  // namespace ferry::detail
