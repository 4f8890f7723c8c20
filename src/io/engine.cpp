#include "io/engine.hpp"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <tuple>
#include <vector>

#include "cuda/cuda_runtime.hpp"
#include "lane_buffer_size.hpp"
#include "os/fork_safe_mutex.hpp"

namespace ferry::detail {
namespace {
fork_safe_mutex registry_mutex;  // never left taken in a forked child
using tuning = std::tuple<std::size_t, std::size_t, std::size_t, std::size_t, std::size_t, std::size_t>;
struct cached {
    tuning k;
    std::shared_ptr<engine> e;
};
struct engines {
    pid_t pid = 0;
    std::vector<cached> by_use;  ///< one engine per tuning, the most recently asked for last
};
// Made at load, not on first use (a fork inside a first-use initialization would leave its
// guard taken in the child), and never destroyed by a static destructor, which would run
// whether or not files still use the engines; release_at_exit below decides instead.
engines* const cache = new engines();
// Engines no file uses are kept for the tunings asked for last, so that opening a file again
// finds its workers and pinned memory; older unused ones give their memory back.
constexpr std::size_t unused_kept = 2;

std::atomic<bool> exit_handler_registered{false};

// At exit, the cached engine is taken down when nothing uses it any more, so that its pinned
// memory and streams go back to CUDA while the runtime is still there (compute-sanitizer's leak
// check, for one, would report them otherwise). Skipped when a file still holds it, when exit
// was called on one of its workers, or in a forked child.
void release_at_exit() {
    if (thread_pool::worker_index() >= 0) return;
    std::unique_lock lock(registry_mutex, std::try_to_lock);
    if (!lock.owns_lock() || cache->pid != ::getpid()) return;
    std::vector<std::shared_ptr<engine>> unused;
    for (auto it = cache->by_use.begin(); it != cache->by_use.end();) {
        if (it->e.use_count() == 1) {
            unused.push_back(std::move(it->e));
            it = cache->by_use.erase(it);
        } else {
            ++it;
        }
    }
    lock.unlock();
    unused.clear();
}

// Each of a lane's two buffers: what the settings ask for, within what the workers' staging
// (as the pool took it) leaves under the staging memory limit.
std::size_t lane_buffer_size(const staging_pool& pool, const settings& r) {
    return fit_lane_buffer_size(r.lane_buffer_size, r.threads, pool.buffers_per_worker(), pool.buffer_size(),
                                r.staging_memory_limit, r.stream_lanes);
}
}  // namespace

engine::engine(const settings& r)
    : staging_(r.threads, r.staging_buffers, r.staging_buffer_size, r.staging_memory_limit),
      lanes_(std::max<std::size_t>(1, r.stream_lanes), lane_buffer_size(staging_, r)),
      pool_(r.threads) {}

engine::~engine() = default;

thread_pool& engine::file_workers() {
    std::call_once(file_workers_once_, [this] {
        file_workers_ = std::make_unique<thread_pool>(pool_.size());
        file_workers_started_ = file_workers_.get();
    });
    return *file_workers_;
}

std::size_t engine::pending() const {
    thread_pool* files = file_workers_started_.load();
    return pool_.pending() + (files ? files->pending() : 0);
}

std::shared_ptr<engine> engine::shared(const settings& r) {
    tuning k{r.threads, r.staging_buffers, r.staging_buffer_size, r.staging_memory_limit, r.stream_lanes,
             r.lane_buffer_size};
    // Handlers run in reverse order of registration: this one must come after the CUDA
    // runtime's, which it registers when first used (here, at the latest).
    // (An atomic, not a function-local static: a fork during its initialization would leave
    // the child waiting on the guard.)
    if (!exit_handler_registered.load() && cuda_available() && !exit_handler_registered.exchange(true))
        std::atexit(release_at_exit);
    std::vector<std::shared_ptr<engine>> released;  // freed after the lock is let go
    std::lock_guard lock(registry_mutex);
    if (cache->pid != ::getpid()) {
        // A forked child: the parent's workers do not exist here, so its engines can neither
        // run tasks nor be joined. Abandon them (their memory stays) and start afresh.
        if (!cache->by_use.empty()) new std::vector<cached>(std::move(cache->by_use));
        cache->by_use.clear();
        cache->pid = ::getpid();
    }
    auto& list = cache->by_use;
    auto it = std::find_if(list.begin(), list.end(), [&](const cached& c) { return c.k == k; });
    cached found;
    if (it != list.end()) {
        found = std::move(*it);
        list.erase(it);
    } else {
        // The last owner of an engine can be a request finishing on one of the engine's own
        // workers, which cannot join itself: let another thread tear it down then.
        found.k = k;
        found.e = std::shared_ptr<engine>(new engine(r), [](engine* e) {
            if (thread_pool::worker_index() < 0) {
                delete e;
                return;
            }
            try {
                std::thread([e] { delete e; }).detach();  // ~engine never throws
            } catch (...) {
                // No thread to be had: keep the engine rather than throw from a deleter.
            }
        });
    }
    std::size_t unused = 0;
    for (auto i = list.rbegin(); i != list.rend(); ++i)
        if (i->e.use_count() == 1 && ++unused > unused_kept) released.push_back(std::move(i->e));
    list.erase(std::remove_if(list.begin(), list.end(), [](const cached& c) { return !c.e; }), list.end());
    list.push_back(std::move(found));
    return list.back().e;
}

}  // namespace ferry::detail
