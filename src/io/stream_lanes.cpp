#include "io/stream_lanes.hpp"

#include "cuda/cuda_runtime.hpp"
#include "stats_counter.hpp"

namespace ferry::detail {
namespace {

void release(stream_lanes::device_lanes& d) {
    for (auto& l : d.lanes) {
        if (l.stream) {
            cudaStreamSynchronize(l.stream);
            cudaStreamDestroy(l.stream);
        }
        if (l.done) cudaEventDestroy(l.done);
        for (char* b : l.buffers) {
            if (!b) continue;
            cudaFreeHost(b);
            count_pinned_allocation(-1);
        }
    }
    if (d.start) cudaEventDestroy(d.start);
    d = {};
}

}  // namespace

stream_lanes::~stream_lanes() {
    for (auto& [device, d] : devices_) {
        try {
            set_device(device);
        } catch (...) {  // a destructor never throws; the releases below work from any device
        }
        for (const auto& l : d.lanes)
            for (char* b : l.buffers)
                if (b) note_staging(-static_cast<std::int64_t>(buffer_size_));
        release(d);
    }
}

stream_lanes::device_lanes& stream_lanes::on_device(int device) {
    auto it = devices_.find(device);
    if (it != devices_.end()) return it->second;
    set_device(device);
    device_lanes d;
    d.lanes.resize(count_);
    try {
        cuda_check(FERRY_CUDA(cudaEventCreateWithFlags, &d.start, cudaEventDisableTiming), "cudaEventCreate (stream lanes)");
        for (auto& l : d.lanes) {
            cuda_check(FERRY_CUDA(cudaStreamCreateWithFlags, &l.stream, cudaStreamNonBlocking),
                       "cudaStreamCreate (stream lanes)");
            cuda_check(FERRY_CUDA(cudaEventCreateWithFlags, &l.done, cudaEventDisableTiming),
                       "cudaEventCreate (stream lanes)");
            for (char*& b : l.buffers) {
                void* p = nullptr;
                cuda_check(FERRY_CUDA(cudaHostAlloc, &p, buffer_size_, cudaHostAllocPortable),
                           "cudaHostAlloc (stream lane buffer)");
                b = static_cast<char*>(p);
                count_pinned_allocation(+1);
            }
        }
    } catch (...) {
        release(d);
        throw;
    }
    note_staging(static_cast<std::int64_t>(2 * d.lanes.size() * buffer_size_));
    return devices_.emplace(device, std::move(d)).first->second;
}

}  // namespace ferry::detail
