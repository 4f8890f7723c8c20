// A process-wide mutex that fork() never leaves locked in the child. fork() copies only the
// calling thread: a lock that another thread held at that moment would stay taken in the
// child for good, and the child's first ferry call would hang on it. Each fork_safe_mutex is
// taken by pthread_atfork's prepare handler before the fork and released on both sides after.
//
// Only for the few mutexes that live as long as the process (the engine registry, the global
// settings, the log, the process counters, the table of registered files): they are registered at static initialization, and
// none is ever taken while holding another, so the prepare handler cannot deadlock.
#pragma once

#include <mutex>

namespace ferry::detail {

class fork_safe_mutex {
public:
    /// Registers this mutex with the fork handlers. Construct at namespace scope only.
    fork_safe_mutex();
    fork_safe_mutex(const fork_safe_mutex&) = delete;
    fork_safe_mutex& operator=(const fork_safe_mutex&) = delete;

    void lock() { m_.lock(); }
    void unlock() { m_.unlock(); }
    bool try_lock() { return m_.try_lock(); }

private:
    std::mutex m_;
};

}  // namespace ferry::detail
