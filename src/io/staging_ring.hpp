// What a large read into GPU memory moves through when its caller waits for it (file::read):
// per device, one ring of pinned buffers and one ferry-owned stream, driven by the calling
// thread itself (io/ring_read.cpp). The thread waits for each buffer's read on the file
// workers, queues its copy to the GPU at once and starts the read of a buffer whose copy has
// finished, so reads run as far ahead as the ring holds and no copy waits behind another
// buffer's read. The stream lanes cannot do that: their reads are started and waited for by
// CUDA host functions, which CUDA runs one at a time.
//
// One read uses a device's ring at a time; a read that finds it taken goes through the lanes.
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <mutex>

#include "cuda/cuda_owners.hpp"

namespace ferry::detail {

class staging_ring {
public:
    /// `buffers` of `buffer_size` bytes per device (0 buffers: no ring; take() finds none).
    staging_ring(std::size_t buffers, std::size_t buffer_size) : count_(buffers), buffer_size_(buffer_size) {}
    ~staging_ring();
    staging_ring(const staging_ring&) = delete;
    staging_ring& operator=(const staging_ring&) = delete;

    /// Members are destroyed bottom up: the stream (after its copies) before the memory.
    struct device_ring {
        owned_pinned memory;                 ///< count() buffers of buffer_size(), one after another
        std::unique_ptr<owned_event[]> copied;  ///< per buffer: recorded after its latest copy
        owned_event start;                   ///< where the request begins on the caller's thread's stream
        owned_stream stream;
        char* buffer(std::size_t i, std::size_t size) const noexcept { return memory.get() + i * size; }
    };

    /// The ring of `device` (made on first use), held by the caller for as long as `lock`
    /// lives; `ring` null where the ring is in use by another read, or there is none.
    struct lease {
        std::unique_lock<std::mutex> lock;
        device_ring* ring = nullptr;
    };
    lease take(int device);

    std::size_t count() const noexcept { return count_; }
    std::size_t buffer_size() const noexcept { return buffer_size_; }

private:
    struct slot {
        std::mutex use;
        std::unique_ptr<device_ring> ring;
    };
    std::size_t count_;
    std::size_t buffer_size_;
    std::mutex slots_mutex_;
    std::map<int, std::unique_ptr<slot>> slots_;
};

}  // namespace ferry::detail
