// The doctor's probe of a remote location (see remote_probe.hpp).
#include "doctor/remote_probe.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <ctime>
#include <memory>
#include <thread>
#include <vector>

#include "backend/http/http_source.hpp"
#include "backend/http/xml_field.hpp"
#include "backend/location.hpp"
#include "backend/s3/s3_bucket.hpp"
#include "backend/s3/s3_source.hpp"

namespace ferry::doctor {
namespace {

using clock_type = std::chrono::steady_clock;

std::string iso_time(std::chrono::system_clock::time_point t) {
    std::time_t tt = std::chrono::system_clock::to_time_t(t);
    std::tm tm{};
    ::gmtime_r(&tt, &tm);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
    return buf;
}

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
    const std::string& s = detail::location(location).scheme();
    return s == "http" || s == "https" || s == "s3";
}

json probe_remote(const std::string& location, const settings& config) {
    settings s = config.resolved();
    json p;
    p["path"] = detail::shown_location(location);
    p["remote"] = true;
    p["type"] = "remote object";
    p["exists"] = false;
    const detail::location where(location);
    const std::string& scheme = where.scheme();
    p["scheme"] = scheme;
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
        if (scheme == "s3") {
            auto l = detail::resolve_s3_location(where, {}, detail::process_environment(), s);
            p["endpoint"] = l.endpoint;
            p["endpoint_source"] = l.endpoint_source;
            p["region"] = l.region;
            p["addressing"] = l.path_style ? "path" : "virtual host";
            p["credentials"] = l.credentials.source;
            p["credential_chain"] = l.chain;
            // Temporary credentials: when they end and when the signer renews them (never the
            // key, the secret or the token).
            if (auto e = l.signer->expires()) p["credentials_expire"] = iso_time(*e);
            if (auto r = l.signer->renews_at()) p["credentials_renew_at"] = iso_time(*r);
            if (l.key.empty() || l.key.back() == '/') {
                // A prefix: list it (one key) to see the bucket answers, and probe its first object.
                detail::http_client client(s);
                detail::http_request rq;
                rq.url = l.bucket_url + "?list-type=2&max-keys=1&prefix=" + detail::uri_encode(l.key, false);
                rq.follow_redirects = false;
                auto t0 = clock_type::now();
                detail::http_response r = client.perform(rq, l.signer->current());
                p["latency_ms"] = seconds_since(t0) * 1e3;
                if (r.status != 200) {
                    p["error"] = "listing " + l.location + " failed: " +
                                 (r.status ? "HTTP " + std::to_string(r.status) : r.curl_error) + " " +
                                 detail::describe_response(r);
                    return p;
                }
                p["exists"] = true;
                std::string first = detail::xml_field(r.body, "Key");
                // What a checkpoint load would find there (the index, else the shards).
                try {
                    auto entries = detail::list_s3_prefix(detail::location("s3://" + l.bucket + "/" + l.key), s);
                    std::size_t shards = 0;
                    bool index = false;
                    for (const auto& e : entries) {
                        index = index || e.key.ends_with("model.safetensors.index.json");
                        shards += e.key.ends_with(".safetensors");
                    }
                    if (index) p["checkpoint"] = "model.safetensors.index.json and " + std::to_string(shards) + " shards";
                    else if (shards) p["checkpoint"] = std::to_string(shards) + " *.safetensors objects, no index";
                } catch (const std::exception&) {
                    // The one-key listing above answered; a failing full listing adds nothing here.
                }
                if (first.empty()) {
                    p["objects"] = 0;
                    p["note"] = "the prefix holds no object: no throughput probe";
                    return p;
                }
                object = "s3://" + l.bucket + "/" + first;
                p["probed_object"] = object;
            }
        } else {
            p["endpoint"] = detail::shown_location(where.scheme() + "://" + std::string(where.authority()));
            p["credentials"] = "none (plain or presigned URL)";
        }
        settings quick = s;
        quick.remote_retries = std::min<std::size_t>(s.remote_retries, 2);
        auto t0 = clock_type::now();
        std::unique_ptr<detail::source> src =
            scheme == "s3" ? detail::open_s3_source(detail::location(object), open_mode::read, quick)
                           : detail::open_http_source(detail::location(object), open_mode::read, quick);
        double open_ms = seconds_since(t0) * 1e3;
        p["exists"] = true;
        p["size_bytes"] = src->size();
        if (auto* h = dynamic_cast<detail::http_source*>(src.get())) p["etag"] = h->identity().etag;
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
