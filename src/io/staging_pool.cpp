#include "io/staging_pool.hpp"

#include <cstdlib>

#include "cuda/cuda_runtime.hpp"
#include "stats_counter.hpp"

namespace ferry::detail {

namespace {
constexpr std::size_t granule = 64 << 10;
}

staging_slot::device_queue& staging_slot::on_device(int device) {
    auto it = devices.find(device);
    if (it != devices.end()) return it->second;
    set_device(device);
    device_queue q;  // released as a whole if any part fails
    q.stream = owned_stream::create("cudaStreamCreate (staging)");
    q.events.resize(buffers.size());
    for (auto& e : q.events) e = owned_event::create("cudaEventCreate (staging)");
    return devices.emplace(device, std::move(q)).first->second;
}

void staging_slot::wait_free(std::size_t i) {
    if (!pending[i]) return;
    cudaEvent_t e = pending[i];
    pending[i] = nullptr;
    cuda_check(FERRY_CUDA(cudaEventSynchronize, e), "cudaEventSynchronize (staging buffer reuse)");
}

staging_pool::staging_pool(std::size_t workers, std::size_t buffers, std::size_t buffer_size, std::size_t limit)
    : workers_(workers), buffers_(buffers), buffer_size_(buffer_size) {
    std::size_t per = limit / (workers_ * buffers_);
    if (buffer_size_ > per) buffer_size_ = per;
    buffer_size_ = buffer_size_ / granule * granule;
    if (buffer_size_ < granule) buffer_size_ = granule;
    slots_.resize(workers_);
}

staging_pool::~staging_pool() {
    slots_.clear();  // each slot's streams wait for their work before the memory goes
    if (!memory_) return;
    note_staging(-static_cast<std::int64_t>(allocated_));
    if (pinned_) {
        unpin_host_memory(memory_);
    } else {
        std::free(memory_);
    }
}

void staging_pool::allocate() {
    std::size_t total = workers_ * buffers_ * buffer_size_;
    if (cuda_available()) {
        memory_ = pin_host_memory(total, "cudaHostAlloc (staging buffers)");
        pinned_ = true;
    } else {
        void* p = nullptr;
        if (posix_memalign(&p, 4096, total) != 0) throw std::bad_alloc();
        memory_ = static_cast<char*>(p);
    }
    allocated_ = total;
    note_staging(static_cast<std::int64_t>(total));
    char* at = memory_;
    for (auto& s : slots_) {
        s.buffers.resize(buffers_);
        s.pending.assign(buffers_, nullptr);
        for (auto& b : s.buffers) {
            b = at;
            at += buffer_size_;
        }
    }
}

staging_slot& staging_pool::slot(int index) {
    std::call_once(once_, [this] { allocate(); });
    return slots_.at(static_cast<std::size_t>(index));
}

}  // namespace ferry::detail
