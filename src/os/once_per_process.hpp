// A value worked out once per process, for probes that take a while: loading a library,
// asking the kernel, starting the CUDA runtime.
//
// Not a function-local static: fork() while another thread is inside a static's initializer
// leaves the child's copy of the static's guard taken for good, and the child's first call would
// wait forever for a thread it does not have (tests/reliability/fork_test.cpp). Here the state is
// 0 before, the pid of the probing process during, and -1 after; a child forked mid-probe sees
// another process's pid and gets the caller's fallback instead of waiting.
#pragma once

#include <unistd.h>

#include <atomic>
#include <exception>

namespace ferry::detail {

template <class T>
class once_per_process {
public:
    /// The value `probe()` returned on the first call in this process; other threads wait for
    /// it. A process forked while another thread was probing gets `forked_mid_probe`. If the
    /// probe throws, the exception goes to its caller and the next call probes again.
    template <class Probe>
    const T& get(Probe&& probe, const T& forked_mid_probe) {
        long s = state_.load(std::memory_order_acquire);
        if (s == done) return value_;  // every call after the first: no system call
        const long me = static_cast<long>(::getpid());
        if (s == 0 && state_.compare_exchange_strong(s, me, std::memory_order_acq_rel)) {
            try {
                value_ = probe();
            } catch (...) {
                state_.store(0, std::memory_order_release);
                state_.notify_all();
                throw;
            }
            state_.store(done, std::memory_order_release);
            state_.notify_all();
            return value_;
        }
        while (s != done) {
            if (s != 0 && s != me) return forked_mid_probe;
            if (s == 0) return get(std::forward<Probe>(probe), forked_mid_probe);  // a probe threw
            state_.wait(s, std::memory_order_acquire);
            s = state_.load(std::memory_order_acquire);
        }
        return value_;
    }

private:
    static constexpr long done = -1;
    std::atomic<long> state_{0};
    T value_{};
};

}  // namespace ferry::detail
