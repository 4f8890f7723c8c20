#include "io/engine.hpp"

#include <unistd.h>

#include <mutex>
#include <thread>
#include <tuple>

#include "io/fork_safe_mutex.hpp"

namespace ferry::detail {
namespace {
fork_safe_mutex registry_mutex;  // never left taken in a forked child
struct cached {
    std::tuple<std::size_t, std::size_t, std::size_t, std::size_t> k;
    pid_t pid = 0;
    std::shared_ptr<engine> e;
};
// Made at load, not on first use (a fork inside a first-use initialization would leave its
// guard taken in the child), and never destroyed: workers may still be parked at process exit,
// when joining is unsafe.
cached* const last = new cached();
}  // namespace

engine::engine(const settings& r)
    : staging_(r.threads, r.staging_buffers, r.staging_buffer_size, r.staging_memory_limit),
      pool_(r.threads) {}

engine::~engine() = default;

std::shared_ptr<engine> engine::shared(const settings& r) {
    using key = std::tuple<std::size_t, std::size_t, std::size_t, std::size_t>;
    key k{r.threads, r.staging_buffers, r.staging_buffer_size, r.staging_memory_limit};
    std::lock_guard lock(registry_mutex);
    if (last->e && last->pid != ::getpid()) {
        // A forked child: the parent's workers do not exist here, so the engine can neither
        // run tasks nor be joined. Abandon it (its memory stays) and start afresh.
        new std::shared_ptr<engine>(std::move(last->e));
    }
    if (!last->e || last->k != k) {
        last->e.reset();  // free the previous engine's pinned memory first, if unused
        // The last owner of an engine can be a request finishing on one of the engine's own
        // workers, which cannot join itself: let another thread tear it down then.
        last->e = std::shared_ptr<engine>(new engine(r), [](engine* e) {
            if (thread_pool::worker_index() >= 0) std::thread([e] { delete e; }).detach();
            else delete e;
        });
        last->k = k;
        last->pid = ::getpid();
    }
    return last->e;
}

}  // namespace ferry::detail
