// The process-wide budget on the temporary memory that checkpoint loads hold (host temporaries
// and device temporaries for gathers and conversions): a byte-counting semaphore. Loads that
// would pass the cap wait for others to release (backpressure), they never fail for it; only a
// request larger than the cap itself is an error, found by the planner before any byte moves.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>

namespace ferry::checkpoints {

class memory_budget {
public:
    explicit memory_budget(std::uint64_t cap) : cap_(cap) {}
    /// The one budget shared by every load in the process.
    static memory_budget& global();

    /// Waits until `bytes` fit under the cap, then holds them. `bytes` must be <= cap().
    void acquire(std::uint64_t bytes);
    void release(std::uint64_t bytes) noexcept;
    void set_cap(std::uint64_t cap);
    std::uint64_t cap() const noexcept;
    std::uint64_t used() const noexcept;
    std::uint64_t peak() const noexcept;

private:
    mutable std::mutex m_;
    std::condition_variable cv_;
    std::uint64_t cap_;
    std::uint64_t used_ = 0;
    std::uint64_t peak_ = 0;
};

/// Holds bytes of a budget for its lifetime. Move-only.
class budget_hold {
public:
    budget_hold() = default;
    budget_hold(memory_budget& b, std::uint64_t bytes) : b_(&b), bytes_(bytes) { b.acquire(bytes); }
    budget_hold(budget_hold&& o) noexcept : b_(o.b_), bytes_(o.bytes_) { o.b_ = nullptr; }
    budget_hold& operator=(budget_hold&&) = delete;
    ~budget_hold() {
        if (b_) b_->release(bytes_);
    }
    std::uint64_t bytes() const noexcept { return b_ ? bytes_ : 0; }

private:
    memory_budget* b_ = nullptr;
    std::uint64_t bytes_ = 0;
};

}  // namespace ferry::checkpoints
