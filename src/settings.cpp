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
#include "lane_buffer_size.hpp"
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

// Asked once, at load time: the count comes from sysfs and every file open resolves its settings.
// Not a function-local static, whose guard a fork() during the sysfs read would leave taken in
// the child (os/once_per_process.hpp).
const unsigned hardware_threads = std::max(1u, std::thread::hardware_concurrency());
settings* global_settings = nullptr;

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

namespace {

using sv = std::string_view;
using json = nlohmann::json;

[[noreturn]] void refuse(sv name, sv value, const char* why) {
    throw settings_error(std::string(name), std::string(value), why);
}

// One word of a mode's variable, case and surrounding blanks ignored.
std::string word(sv value) { return lower(trim(value)); }

// auto, on (1, true) or off (0, false), as FERRY_GDS and FERRY_DIRECT_IO take them.
template <class Mode>
Mode parse_switch(sv name, sv value) {
    std::string v = word(value);
    if (v == "auto") return Mode::auto_;
    if (v == "on" || v == "1" || v == "true") return Mode::on;
    if (v == "off" || v == "0" || v == "false") return Mode::off;
    refuse(name, value, "must be auto, on or off");
}

// A size that is 0 ("derive") or passes `ok`; refused with `why` otherwise. Each value is
// checked before it is stored: a refused value leaves the settings as they were.
template <class Ok>
std::size_t parse_derived_size(sv name, sv value, Ok ok, const char* why) {
    std::size_t n = parse_size(name, value);
    if (n != 0 && !ok(n)) refuse(name, value, why);
    return n;
}

// A member shown in to_json as it is stored (numbers, text)...
template <auto Member>
void show(const settings& s, json& j, sv key) { j[std::string(key)] = s.*Member; }

// ...or as the word its variable takes (modes).
template <auto Member>
void show_word(const settings& s, json& j, sv key) { j[std::string(key)] = std::string(to_string(s.*Member)); }

// One setting: its variable, its key in to_json (Python's ferry.settings attribute), how a
// value of the variable is parsed into the settings, and how the settings show it. Adding a
// setting is one row here, its member in include/ferry/settings.hpp and its line in the
// documentation (a test fails when that line is missing).
struct setting_row {
    sv variable;
    sv key;
    void (*parse)(settings& s, sv name, sv value);
    void (*show)(const settings& s, json& j, sv key);
};

const setting_row rows[] = {
    {"FERRY_THREADS", "threads",
     [](settings& s, sv n, sv v) { s.threads = parse_count(n, v, 0, 1024); }, show<&settings::threads>},
    {"FERRY_TASK_SIZE", "task_size",
     [](settings& s, sv n, sv v) {
         s.task_size = parse_derived_size(n, v, [](std::size_t x) { return x >= 4096; },
                                          "must be 0 (derive) or at least 4096 bytes");
     },
     show<&settings::task_size>},
    {"FERRY_STAGING_BUFFER_SIZE", "staging_buffer_size",
     [](settings& s, sv n, sv v) {
         s.staging_buffer_size = parse_derived_size(n, v, [](std::size_t x) { return x >= 65536 && x % 4096 == 0; },
                                                    "must be 0 (derive) or a multiple of 4096 of at least 64K");
     },
     show<&settings::staging_buffer_size>},
    {"FERRY_STAGING_BUFFERS", "staging_buffers",
     [](settings& s, sv n, sv v) { s.staging_buffers = parse_count(n, v, 2, 64); }, show<&settings::staging_buffers>},
    {"FERRY_STAGING_MEMORY_LIMIT", "staging_memory_limit",
     [](settings& s, sv n, sv v) {
         s.staging_memory_limit = parse_derived_size(n, v, [](std::size_t x) { return x >= (1u << 20); },
                                                     "must be 0 (derive) or at least 1M");
     },
     show<&settings::staging_memory_limit>},
    {"FERRY_STREAM_LANES", "stream_lanes",
     [](settings& s, sv n, sv v) { s.stream_lanes = parse_count(n, v, 0, 64); }, show<&settings::stream_lanes>},
    {"FERRY_LANE_BUFFER_SIZE", "lane_buffer_size",
     [](settings& s, sv n, sv v) {
         s.lane_buffer_size = parse_derived_size(n, v, [](std::size_t x) { return x >= 65536 && x % 65536 == 0; },
                                                 "must be 0 (derive) or a multiple of 64K");
     },
     show<&settings::lane_buffer_size>},
    {"FERRY_LANE_THRESHOLD", "lane_threshold",
     [](settings& s, sv n, sv v) { s.lane_threshold = word(v) == "off" ? lanes_off : parse_size(n, v); },
     [](const settings& s, json& j, sv k) {
         if (s.lane_threshold == lanes_off) j[std::string(k)] = "off";
         else j[std::string(k)] = s.lane_threshold;
     }},
    {"FERRY_GDS", "gds",
     [](settings& s, sv n, sv v) { s.gds = parse_switch<gds_mode>(n, v); }, show_word<&settings::gds>},
    {"FERRY_GDS_THRESHOLD", "gds_threshold",
     [](settings& s, sv n, sv v) { s.gds_threshold = parse_size(n, v); }, show<&settings::gds_threshold>},
    {"FERRY_DIRECT_IO", "direct_io",
     [](settings& s, sv n, sv v) { s.direct_io = parse_switch<direct_io_mode>(n, v); },
     show_word<&settings::direct_io>},
    {"FERRY_IO_URING", "io_uring",
     [](settings& s, sv n, sv v) { s.io_uring = parse_switch<io_uring_mode>(n, v); },
     show_word<&settings::io_uring>},
    {"FERRY_IO_URING_QUEUE_DEPTH", "io_uring_queue_depth",
     [](settings& s, sv n, sv v) { s.io_uring_queue_depth = parse_count(n, v, 1, 4096); },
     show<&settings::io_uring_queue_depth>},
    {"FERRY_LOG_LEVEL", "log_level",
     [](settings& s, sv n, sv v) {
         std::string w = word(v);
         if (w == "error") s.log = log_level::error;
         else if (w == "warn" || w == "warning") s.log = log_level::warn;
         else if (w == "info") s.log = log_level::info;
         else if (w == "debug") s.log = log_level::debug;
         else refuse(n, v, "must be error, warn, info or debug");
     },
     show_word<&settings::log>},
    {"FERRY_CUFILE_LIBRARY", "cufile_library",
     [](settings& s, sv n, sv v) {
         if (trim(v).empty()) refuse(n, v, "must name a library");
         s.cufile_library = std::string(trim(v));
     },
     show<&settings::cufile_library>},
    {"FERRY_REMOTE_CONCURRENCY", "remote_concurrency",
     [](settings& s, sv n, sv v) { s.remote_concurrency = parse_count(n, v, 0, 1024); },
     show<&settings::remote_concurrency>},
    {"FERRY_REMOTE_RANGE_SIZE", "remote_range_size",
     [](settings& s, sv n, sv v) {
         s.remote_range_size = parse_derived_size(n, v, [](std::size_t x) { return x >= 65536; },
                                                  "must be 0 (derive) or at least 64K");
     },
     show<&settings::remote_range_size>},
    // Durations are kept and shown in milliseconds.
    {"FERRY_REMOTE_CONNECT_TIMEOUT", "remote_connect_timeout",
     [](settings& s, sv n, sv v) { s.remote_connect_timeout_ms = parse_duration_ms(n, v, 1, 3600000); },
     show<&settings::remote_connect_timeout_ms>},
    {"FERRY_REMOTE_TIMEOUT", "remote_timeout",
     [](settings& s, sv n, sv v) { s.remote_stall_timeout_ms = parse_duration_ms(n, v, 1000, 3600000); },
     show<&settings::remote_stall_timeout_ms>},
    {"FERRY_REMOTE_RETRIES", "remote_retries",
     [](settings& s, sv n, sv v) { s.remote_retries = parse_count(n, v, 0, 100); }, show<&settings::remote_retries>},
    {"FERRY_REMOTE_RETRY_DELAY", "remote_retry_delay",
     [](settings& s, sv n, sv v) { s.remote_retry_delay_ms = parse_duration_ms(n, v, 0, 60000); },
     show<&settings::remote_retry_delay_ms>},
    {"FERRY_REMOTE_CA_BUNDLE", "remote_ca_bundle",
     [](settings& s, sv, sv v) { s.remote_ca_bundle = std::string(trim(v)); }, show<&settings::remote_ca_bundle>},
    {"FERRY_S3_ADDRESSING", "s3_addressing",
     [](settings& s, sv n, sv v) {
         std::string w = word(v);
         if (w != "auto" && w != "path" && w != "virtual") refuse(n, v, "must be auto, path or virtual");
         s.s3_addressing = w;
     },
     show<&settings::s3_addressing>},
};

}  // namespace

void apply_setting(settings& s, std::string_view name, std::string_view value) {
    for (const setting_row& r : rows)
        if (r.variable == name) return r.parse(s, name, value);
    throw usage_error("unknown setting " + std::string(name));
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
    std::vector<std::string_view> out;
    for (const setting_row& r : rows) out.push_back(r.variable);
    return out;
}

settings settings::resolved() const {
    settings r = *this;
    // I/O threads: a request is served by both disk and PCIe, and 16 threads of page-cache reads
    // into pinned memory run at 41-48 GB/s on the H200 machine (the pread ceiling of `ferry
    // bench`, docs/benchmarks.md), near PCIe's 55, so use the cores up to 16, and never fewer than 4
    // so that small machines still overlap reads with copies.
    if (r.threads == 0) r.threads = std::clamp<std::size_t>(hardware_threads, 4, 16);
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
    if (r.lane_buffer_size == 0)
        r.lane_buffer_size = detail::fit_lane_buffer_size(4 * r.staging_buffer_size, r.threads, r.staging_buffers,
                                                          r.staging_buffer_size, r.staging_memory_limit,
                                                          r.stream_lanes);
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
    json j;
    for (const setting_row& r : rows) r.show(s, j, r.key);
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
