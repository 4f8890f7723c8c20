// The stop flag of the innermost stop_scope of this thread, carried to the engine's workers with
// each task, and the checks the slow places make (engine tasks, HTTP transfers, retry waits).
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <string>

namespace ferry::detail {

using stop_flag = std::shared_ptr<const std::atomic<bool>>;

/// The flag this thread's calls answer to, or null.
const stop_flag& current_stop() noexcept;

/// Makes `flag` this thread's flag for a scope: a worker running a task of a request made under
/// a stop_scope.
class stop_binding {
public:
    explicit stop_binding(stop_flag flag);
    ~stop_binding();
    stop_binding(const stop_binding&) = delete;
    stop_binding& operator=(const stop_binding&) = delete;

private:
    stop_flag previous_;
};

/// Whether this thread's flag asks to stop.
inline bool stop_requested() noexcept {
    const stop_flag& f = current_stop();
    return f && f->load(std::memory_order_relaxed);
}

/// Throws interrupted_error ("interrupted: <what>") when this thread's flag asks to stop.
void throw_if_stopped(const std::string& what);

/// Sleeps `d`, looking at this thread's flag every 10 ms; throws interrupted_error once it asks.
void sleep_unless_stopped(std::chrono::duration<double, std::milli> d, const std::string& what);

}  // namespace ferry::detail
