// The staged pipeline: a source <-> a worker's pinned staging buffers <-> memory. While the copy
// out of buffer k runs on the GPU, the worker reads the next chunk into buffer k+1; a buffer is
// reused only after the event of its last copy fired. No synchronize per chunk; one stream
// synchronize at the end of each task.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

#include "backend/source.hpp"
#include "io/staging_pool.hpp"

namespace ferry::detail {

/// Reads exactly n bytes at `offset` of `src` into `dst`: GPU (device or managed) memory of
/// `device` when given, else host memory (bounced through the buffers, for aligned sources).
void stage_read(source& src, staging_slot& slot, std::size_t buffer_size, char* dst, std::optional<int> device,
                std::size_t n, std::uint64_t offset, const io_context& where);

/// Writes n bytes of GPU (device or managed) memory `from` on `device` at `offset` of `dst`.
void stage_write(source& dst, staging_slot& slot, std::size_t buffer_size, const char* from, int device,
                 std::size_t n, std::uint64_t offset, const io_context& where);

}  // namespace ferry::detail
