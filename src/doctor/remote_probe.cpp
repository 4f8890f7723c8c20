// The doctor's probe of a remote location (see remote_probe.hpp).
#include "doctor/remote_probe.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend/registry.hpp"

namespace ferry::doctor {
namespace {

using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point t0) {
    return std::chrono::duration<double>(clock_type::now() - t0).count();
}

// Reads [0, n) with `threads` workers in `range`-byte GETs; GB/s.
double read_rate(detail::source& src, std::uint64_t n, std::size_t threads, std::size_t range) {
    std::vector<char> buf(n);
    std::atomic<std::uint64_t> next{0};
    std::atomic<bool> failed{false};
    auto t0 = clock_type::now();
    std::vector<std::thread> pool;
    for (std::size_t t = 0; t < threads; ++t)
        pool.emplace_back([&] {
            try {
                for (std::uint64_t off; !failed && (off = next.fetch_add(range)) < n;)
                    src.read(buf.data() + off, static_cast<std::size_t>(std::min<std::uint64_t>(range, n - off)), off, {});
            } catch (...) {
                failed = true;
            }
        });
    for (auto& th : pool) th.join();
    if (failed) return -1;
    return static_cast<double>(n) / seconds_since(t0) / 1e9;
}

}  // namespace

bool is_remote_location(const std::string& location) {
    return static_cast<bool>(detail::scheme_for(detail::location(location)).operations.probe);
}

json probe_remote(const std::string& location, const settings& config) {
    settings s = config.resolved();
    json p;
    p["path"] = detail::shown_location(location);
    p["remote"] = true;
    p["type"] = "remote object";
    p["exists"] = false;
    const detail::location where(location);
    const detail::scheme_entry entry = detail::scheme_for(where);
    p["scheme"] = where.scheme();
    json plan;
    plan["concurrency"] = s.remote_concurrency;
    plan["range_size"] = s.remote_range_size;
    plan["reason"] = std::to_string(s.remote_concurrency) + " ranged GETs of " +
                     std::to_string(s.remote_range_size >> 20) +
                     " MiB at once, each on its own kept-alive connection (FERRY_REMOTE_CONCURRENCY, "
                     "FERRY_REMOTE_RANGE_SIZE): one TCP stream rarely fills a fast link, and ranges this "
                     "size keep the per-request round trip small against the transfer";
    p["plan"] = plan;
    std::string object = location;
    try {
        // What the scheme's store says first (endpoint, credentials; for a prefix what it holds
        // and which object to time).
        json facts = entry.operations.probe(where, s);
        for (auto& [k, v] : facts.items()) p[k] = v;
        if (facts.contains("error") || facts.contains("note")) return p;
        if (facts.contains("probed_object")) object = facts["probed_object"].get<std::string>();
        settings quick = s;
        quick.remote_retries = std::min<std::size_t>(s.remote_retries, 2);
        auto t0 = clock_type::now();
        std::unique_ptr<detail::source> src = detail::open_source(detail::location(object), open_mode::read, quick);
        double open_ms = seconds_since(t0) * 1e3;
        p["exists"] = true;
        p["size_bytes"] = src->size();
        // A remote source's version() is "ETag <etag>" when the server sent one.
        if (std::string v = src->version(); v.starts_with("ETag ")) p["etag"] = v.substr(5);
        else p["etag"] = "";
        // Latency: the best of three one-byte ranged GETs (the open's HEAD pays the connect).
        double best = open_ms;
        if (src->size() > 0)
            for (int i = 0; i < 3; ++i) {
                char c;
                auto t1 = clock_type::now();
                src->read(&c, 1, 0, {});
                best = std::min(best, seconds_since(t1) * 1e3);
            }
        p["latency_ms"] = best;
        p["open_ms"] = open_ms;
        std::uint64_t n = std::min<std::uint64_t>(src->size(), 64u << 20);
        if (n > 0) {
            json tp;
            tp["bytes"] = n;
            std::size_t one_range = static_cast<std::size_t>(std::min<std::uint64_t>(n, s.remote_range_size));
            tp["one_connection_gbps"] = read_rate(*src, one_range, 1, one_range);
            std::size_t range = static_cast<std::size_t>(
                std::max<std::uint64_t>(1u << 20, std::min<std::uint64_t>(s.remote_range_size, n / s.remote_concurrency + 1)));
            tp["planned_gbps"] = read_rate(*src, n, s.remote_concurrency, range);
            tp["planned_connections"] = s.remote_concurrency;
            p["throughput"] = tp;
        }
    } catch (const remote_error& e) {
        p["error"] = e.what();
        if (e.status()) p["http_status"] = e.status();
        if (!p.contains("credentials")) p["credentials"] = e.credentials();
    } catch (const std::exception& e) {
        p["error"] = e.what();
    }
    return p;
}

}  // namespace ferry::doctor
