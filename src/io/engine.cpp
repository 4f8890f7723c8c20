#include "io/engine.hpp"

#include <mutex>
#include <thread>
#include <tuple>

namespace ferry::detail {

engine::engine(const settings& r)
    : staging_(r.threads, r.staging_buffers, r.staging_buffer_size, r.staging_memory_limit),
      pool_(r.threads) {}

engine::~engine() = default;

std::shared_ptr<engine> engine::shared(const settings& r) {
    using key = std::tuple<std::size_t, std::size_t, std::size_t, std::size_t>;
    static std::mutex m;
    // Never destroyed: workers may still be parked at process exit, when joining is unsafe.
    static auto* last = new std::pair<key, std::shared_ptr<engine>>();
    key k{r.threads, r.staging_buffers, r.staging_buffer_size, r.staging_memory_limit};
    std::lock_guard lock(m);
    if (!last->second || last->first != k) {
        last->second.reset();  // free the previous engine's pinned memory first, if unused
        // The last owner of an engine can be a request finishing on one of the engine's own
        // workers, which cannot join itself: let another thread tear it down then.
        last->second = std::shared_ptr<engine>(new engine(r), [](engine* e) {
            if (thread_pool::worker_index() >= 0) std::thread([e] { delete e; }).detach();
            else delete e;
        });
        last->first = k;
    }
    return last->second;
}

}  // namespace ferry::detail
