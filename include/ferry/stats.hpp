// Counters of what each I/O path moved, per file and per process, and why fallbacks happened.
#pragma once

#include "ferry/export.hpp"

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "ferry/types.hpp"

namespace ferry {

struct FERRY_EXPORT path_counters {
    std::uint64_t bytes = 0;
    std::uint64_t requests = 0;
    std::uint64_t nanoseconds = 0;  ///< summed request wall time (requests may overlap)
};

/// What one route moved: the source that served the bytes ("posix", "direct", "cufile", or a
/// registered source such as "http") and the mover between it and memory ("host", "staged",
/// "device-dma").
struct FERRY_EXPORT route_stats {
    std::string source;
    std::string mover;
    path_counters read;
    path_counters write;
};

/// A snapshot of counters. Thread safety: a plain value.
struct FERRY_EXPORT io_stats {
    path_counters read[io_path_count];
    path_counters write[io_path_count];
    std::map<std::string, std::uint64_t> fallbacks;  ///< reason -> times
    /// The same bytes by source and mover, each route that moved any: sources added later
    /// appear here without a new io_path.
    std::vector<route_stats> routes;

    /// The counters of one route, or null when it moved nothing.
    const route_stats* route(std::string_view source, std::string_view mover) const;
    const path_counters& reads(io_path p) const { return read[static_cast<int>(p)]; }
    const path_counters& writes(io_path p) const { return write[static_cast<int>(p)]; }
    std::uint64_t bytes_read() const;
    std::uint64_t bytes_written() const;
    io_stats& operator+=(const io_stats& other);
    io_stats operator-(const io_stats& earlier) const;  ///< counts between two snapshots
};

/// Counters of every file of this process since it started (or since reset_process_stats).
FERRY_EXPORT io_stats process_stats();
FERRY_EXPORT void reset_process_stats();

/// Pinned staging memory allocated now, and the most allocated at once since the process
/// started; bounded by FERRY_STAGING_MEMORY_LIMIT for each set of settings in use.
FERRY_EXPORT std::uint64_t staging_memory_in_use();
FERRY_EXPORT std::uint64_t staging_memory_peak();

}  // namespace ferry
