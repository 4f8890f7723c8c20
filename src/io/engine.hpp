// The machinery shared by all files opened with the same tuning: the worker threads, the pinned
// staging memory, and for stream-ordered requests the stream lanes and the file workers.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>

#include "io/staging_pool.hpp"
#include "ferry/settings.hpp"
#include "io/stream_lanes.hpp"
#include "io/thread_pool.hpp"

namespace ferry::detail {

class engine {
public:
    explicit engine(const settings& resolved);
    ~engine();

    /// The engine for these (resolved) settings: one per tuning (threads and staging), shared
    /// by every file opened with it, so that loads of many files share one worker pool and one
    /// staging budget. Files keep their engine alive; a few unused ones are kept for reuse.
    static std::shared_ptr<engine> shared(const settings& resolved);

    thread_pool& pool() noexcept { return pool_; }
    staging_pool& staging() noexcept { return staging_; }
    stream_lanes& lanes() noexcept { return lanes_; }
    /// Workers that only ever move bytes between files and host memory, never waiting on CUDA
    /// work: the file side of stream-ordered requests, which runs inside CUDA host functions,
    /// may wait for them (and for nothing else). Started on first use.
    thread_pool& file_workers();
    /// Tasks queued or running on either set of workers.
    std::size_t pending() const;

private:
    staging_pool staging_;  // destroyed after the workers stopped
    stream_lanes lanes_;
    thread_pool pool_;
    std::once_flag file_workers_once_;
    std::unique_ptr<thread_pool> file_workers_;
    std::atomic<thread_pool*> file_workers_started_{nullptr};  // for pending(), without the once
};

}  // namespace ferry::detail
