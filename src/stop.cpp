// stop_source, stop_scope and the per-thread stop flag (see ferry/stop.hpp, stop.hpp).
#include "stop.hpp"

#include <algorithm>
#include <thread>

#include "ferry/error.hpp"
#include "ferry/stop.hpp"

namespace ferry {
namespace {
thread_local detail::stop_flag this_thread_flag;
}

stop_source::stop_source() : flag_(std::make_shared<std::atomic<bool>>(false)) {
    static_assert(std::atomic<bool>::is_always_lock_free, "request_stop must be async-signal-safe");
}

stop_scope::stop_scope(const stop_source& source) : previous_(std::move(this_thread_flag)) {
    this_thread_flag = source.flag();
}

stop_scope::~stop_scope() { this_thread_flag = std::move(previous_); }

namespace detail {

const stop_flag& current_stop() noexcept { return this_thread_flag; }

stop_binding::stop_binding(stop_flag flag) : previous_(std::move(this_thread_flag)) {
    this_thread_flag = std::move(flag);
}

stop_binding::~stop_binding() { this_thread_flag = std::move(previous_); }

void throw_if_stopped(const std::string& what) {
    if (stop_requested()) throw interrupted_error("interrupted: " + what);
}

void sleep_unless_stopped(std::chrono::duration<double, std::milli> d, const std::string& what) {
    using clock = std::chrono::steady_clock;
    const auto end = clock::now() + std::chrono::duration_cast<clock::duration>(d);
    for (;;) {
        throw_if_stopped(what);
        auto now = clock::now();
        if (now >= end) return;
        std::this_thread::sleep_for(std::min<clock::duration>(end - now, std::chrono::milliseconds(10)));
    }
}

}  // namespace detail
}  // namespace ferry
