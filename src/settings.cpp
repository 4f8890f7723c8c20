// Settings: parsing of FERRY_* variables, and the defaults derived from the machine.
#include "ferry/settings.hpp"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdlib>
#include <mutex>
#include <thread>

#include <nlohmann/json.hpp>

#include "ferry/error.hpp"
#include "os/fork_safe_mutex.hpp"

namespace ferry {
namespace {

std::string lower(std::string_view s) {
    std::string out(s);
    for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return out;
}

std::string_view trim(std::string_view s) {
    while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
    while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
    return s;
}

std::size_t parse_count(std::string_view name, std::string_view text, std::size_t lo, std::size_t hi) {
    std::string_view t = trim(text);
    std::size_t v = 0;
    auto [p, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
    if (t.empty() || ec != std::errc() || p != t.data() + t.size())
        throw settings_error(std::string(name), std::string(text), "not a whole number");
    if (v < lo || v > hi)
        throw settings_error(std::string(name), std::string(text),
                             "must be between " + std::to_string(lo) + " and " + std::to_string(hi));
    return v;
}

detail::fork_safe_mutex global_mutex;
settings* global_settings = nullptr;

constexpr std::string_view names[] = {
    "FERRY_THREADS",         "FERRY_TASK_SIZE",          "FERRY_STAGING_BUFFER_SIZE",
    "FERRY_STAGING_BUFFERS", "FERRY_STAGING_MEMORY_LIMIT", "FERRY_STREAM_LANES",
    "FERRY_LANE_BUFFER_SIZE", "FERRY_LANE_THRESHOLD",    "FERRY_GDS",
    "FERRY_GDS_THRESHOLD",   "FERRY_DIRECT_IO",          "FERRY_LOG_LEVEL",
    "FERRY_CUFILE_LIBRARY",  "FERRY_REMOTE_CONCURRENCY", "FERRY_REMOTE_RANGE_SIZE",
    "FERRY_REMOTE_CONNECT_TIMEOUT", "FERRY_REMOTE_TIMEOUT", "FERRY_REMOTE_RETRIES",
    "FERRY_REMOTE_RETRY_DELAY", "FERRY_REMOTE_CA_BUNDLE", "FERRY_S3_ADDRESSING",
    "FERRY_IO_URING",        "FERRY_IO_URING_QUEUE_DEPTH",
};

// Durations: "250ms", "10s", "2m", or a bare number of milliseconds.
std::size_t parse_duration_ms(std::string_view name, std::string_view text, std::size_t lo, std::size_t hi) {
    std::string_view t = trim(text);
    std::size_t digits = 0;
    while (digits < t.size() && std::isdigit(static_cast<unsigned char>(t[digits]))) ++digits;
    std::string unit = lower(trim(t.substr(digits)));
    std::size_t scale = 0;
    if (unit.empty() || unit == "ms") scale = 1;
    else if (unit == "s") scale = 1000;
    else if (unit == "m" || unit == "min") scale = 60000;
    if (digits == 0 || scale == 0)
        throw settings_error(std::string(name), std::string(text), "not a duration (e.g. 500ms, 10s, 2m)");
    std::size_t v = parse_count(name, t.substr(0, digits), 0, SIZE_MAX / 60000) * scale;
    if (v < lo || v > hi)
        throw settings_error(std::string(name), std::string(text),
                             "must be between " + std::to_string(lo) + "ms and " + std::to_string(hi) + "ms");
    return v;
}

}  // namespace

std::size_t parse_size(std::string_view name, std::string_view text) {
    std::string_view t = trim(text);
    std::size_t digits = 0;
    while (digits < t.size() && std::isdigit(static_cast<unsigned char>(t[digits]))) ++digits;
    if (digits == 0) throw settings_error(std::string(name), std::string(text), "not a size (e.g. 8M, 1G, 65536)");
    std::uint64_t v = 0;
    auto [p, ec] = std::from_chars(t.data(), t.data() + digits, v);
    if (ec != std::errc()) throw settings_error(std::string(name), std::string(text), "number too large");
    std::string unit = lower(trim(t.substr(digits)));
    int shift = 0;
    if (unit.empty() || unit == "b") shift = 0;
    else if (unit == "k" || unit == "kb" || unit == "kib") shift = 10;
    else if (unit == "m" || unit == "mb" || unit == "mib") shift = 20;
    else if (unit == "g" || unit == "gb" || unit == "gib") shift = 30;
    else if (unit == "t" || unit == "tb" || unit == "tib") shift = 40;
    else throw settings_error(std::string(name), std::string(text), "unknown unit (use K, M, G or T)");
    if (shift && v > (UINT64_MAX >> shift)) throw settings_error(std::string(name), std::string(text), "size too large");
    return static_cast<std::size_t>(v << shift);
}

void apply_setting(settings& s, std::string_view name, std::string_view value) {
    std::string v = lower(trim(value));
    auto bad = [&](const char* why) { throw settings_error(std::string(name), std::string(value), why); };
    if (name == "FERRY_THREADS") {
        s.threads = parse_count(name, value, 0, 1024);
    } else if (name == "FERRY_TASK_SIZE") {
        // Each value is checked before it is stored: a refused value leaves `s` as it was.
        std::size_t n = parse_size(name, value);
        if (n != 0 && n < 4096) bad("must be 0 (derive) or at least 4096 bytes");
        s.task_size = n;
    } else if (name == "FERRY_STAGING_BUFFER_SIZE") {
        std::size_t n = parse_size(name, value);
        if (n != 0 && (n < 65536 || n % 4096)) bad("must be 0 (derive) or a multiple of 4096 of at least 64K");
        s.staging_buffer_size = n;
    } else if (name == "FERRY_STAGING_BUFFERS") {
        s.staging_buffers = parse_count(name, value, 2, 64);
    } else if (name == "FERRY_STAGING_MEMORY_LIMIT") {
        std::size_t n = parse_size(name, value);
        if (n != 0 && n < (1u << 20)) bad("must be 0 (derive) or at least 1M");
        s.staging_memory_limit = n;
    } else if (name == "FERRY_STREAM_LANES") {
        s.stream_lanes = parse_count(name, value, 0, 64);
    } else if (name == "FERRY_LANE_BUFFER_SIZE") {
        std::size_t n = parse_size(name, value);
        if (n != 0 && (n < 65536 || n % 65536)) bad("must be 0 (derive) or a multiple of 64K");
        s.lane_buffer_size = n;
    } else if (name == "FERRY_LANE_THRESHOLD") {
        s.lane_threshold = v == "off" ? lanes_off : parse_size(name, value);
    } else if (name == "FERRY_GDS") {
        if (v == "auto") s.gds = gds_mode::auto_;
        else if (v == "on" || v == "1" || v == "true") s.gds = gds_mode::on;
        else if (v == "off" || v == "0" || v == "false") s.gds = gds_mode::off;
        else bad("must be auto, on or off");
    } else if (name == "FERRY_GDS_THRESHOLD") {
        s.gds_threshold = parse_size(name, value);
    } else if (name == "FERRY_DIRECT_IO") {
        if (v == "auto") s.direct_io = direct_io_mode::auto_;
        else if (v == "on" || v == "1" || v == "true") s.direct_io = direct_io_mode::on;
        else if (v == "off" || v == "0" || v == "false") s.direct_io = direct_io_mode::off;
        else bad("must be auto, on or off");
    } else if (name == "FERRY_IO_URING") {
        if (v == "auto") s.io_uring = io_uring_mode::auto_;
        else if (v == "on" || v == "1" || v == "true") s.io_uring = io_uring_mode::on;
        else if (v == "off" || v == "0" || v == "false") s.io_uring = io_uring_mode::off;
        else bad("must be auto, on or off");
    } else if (name == "FERRY_IO_URING_QUEUE_DEPTH") {
        s.io_uring_queue_depth = parse_count(name, value, 1, 4096);
    } else if (name == "FERRY_LOG_LEVEL") {
        if (v == "error") s.log = log_level::error;
        else if (v == "warn" || v == "warning") s.log = log_level::warn;
        else if (v == "info") s.log = log_level::info;
        else if (v == "debug") s.log = log_level::debug;
        else bad("must be error, warn, info or debug");
    } else if (name == "FERRY_CUFILE_LIBRARY") {
        if (trim(value).empty()) bad("must name a library");
        s.cufile_library = std::string(trim(value));
    } else if (name == "FERRY_REMOTE_CONCURRENCY") {
        s.remote_concurrency = parse_count(name, value, 0, 1024);
    } else if (name == "FERRY_REMOTE_RANGE_SIZE") {
        std::size_t n = parse_size(name, value);
        if (n != 0 && n < 65536) bad("must be 0 (derive) or at least 64K");
        s.remote_range_size = n;
    } else if (name == "FERRY_REMOTE_CONNECT_TIMEOUT") {
        s.remote_connect_timeout_ms = parse_duration_ms(name, value, 1, 3600000);
    } else if (name == "FERRY_REMOTE_TIMEOUT") {
        s.remote_stall_timeout_ms = parse_duration_ms(name, value, 1000, 3600000);
    } else if (name == "FERRY_REMOTE_RETRIES") {
        s.remote_retries = parse_count(name, value, 0, 100);
    } else if (name == "FERRY_REMOTE_RETRY_DELAY") {
        s.remote_retry_delay_ms = parse_duration_ms(name, value, 0, 60000);
    } else if (name == "FERRY_REMOTE_CA_BUNDLE") {
        s.remote_ca_bundle = std::string(trim(value));
    } else if (name == "FERRY_S3_ADDRESSING") {
        if (v != "auto" && v != "path" && v != "virtual") bad("must be auto, path or virtual");
        s.s3_addressing = v;
    } else {
        throw usage_error("unknown setting " + std::string(name));
    }
}

settings settings::from_environment() {
    return from_lookup([](std::string_view name) -> std::optional<std::string> {
        const char* v = std::getenv(std::string(name).c_str());
        if (!v) return std::nullopt;
        return std::string(v);
    });
}

const settings& settings::global() {
    std::lock_guard lock(global_mutex);
    if (!global_settings) global_settings = new settings(from_environment());  // lives to exit
    return *global_settings;
}

void settings::set_global(const settings& s) {
    std::lock_guard lock(global_mutex);
    if (!global_settings) global_settings = new settings(s);
    else *global_settings = s;
}

std::vector<std::string_view> settings::variable_names() {
    return {std::begin(names), std::end(names)};
}

settings settings::resolved() const {
    settings r = *this;
    // I/O threads: a request is served by both disk and PCIe, and 16 threads of page-cache reads
    // into pinned memory run at 41-48 GB/s on the H200 machine (the pread ceiling of `ferry
    // bench`, docs/benchmarks.md), near PCIe's 55, so use the cores up to 16, and never fewer than 4
    // so that small machines still overlap reads with copies.
    // Asked once: the count comes from sysfs, and every file open resolves its settings.
    static const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
    if (r.threads == 0) r.threads = std::clamp<std::size_t>(hw, 4, 16);
    // Small staging buffers win: 2 x 2 MiB per worker stay in the CPU's last-level cache, so
    // the page-cache copy and the DMA read of a chunk do not both go to DRAM. On the H200
    // machine (docs/benchmarks.md) 2 x 2 MiB gave 48 GB/s against 34 GB/s with 2 x 8 MiB.
    if (r.staging_buffer_size == 0) r.staging_buffer_size = 2u << 20;
    if (r.task_size == 0) r.task_size = 16 * r.staging_buffer_size;
    if (r.staging_memory_limit == 0) r.staging_memory_limit = 1ull << 30;
    // Stream lanes: a few large copies in flight, each from a buffer that many workers fill at
    // once. Four lanes of 2 x 8 MiB reached 0.95x the pinned copy ceiling on the H200 machine,
    // where the workers' own 2 MiB buffers stop at 0.90x (docs/benchmarks.md): fewer, larger
    // DMA transfers. More or larger lanes did worse (8 x 16 MiB: 0.82x; 4 x 32 MiB: 0.78x),
    // as more staging left the CPU caches. They take what the workers' staging leaves under
    // the limit.
    if (r.stream_lanes == 0) r.stream_lanes = 4;
    if (r.lane_buffer_size == 0) {
        std::size_t used = r.threads * r.staging_buffers * r.staging_buffer_size;
        std::size_t left = r.staging_memory_limit > used ? (r.staging_memory_limit - used) / (2 * r.stream_lanes) : 0;
        std::size_t size = std::min(4 * r.staging_buffer_size, left) / (64u << 10) * (64u << 10);
        r.lane_buffer_size = std::max<std::size_t>(size, 64u << 10);
    }
    // Below one round of the lanes (every lane's buffer once), a request would not keep them
    // all busy: the workers' own buffers serve it.
    if (r.lane_threshold == 0) r.lane_threshold = r.stream_lanes * r.lane_buffer_size;
    // Remote objects: one TCP stream rarely fills a fast link (window and per-connection server
    // limits), so many ranges go at once; 8 MiB ranges keep the per-request round trip small
    // against the transfer while still splitting a large tensor across connections.
    if (r.remote_concurrency == 0) r.remote_concurrency = 16;
    if (r.remote_range_size == 0) r.remote_range_size = 8u << 20;
    return r;
}

std::string to_json(const settings& s) {
    nlohmann::json j;
    j["threads"] = s.threads;
    j["task_size"] = s.task_size;
    j["staging_buffer_size"] = s.staging_buffer_size;
    j["staging_buffers"] = s.staging_buffers;
    j["staging_memory_limit"] = s.staging_memory_limit;
    j["stream_lanes"] = s.stream_lanes;
    j["lane_buffer_size"] = s.lane_buffer_size;
    if (s.lane_threshold == lanes_off) j["lane_threshold"] = "off";
    else j["lane_threshold"] = s.lane_threshold;
    j["gds"] = std::string(to_string(s.gds));
    j["gds_threshold"] = s.gds_threshold;
    j["direct_io"] = std::string(to_string(s.direct_io));
    j["io_uring"] = std::string(to_string(s.io_uring));
    j["io_uring_queue_depth"] = s.io_uring_queue_depth;
    j["log_level"] = std::string(to_string(s.log));
    j["cufile_library"] = s.cufile_library;
    j["remote_concurrency"] = s.remote_concurrency;
    j["remote_range_size"] = s.remote_range_size;
    // Keys are the variables' names (Python's ferry.settings attributes); durations in ms.
    j["remote_connect_timeout"] = s.remote_connect_timeout_ms;
    j["remote_timeout"] = s.remote_stall_timeout_ms;
    j["remote_retries"] = s.remote_retries;
    j["remote_retry_delay"] = s.remote_retry_delay_ms;
    j["remote_ca_bundle"] = s.remote_ca_bundle;
    j["s3_addressing"] = s.s3_addressing;
    return j.dump();
}

std::string_view to_string(gds_mode m) {
    switch (m) {
        case gds_mode::auto_: return "auto";
        case gds_mode::on: return "on";
        case gds_mode::off: return "off";
    }
    return "?";
}

std::string_view to_string(direct_io_mode m) {
    switch (m) {
        case direct_io_mode::auto_: return "auto";
        case direct_io_mode::on: return "on";
        case direct_io_mode::off: return "off";
    }
    return "?";
}

std::string_view to_string(io_uring_mode m) {
    switch (m) {
        case io_uring_mode::auto_: return "auto";
        case io_uring_mode::on: return "on";
        case io_uring_mode::off: return "off";
    }
    return "?";
}

std::string_view to_string(log_level l) {
    switch (l) {
        case log_level::error: return "error";
        case log_level::warn: return "warn";
        case log_level::info: return "info";
        case log_level::debug: return "debug";
    }
    return "?";
}

}  // namespace ferry
