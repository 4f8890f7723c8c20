// Work on every shard of a checkpoint (reading its header, opening it again for a load) side
// by side, a bounded number at a time: for a remote shard each is a round trip.
#pragma once

#include <algorithm>
#include <cstddef>
#include <exception>
#include <future>
#include <vector>

namespace ferry::checkpoints {

/// Runs fn(0) .. fn(n - 1), at most `at_once` at a time, each on a thread of its own; waits for
/// all of them and then rethrows the first error.
template <class Fn>
void side_by_side(std::size_t n, std::size_t at_once, const Fn& fn) {
    for (std::size_t first = 0; first < n; first += at_once) {
        const std::size_t last = std::min(n, first + at_once);
        std::vector<std::future<void>> pending;
        for (std::size_t i = first; i < last; ++i) pending.push_back(std::async(std::launch::async, fn, i));
        std::exception_ptr err;
        for (auto& p : pending) {
            try {
                p.get();
            } catch (...) {
                if (!err) err = std::current_exception();
            }
        }
        if (err) std::rethrow_exception(err);
    }
}

}  // namespace ferry::checkpoints
