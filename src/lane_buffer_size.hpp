// The size of each of a stream lane's two pinned buffers: one formula for the settings (which
// resolve lane_buffer_size when it is 0) and the engine (which fits the asked size within what
// its staging pool actually took).
#pragma once

#include <algorithm>
#include <cstddef>

namespace ferry::detail {

/// `wanted` bytes, cut to what `lanes` lanes of two buffers each may take of `limit` once the
/// workers' staging (`threads` x `worker_buffers` x `worker_buffer_size`) is counted, rounded
/// down to 64 KiB and never below 64 KiB (lanes work even when the workers took everything).
inline std::size_t fit_lane_buffer_size(std::size_t wanted, std::size_t threads, std::size_t worker_buffers,
                                        std::size_t worker_buffer_size, std::size_t limit,
                                        std::size_t lanes) noexcept {
    constexpr std::size_t granule = 64u << 10;
    const std::size_t used = threads * worker_buffers * worker_buffer_size;
    const std::size_t left = limit > used ? (limit - used) / (2 * std::max<std::size_t>(1, lanes)) : 0;
    return std::max(std::min(wanted, left) / granule * granule, granule);
}

}  // namespace ferry::detail
