// Lock-free counters behind io_stats, one set per file and one for the process.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include "ferry/stats.hpp"

namespace ferry::detail {

class stats_counter {
public:
    /// Adds bytes moved, request time and completed requests.
    void add(bool is_write, io_path p, std::uint64_t bytes, std::uint64_t ns, std::uint64_t requests);
    /// Returns true the first time `reason` is counted here (for log-once).
    bool add_fallback(const std::string& reason);
    io_stats snapshot() const;
    void reset();

private:
    struct cell {
        std::atomic<std::uint64_t> bytes{0}, requests{0}, ns{0};
    };
    cell cells_[2][io_path_count];
    mutable std::mutex mutex_;
    std::map<std::string, std::uint64_t> fallbacks_;
};

/// Records pinned staging memory allocated (+) or freed (-).
void note_staging(std::int64_t delta);

/// The process-wide counters. Count fallbacks through note_process_fallback.
stats_counter& process_counter();
void note_process_fallback(const std::string& reason);

}  // namespace ferry::detail
