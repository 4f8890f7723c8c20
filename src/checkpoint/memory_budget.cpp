// The process-wide memory budget (see memory_budget.hpp).
#include "checkpoint/memory_budget.hpp"

#include <algorithm>

#include "ferry/checkpoint.hpp"
#include "ferry/error.hpp"

namespace ferry::checkpoints {

namespace {
// A default that fits beside a model on any current GPU and holds many gather pieces at once.
constexpr std::uint64_t default_cap = 1ull << 30;
}  // namespace

memory_budget& memory_budget::global() {
    static memory_budget b(default_cap);
    return b;
}

void memory_budget::acquire(std::uint64_t bytes) {
    std::unique_lock lock(m_);
    if (bytes > cap_)
        throw usage_error("checkpoint memory budget: " + std::to_string(bytes) +
                          " bytes asked, above the cap of " + std::to_string(cap_));
    cv_.wait(lock, [&] { return used_ + bytes <= cap_; });
    used_ += bytes;
    peak_ = std::max(peak_, used_);
}

void memory_budget::release(std::uint64_t bytes) noexcept {
    {
        std::lock_guard lock(m_);
        used_ -= std::min(used_, bytes);
    }
    cv_.notify_all();
}

void memory_budget::set_cap(std::uint64_t cap) {
    if (cap == 0) throw usage_error("checkpoint memory budget: the cap must be above 0");
    {
        std::lock_guard lock(m_);
        cap_ = cap;
    }
    cv_.notify_all();
}

std::uint64_t memory_budget::cap() const noexcept {
    std::lock_guard lock(m_);
    return cap_;
}
std::uint64_t memory_budget::used() const noexcept {
    std::lock_guard lock(m_);
    return used_;
}
std::uint64_t memory_budget::peak() const noexcept {
    std::lock_guard lock(m_);
    return peak_;
}

}  // namespace ferry::checkpoints

namespace ferry {
void set_checkpoint_memory_budget(std::uint64_t bytes) {
    checkpoints::memory_budget::global().set_cap(bytes);
}
std::uint64_t checkpoint_memory_budget() noexcept { return checkpoints::memory_budget::global().cap(); }
std::uint64_t checkpoint_memory_peak() noexcept { return checkpoints::memory_budget::global().peak(); }
}  // namespace ferry
