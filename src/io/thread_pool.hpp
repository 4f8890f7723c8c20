// A fixed set of I/O worker threads. Each worker knows its index, so per-worker resources
// (staging buffers, streams) need no locking.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace ferry::detail {

class thread_pool {
public:
    explicit thread_pool(std::size_t threads);
    /// Runs every task already queued, then joins the workers.
    ~thread_pool();
    thread_pool(const thread_pool&) = delete;
    thread_pool& operator=(const thread_pool&) = delete;

    /// Queues a task. Tasks must not throw (wrap them); a throwing task terminates.
    void submit(std::function<void()> task);
    std::size_t size() const noexcept { return workers_.size(); }

    /// Index of the calling worker in its pool, or -1 when not called from a worker.
    static int worker_index() noexcept;
    /// Tasks queued or running.
    std::size_t pending() const;

private:
    void run(int index);

    mutable std::mutex mutex_;
    std::condition_variable wake_;
    std::deque<std::function<void()>> queue_;
    std::size_t running_ = 0;
    bool stopping_ = false;
    std::vector<std::thread> workers_;
};

}  // namespace ferry::detail
