// Stopping calls in flight: a Ctrl-C in Python or the CLI ends a long read, load or save within a
// fraction of a second instead of when its last byte has moved.
#pragma once

#include "ferry/export.hpp"

#include <atomic>
#include <memory>

namespace ferry {

/// A request to stop, shared by whoever may ask for it (a signal handler, another thread) and the
/// calls made under a stop_scope of it. Copies share one flag.
class FERRY_EXPORT stop_source {
public:
    stop_source();
    /// Asks the calls under this source to stop. Async-signal-safe (one lock-free atomic store),
    /// so a SIGINT handler may call it.
    void request_stop() const noexcept { flag_->store(true, std::memory_order_relaxed); }
    bool stop_requested() const noexcept { return flag_->load(std::memory_order_relaxed); }
    const std::shared_ptr<std::atomic<bool>>& flag() const noexcept { return flag_; }

private:
    std::shared_ptr<std::atomic<bool>> flag_;
};

/// While alive, the ferry calls this thread makes, and the work they hand to ferry's own threads,
/// stop with ferry::interrupted_error soon after `source` asks: engine tasks check before they
/// start, the chunks of a read or write through the stream lanes before each one's file side
/// starts, writes to local files every 4 MiB, HTTP transfers every 20 ms, retry waits every
/// 10 ms. A write stopped this way leaves no destination file (saves are atomic). Scopes nest;
/// the innermost one counts. Not copyable; destroy on the thread that made it.
class FERRY_EXPORT stop_scope {
public:
    explicit stop_scope(const stop_source& source);
    ~stop_scope();
    stop_scope(const stop_scope&) = delete;
    stop_scope& operator=(const stop_scope&) = delete;

private:
    std::shared_ptr<const std::atomic<bool>> previous_;
};

}  // namespace ferry
