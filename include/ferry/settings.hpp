// ferry's tunables: one value type, read once from FERRY_* environment variables, overridable in
// code, passed explicitly. docs/settings.md documents every variable.
#pragma once

#include "ferry/export.hpp"

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ferry {

/// GPUDirect Storage policy for transfers to and from GPU memory.
enum class gds_mode {
    auto_,  ///< cuFile only where it does real direct DMA (nvidia-fs loaded), else staged
    on,     ///< cuFile whenever it opens, compatibility mode included; an error if it cannot
    off,    ///< never cuFile
};

/// O_DIRECT policy for reads.
enum class direct_io_mode {
    auto_,  ///< O_DIRECT for a file whose data is mostly not in the page cache
    on,     ///< O_DIRECT for every read the file system allows
    off,    ///< buffered reads only
};

/// io_uring policy for reads of local files (src/backend/io_uring/).
enum class io_uring_mode {
    auto_,  ///< io_uring only where measured faster: nowhere so far (the plan says so: io_uring_not_faster)
    on,     ///< every read of a local file through io_uring; an error, with the reason, if unusable
    off,    ///< never io_uring
};

enum class log_level { error, warn, info, debug };

/// lane_threshold's value for "off": reads without a stream never take the stream lanes.
inline constexpr std::size_t lanes_off = static_cast<std::size_t>(-1);

/// All of ferry's settings. A value of 0 for a size or count means "derive from the machine".
///
/// Thread safety: a plain value; copy it freely.
struct FERRY_EXPORT settings {
    std::size_t threads = 0;                  ///< FERRY_THREADS: I/O worker threads
    std::size_t task_size = 0;                ///< FERRY_TASK_SIZE: bytes per parallel task
    std::size_t staging_buffer_size = 0;      ///< FERRY_STAGING_BUFFER_SIZE: bytes per pinned buffer
    std::size_t staging_buffers = 2;          ///< FERRY_STAGING_BUFFERS: pinned buffers per worker (>= 2)
    std::size_t staging_memory_limit = 0;     ///< FERRY_STAGING_MEMORY_LIMIT: cap on all pinned staging
    std::size_t stream_lanes = 0;             ///< FERRY_STREAM_LANES: stream lanes per device
    std::size_t lane_buffer_size = 0;         ///< FERRY_LANE_BUFFER_SIZE: bytes of each of a lane's two buffers
    /// FERRY_LANE_THRESHOLD: reads into GPU memory of at least this many bytes go through the
    /// stream lanes rather than the workers' own staging buffers; lanes_off: never.
    std::size_t lane_threshold = 0;
    gds_mode gds = gds_mode::auto_;           ///< FERRY_GDS
    std::size_t gds_threshold = 1 << 20;      ///< FERRY_GDS_THRESHOLD: smaller requests skip cuFile
    direct_io_mode direct_io = direct_io_mode::off;  ///< FERRY_DIRECT_IO
    io_uring_mode io_uring = io_uring_mode::auto_;  ///< FERRY_IO_URING
    std::size_t io_uring_queue_depth = 32;    ///< FERRY_IO_URING_QUEUE_DEPTH: reads in flight per thread
    log_level log = log_level::warn;          ///< FERRY_LOG_LEVEL
    std::string cufile_library = "libcufile.so.0";  ///< FERRY_CUFILE_LIBRARY: what dlopen loads
    /// Remote objects (http://, https://, s3://).
    std::size_t remote_concurrency = 0;       ///< FERRY_REMOTE_CONCURRENCY: ranged GETs in flight per object
    std::size_t remote_range_size = 0;        ///< FERRY_REMOTE_RANGE_SIZE: bytes per ranged GET
    std::size_t remote_connect_timeout_ms = 10000;  ///< FERRY_REMOTE_CONNECT_TIMEOUT: ms to connect
    std::size_t remote_stall_timeout_ms = 30000;    ///< FERRY_REMOTE_TIMEOUT: ms without progress
    std::size_t remote_retries = 8;           ///< FERRY_REMOTE_RETRIES: retries of one request
    std::size_t remote_retry_delay_ms = 100;  ///< FERRY_REMOTE_RETRY_DELAY: first backoff, doubling
    std::string remote_ca_bundle;             ///< FERRY_REMOTE_CA_BUNDLE: CA file ("" = as curl finds it)
    std::string s3_addressing = "auto";       ///< FERRY_S3_ADDRESSING: auto, path or virtual

    /// Settings from the FERRY_* environment variables over the defaults.
    /// Throws settings_error naming the variable when a value does not parse.
    static settings from_environment();

    /// Settings from an explicit lookup (name -> value or nullopt); from_environment uses getenv.
    template <class Lookup>
    static settings from_lookup(Lookup&& lookup);

    /// The process-wide settings: from_environment() on first use, or what set_global stored.
    static const settings& global();
    /// Replaces the process-wide settings (files opened later use them).
    static void set_global(const settings& s);

    /// Copies with every 0 ("derive") replaced by the value derived from this machine.
    settings resolved() const;

    /// Every variable from_environment reads, for the documentation check.
    static std::vector<std::string_view> variable_names();
};

/// Parses one variable's value into `s`; throws settings_error naming `name` on a bad value,
/// usage_error on an unknown name.
FERRY_EXPORT void apply_setting(settings& s, std::string_view name, std::string_view value);

template <class Lookup>
settings settings::from_lookup(Lookup&& lookup) {
    settings s;
    for (std::string_view name : variable_names()) {
        std::optional<std::string> value = lookup(name);
        if (value) apply_setting(s, name, *value);
    }
    return s;
}

/// The settings as one JSON object, {"threads": 16, "gds": "auto", ...}: the field names above,
/// sizes and counts as numbers, modes as the words their variables take. The doctor report and
/// the Python package show settings through this.
FERRY_EXPORT std::string to_json(const settings& s);

FERRY_EXPORT std::string_view to_string(gds_mode m);
FERRY_EXPORT std::string_view to_string(direct_io_mode m);
FERRY_EXPORT std::string_view to_string(io_uring_mode m);
FERRY_EXPORT std::string_view to_string(log_level l);

/// Parses "1048576", "64k", "8M", "1G", "2GiB" (binary units). Throws settings_error with `name`.
FERRY_EXPORT std::size_t parse_size(std::string_view name, std::string_view text);

}  // namespace ferry
