#include "io/thread_pool.hpp"

#include <pthread.h>

#include <cstdio>
#include <exception>
#include <string>

#include "os/worker_thread.hpp"

namespace ferry::detail {

thread_pool::thread_pool(std::size_t threads) {
    workers_.reserve(threads);
    for (std::size_t i = 0; i < threads; ++i) {
        workers_.emplace_back([this, i] { run(static_cast<int>(i)); });
        std::string name = "ferry-io-" + std::to_string(i);
        pthread_setname_np(workers_.back().native_handle(), name.substr(0, 15).c_str());
    }
}

thread_pool::~thread_pool() {
    {
        std::lock_guard lock(mutex_);
        stopping_ = true;
    }
    wake_.notify_all();
    for (auto& t : workers_) t.join();
}

void thread_pool::submit(std::function<void()> task) {
    {
        std::lock_guard lock(mutex_);
        queue_.push_back(std::move(task));
    }
    wake_.notify_one();
}

int thread_pool::worker_index() noexcept { return worker_thread_index(); }

std::size_t thread_pool::pending() const {
    std::lock_guard lock(mutex_);
    return queue_.size() + running_;
}

void thread_pool::run(int index) {
    mark_worker_thread(index);
    std::unique_lock lock(mutex_);
    for (;;) {
        wake_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
        if (queue_.empty()) return;  // stopping and drained
        std::function<void()> task = std::move(queue_.front());
        queue_.pop_front();
        ++running_;
        lock.unlock();
        // Every task delivers its own errors (to a future); one that throws anyway must not
        // take the process down with std::terminate: say so and go on.
        try {
            task();
        } catch (const std::exception& e) {
            std::fprintf(stderr, "ferry: internal error: an I/O task threw: %s\n", e.what());
        } catch (...) {
            std::fprintf(stderr, "ferry: internal error: an I/O task threw\n");
        }
        task = nullptr;  // destroy captures outside the lock
        lock.lock();
        --running_;
    }
}

}  // namespace ferry::detail
