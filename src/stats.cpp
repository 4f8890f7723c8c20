#include "ferry/stats.hpp"

#include <algorithm>
#include <array>
#include <vector>

#include "os/fork_safe_mutex.hpp"
#include "stats_counter.hpp"

namespace ferry {
namespace detail {
namespace {
// Made at load, not on first use: a fork while a worker was inside a first-use initialization
// would leave the child's copy of its guard taken for good. Outlives every file, even at exit.
stats_counter* const process_wide = new stats_counter;
// Held around every use of the process counter's fallback map, so that fork() never copies
// its inner lock taken (os/fork_safe_mutex.hpp). The byte counters are lock-free.
fork_safe_mutex process_mutex;
}  // namespace
}  // namespace detail

namespace detail {
namespace {
fork_safe_mutex route_mutex;  // never left taken in a forked child
struct route_name {
    std::string source, mover;
};
// Made at load; slots are never reused, so a count never lands under another route's name. A
// slot's name is written before routes_known counts it, so snapshots read names without a lock.
std::array<route_name, max_routes>* const route_names = new std::array<route_name, max_routes>();
std::atomic<int> routes_known{0};
}  // namespace

int route_slot(std::string_view source, std::string_view mover) {
    std::lock_guard lock(route_mutex);
    const int known = routes_known.load(std::memory_order_relaxed);
    for (int i = 0; i < known; ++i)
        if ((*route_names)[i].source == source && (*route_names)[i].mover == mover) return i;
    if (known >= max_routes) return -1;
    (*route_names)[known] = {std::string(source), std::string(mover)};
    routes_known.store(known + 1, std::memory_order_release);
    return known;
}
}  // namespace detail

const route_stats* io_stats::route(std::string_view source, std::string_view mover) const {
    for (const auto& r : routes)
        if (r.source == source && r.mover == mover) return &r;
    return nullptr;
}

namespace {
void add_counters(path_counters& to, const path_counters& from, int sign) {
    to.bytes += sign > 0 ? from.bytes : -from.bytes;
    to.requests += sign > 0 ? from.requests : -from.requests;
    to.nanoseconds += sign > 0 ? from.nanoseconds : -from.nanoseconds;
}
void merge_routes(std::vector<route_stats>& to, const std::vector<route_stats>& from, int sign) {
    for (const auto& r : from) {
        auto it = std::find_if(to.begin(), to.end(),
                               [&](const route_stats& t) { return t.source == r.source && t.mover == r.mover; });
        if (it == to.end()) {
            if (sign < 0) continue;
            to.push_back({r.source, r.mover, {}, {}});
            it = to.end() - 1;
        }
        add_counters(it->read, r.read, sign);
        add_counters(it->write, r.write, sign);
    }
    to.erase(std::remove_if(to.begin(), to.end(),
                            [](const route_stats& r) { return r.read.bytes == 0 && r.write.bytes == 0 &&
                                                              r.read.requests == 0 && r.write.requests == 0; }),
             to.end());
}
}  // namespace

std::string_view to_string(io_path p) {
    switch (p) {
        case io_path::gds: return "gds";
        case io_path::cufile_compat: return "cufile-compat";
        case io_path::staged: return "staged";
        case io_path::staged_direct: return "staged+direct";
        case io_path::host: return "host";
        case io_path::direct: return "direct";
        case io_path::count_: break;
    }
    return "?";
}

std::uint64_t io_stats::bytes_read() const {
    std::uint64_t n = 0;
    for (const auto& c : read) n += c.bytes;
    return n;
}

std::uint64_t io_stats::bytes_written() const {
    std::uint64_t n = 0;
    for (const auto& c : write) n += c.bytes;
    return n;
}

io_stats& io_stats::operator+=(const io_stats& o) {
    for (int i = 0; i < io_path_count; ++i) {
        read[i].bytes += o.read[i].bytes;
        read[i].requests += o.read[i].requests;
        read[i].nanoseconds += o.read[i].nanoseconds;
        write[i].bytes += o.write[i].bytes;
        write[i].requests += o.write[i].requests;
        write[i].nanoseconds += o.write[i].nanoseconds;
    }
    for (const auto& [k, v] : o.fallbacks) fallbacks[k] += v;
    merge_routes(routes, o.routes, +1);
    return *this;
}

io_stats io_stats::operator-(const io_stats& e) const {
    io_stats d = *this;
    for (int i = 0; i < io_path_count; ++i) {
        d.read[i].bytes -= e.read[i].bytes;
        d.read[i].requests -= e.read[i].requests;
        d.read[i].nanoseconds -= e.read[i].nanoseconds;
        d.write[i].bytes -= e.write[i].bytes;
        d.write[i].requests -= e.write[i].requests;
        d.write[i].nanoseconds -= e.write[i].nanoseconds;
    }
    for (const auto& [k, v] : e.fallbacks) {
        auto it = d.fallbacks.find(k);
        if (it == d.fallbacks.end()) continue;
        it->second -= v;
        if (it->second == 0) d.fallbacks.erase(it);
    }
    merge_routes(d.routes, e.routes, -1);
    return d;
}

io_stats process_stats() {
    std::lock_guard lock(detail::process_mutex);
    return detail::process_counter().snapshot();
}

namespace detail {
std::atomic<std::uint64_t> staging_in_use{0};
std::atomic<std::uint64_t> staging_peak{0};

void note_staging(std::int64_t delta) {
    std::uint64_t now = staging_in_use.fetch_add(static_cast<std::uint64_t>(delta)) + static_cast<std::uint64_t>(delta);
    std::uint64_t peak = staging_peak.load();
    while (now > peak && !staging_peak.compare_exchange_weak(peak, now)) {
    }
}
}  // namespace detail

std::uint64_t staging_memory_in_use() { return detail::staging_in_use.load(); }
std::uint64_t staging_memory_peak() { return detail::staging_peak.load(); }
void reset_process_stats() {
    std::lock_guard lock(detail::process_mutex);
    detail::process_counter().reset();
}

namespace detail {

void stats_counter::add(direction dir, io_path p, int route, std::uint64_t bytes, std::uint64_t ns,
                        std::uint64_t requests) {
    const int way = dir == direction::write ? 1 : 0;
    cell& c = cells_[way][static_cast<int>(p)];
    c.bytes.fetch_add(bytes, std::memory_order_relaxed);
    c.requests.fetch_add(requests, std::memory_order_relaxed);
    c.ns.fetch_add(ns, std::memory_order_relaxed);
    if (route < 0 || route >= max_routes) return;
    cell& r = routes_[way][route];
    r.bytes.fetch_add(bytes, std::memory_order_relaxed);
    r.requests.fetch_add(requests, std::memory_order_relaxed);
    r.ns.fetch_add(ns, std::memory_order_relaxed);
}

bool stats_counter::add_fallback(const std::string& reason) {
    std::lock_guard lock(mutex_);
    return fallbacks_[reason]++ == 0;
}

io_stats stats_counter::snapshot() const {
    io_stats s;
    for (int i = 0; i < io_path_count; ++i) {
        s.read[i] = {cells_[0][i].bytes.load(), cells_[0][i].requests.load(), cells_[0][i].ns.load()};
        s.write[i] = {cells_[1][i].bytes.load(), cells_[1][i].requests.load(), cells_[1][i].ns.load()};
    }
    const int known = routes_known.load(std::memory_order_acquire);
    for (int i = 0; i < known; ++i) {
        path_counters rd{routes_[0][i].bytes.load(), routes_[0][i].requests.load(), routes_[0][i].ns.load()};
        path_counters wr{routes_[1][i].bytes.load(), routes_[1][i].requests.load(), routes_[1][i].ns.load()};
        if (!rd.bytes && !rd.requests && !wr.bytes && !wr.requests) continue;
        const route_name& n = (*route_names)[static_cast<std::size_t>(i)];
        s.routes.push_back({n.source, n.mover, rd, wr});
    }
    std::lock_guard lock(mutex_);
    s.fallbacks = fallbacks_;
    return s;
}

void stats_counter::reset() {
    for (auto& row : cells_)
        for (auto& c : row) c.bytes = c.requests = c.ns = 0;
    for (auto& row : routes_)
        for (auto& c : row) c.bytes = c.requests = c.ns = 0;
    std::lock_guard lock(mutex_);
    fallbacks_.clear();
}

stats_counter& process_counter() { return *process_wide; }

void note_process_fallback(const std::string& reason) {
    std::lock_guard lock(process_mutex);
    process_wide->add_fallback(reason);
}

}  // namespace detail
}  // namespace ferry
