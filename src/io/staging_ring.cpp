#include "io/staging_ring.hpp"

#include "cuda/cuda_runtime.hpp"
#include "stats_counter.hpp"

namespace ferry::detail {

staging_ring::~staging_ring() {
    for (auto& [device, s] : slots_) {
        if (!s->ring) continue;
        try {
            set_device(device);
        } catch (...) {  // a destructor never throws; the releases below work from any device
        }
        s->ring.reset();  // the stream waits for its copies before the memory goes
        note_staging(-static_cast<std::int64_t>(count_ * buffer_size_));
    }
}

staging_ring::lease staging_ring::take(int device) {
    lease l;
    if (count_ < 2) return l;
    slot* s;
    {
        std::lock_guard lock(slots_mutex_);
        auto& p = slots_[device];
        if (!p) p = std::make_unique<slot>();
        s = p.get();
    }
    std::unique_lock use(s->use, std::try_to_lock);
    if (!use.owns_lock()) return l;
    if (!s->ring) {
        set_device(device);
        auto r = std::make_unique<device_ring>();  // released as a whole if any part fails
        r->stream = owned_stream::create("cudaStreamCreate (staging ring)");
        r->start = owned_event::create("cudaEventCreate (staging ring)");
        r->copied = std::make_unique<owned_event[]>(count_);
        for (std::size_t i = 0; i < count_; ++i) r->copied[i] = owned_event::create("cudaEventCreate (staging ring)");
        r->memory = owned_pinned::allocate(count_ * buffer_size_, "cudaHostAlloc (staging ring)");
        note_staging(static_cast<std::int64_t>(count_ * buffer_size_));
        s->ring = std::move(r);
    }
    l.lock = std::move(use);
    l.ring = s->ring.get();
    return l;
}

}  // namespace ferry::detail
