// Lock-free counters behind io_stats, one set per file and one for the process.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <string_view>

#include "ferry/stats.hpp"
#include "ferry/types.hpp"

namespace ferry::detail {

/// How many distinct (source, mover) routes a process counts.
inline constexpr int max_routes = 32;

/// The slot of route (source, mover), made on first use; -1 once max_routes are taken.
/// Thread safe; takes a lock, so call it once per request, not per task.
int route_slot(std::string_view source, std::string_view mover);

class stats_counter {
public:
    /// Adds bytes moved one way, request time and completed requests, under the public route
    /// name `p` and the route slot `route` (route_slot(); -1: not counted by route).
    void add(direction dir, io_path p, int route, std::uint64_t bytes, std::uint64_t ns, std::uint64_t requests);
    /// Returns true the first time `reason` is counted here (for log-once).
    bool add_fallback(const std::string& reason);
    io_stats snapshot() const;
    void reset();

private:
    struct cell {
        std::atomic<std::uint64_t> bytes{0}, requests{0}, ns{0};
    };
    cell cells_[2][io_path_count];
    cell routes_[2][max_routes];
    mutable std::mutex mutex_;
    std::map<std::string, std::uint64_t> fallbacks_;
};

/// Records pinned staging memory allocated (+) or freed (-).
void note_staging(std::int64_t delta);

/// The process-wide counters. Count fallbacks through note_process_fallback.
stats_counter& process_counter();
void note_process_fallback(const std::string& reason);

}  // namespace ferry::detail
