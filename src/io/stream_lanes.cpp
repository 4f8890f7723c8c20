#include "io/stream_lanes.hpp"

#include "cuda/cuda_runtime.hpp"
#include "stats_counter.hpp"

namespace ferry::detail {

stream_lanes::~stream_lanes() {
    for (auto& [device, d] : devices_) {
        try {
            set_device(device);
        } catch (...) {  // a destructor never throws; the releases below work from any device
        }
        for (const auto& l : d.lanes)
            for (const auto& b : l.buffers)
                if (b.get()) note_staging(-static_cast<std::int64_t>(buffer_size_));
        d = {};  // each lane's stream waits for its work before its buffers go
    }
}

stream_lanes::device_lanes& stream_lanes::on_device(int device) {
    auto it = devices_.find(device);
    if (it != devices_.end()) return it->second;
    set_device(device);
    device_lanes d;  // released as a whole if any part fails
    d.start = owned_event::create("cudaEventCreate (stream lanes)");
    d.lanes.resize(count_);
    for (auto& l : d.lanes) {
        l.stream = owned_stream::create("cudaStreamCreate (stream lanes)");
        l.done = owned_event::create("cudaEventCreate (stream lanes)");
        for (auto& b : l.buffers) b = owned_pinned::allocate(buffer_size_, "cudaHostAlloc (stream lane buffer)");
    }
    note_staging(static_cast<std::int64_t>(2 * d.lanes.size() * buffer_size_));
    return devices_.emplace(device, std::move(d)).first->second;
}

}  // namespace ferry::detail
