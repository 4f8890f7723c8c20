// What stream-ordered requests to and from GPU memory move through: per device, a few lanes,
// each a ferry-owned stream with two pinned buffers that its chunks use in turn. A lane's stream
// orders every use of its buffers, across requests too, so no buffer is refilled before its copy
// finished; the file side of each chunk is driven by CUDA host functions on that stream
// (io/stream_ordered.cpp).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "cuda/cuda_owners.hpp"

namespace ferry::detail {

struct stream_request;

/// When the file side of a lane's next read chunk may start ahead of its own host function:
/// use u of the lane's buffers is free once the host function of use u - 1 has run, since the
/// copy out of that buffer (use u - 2) is ordered before it on the lane's stream. A request's
/// first read chunk on a lane starts at once where that host function already ran (the lane was
/// idle), else that host function starts it, also when it belongs to another request. So a
/// request queued behind another reads ahead as the chunks within one do, and the first chunks
/// of a request on idle lanes are read side by side rather than one host function after the
/// other. Its own mutex: host functions take it, never enqueue_mutex.
struct lane_handoff {
    std::mutex m;
    std::size_t ran = 0;  ///< uses whose host function reached its hand-off point (in order)
    std::weak_ptr<stream_request> next;  ///< the read chunk of use next_use, to start then
    std::size_t next_chunk = 0;
    std::size_t next_use = 0;
};

/// Members are destroyed bottom up: the stream (after its work) before the buffers it copies.
struct stream_lane {
    owned_pinned buffers[2];
    std::size_t uses = 0;  ///< chunks queued on this lane so far; use u takes buffers[u % 2]
    std::unique_ptr<lane_handoff> handoff = std::make_unique<lane_handoff>();
    owned_event done;      ///< recorded after a request's last chunk on this lane
    owned_stream stream;
};

class stream_lanes {
public:
    stream_lanes(std::size_t lanes, std::size_t buffer_size) : count_(lanes), buffer_size_(buffer_size) {}
    ~stream_lanes();
    stream_lanes(const stream_lanes&) = delete;
    stream_lanes& operator=(const stream_lanes&) = delete;

    struct device_lanes {
        owned_event start;  ///< recorded on the caller's stream where a request begins
        std::vector<stream_lane> lanes;
        std::size_t next = 0;         ///< the lane the next chunk goes to
    };

    /// The lanes of `device`, made on first use (all of them or none). The caller holds
    /// enqueue_mutex() for as long as it uses them: the events, `uses` and `next` are shared.
    device_lanes& on_device(int device);
    std::mutex& enqueue_mutex() noexcept { return mutex_; }
    /// Lanes per device.
    std::size_t count() const noexcept { return count_; }
    /// Bytes of each of a lane's two buffers.
    std::size_t buffer_size() const noexcept { return buffer_size_; }

private:
    std::size_t count_;
    std::size_t buffer_size_;
    std::mutex mutex_;
    std::map<int, device_lanes> devices_;
};

}  // namespace ferry::detail
