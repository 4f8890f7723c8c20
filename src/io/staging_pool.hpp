// Pinned staging memory: allocated once per engine, capped by FERRY_STAGING_MEMORY_LIMIT, split
// into a fixed set of buffers per worker so that workers never contend for them.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <map>
#include <mutex>
#include <vector>

#include "cuda/cuda_owners.hpp"

namespace ferry::detail {

/// One worker's buffers, and for each device it copies to, a stream and an event per buffer.
/// Used by its worker only.
struct staging_slot {
    std::vector<char*> buffers;
    /// The event recorded after the last copy out of (or into) buffer i, or null when free.
    std::vector<cudaEvent_t> pending;
    std::size_t next = 0;

    /// Destroyed bottom up: the stream (after its work) before the events recorded on it.
    struct device_queue {
        std::vector<owned_event> events;
        owned_stream stream;
    };
    std::map<int, device_queue> devices;

    /// The stream and events for `device`, created on first use.
    device_queue& on_device(int device);
    /// Waits until buffer i is no longer read or written by a copy in flight.
    void wait_free(std::size_t i);
};

class staging_pool {
public:
    /// `buffer_size` is shrunk (to a multiple of 64 KiB, at least 64 KiB) so that
    /// workers * buffers * buffer_size stays within `limit`.
    staging_pool(std::size_t workers, std::size_t buffers, std::size_t buffer_size, std::size_t limit);
    ~staging_pool();
    staging_pool(const staging_pool&) = delete;
    staging_pool& operator=(const staging_pool&) = delete;

    /// The slot of worker `index`; allocates the pool on first use (pinned where CUDA works,
    /// else page-aligned host memory for O_DIRECT bounce buffers). Throws cuda_error.
    staging_slot& slot(int index);

    std::size_t buffer_size() const noexcept { return buffer_size_; }
    std::size_t buffers_per_worker() const noexcept { return buffers_; }
    /// Bytes allocated (0 until first use).
    std::size_t allocated() const noexcept { return allocated_; }
    bool pinned() const noexcept { return pinned_; }

private:
    void allocate();

    std::size_t workers_, buffers_, buffer_size_;
    std::once_flag once_;
    char* memory_ = nullptr;
    std::size_t allocated_ = 0;
    bool pinned_ = false;
    std::vector<staging_slot> slots_;
};

}  // namespace ferry::detail
