#include "io/scheduler.hpp"

#include <atomic>
#include <mutex>

namespace ferry::detail {
namespace {

struct batch_state {
    std::atomic<std::size_t> remaining{0};
    std::atomic<std::size_t> bytes{0};
    std::mutex error_mutex;
    std::exception_ptr error;
    std::promise<std::size_t> done;

    void one_done(std::size_t n, std::exception_ptr e) {
        bytes += n;
        if (e) {
            std::lock_guard lock(error_mutex);
            if (!error) error = e;
        }
        if (remaining.fetch_sub(1) != 1) return;
        if (error) done.set_exception(error);
        else done.set_value(bytes.load());
    }
};

}  // namespace

std::future<std::size_t> submit_batch(direction dir, const std::vector<transfer>& batch) {
    auto st = std::make_shared<batch_state>();
    std::future<std::size_t> f = st->done.get_future();
    // One extra count held while starting, so the batch cannot end before every range started.
    st->remaining = batch.size() + 1;
    for (const transfer& t : batch) {
        try {
            if (!t.file) throw usage_error("a transfer of the batch has no file");
            request r = t.file->prepare(dir, t.memory, t.length, t.offset, exactness::exact);
            t.file->start(r, nullptr, [st](std::size_t n, std::exception_ptr e) { st->one_done(n, e); });
        } catch (...) {
            st->one_done(0, std::current_exception());
        }
    }
    st->one_done(0, nullptr);
    return f;
}

}  // namespace ferry::detail
