// The s3:// store operations (see s3_store.hpp).
#include "backend/s3/s3_store.hpp"

#include <algorithm>
#include <chrono>
#include <ctime>

#include <nlohmann/json.hpp>

#include "backend/http/http_client.hpp"
#include "backend/http/http_source.hpp"
#include "backend/http/xml_field.hpp"
#include "backend/s3/s3_bucket.hpp"
#include "backend/s3/s3_location.hpp"

namespace ferry::detail {
namespace {

using json = nlohmann::json;

std::string iso_time(std::chrono::system_clock::time_point t) {
    std::time_t tt = std::chrono::system_clock::to_time_t(t);
    std::tm tm{};
    ::gmtime_r(&tt, &tm);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
    return buf;
}

std::vector<listed_object> list(const location& prefix, const settings& s) {
    const std::string key_prefix = split_s3_url(prefix).second;
    std::vector<listed_object> out;
    for (auto& e : list_s3_prefix(prefix, s))
        out.push_back({e.key.substr(std::min(e.key.size(), key_prefix.size())), e.size});
    return out;
}

json probe(const location& where, const settings& s) {
    json p;
    auto l = resolve_s3_location(where, {}, process_environment(), s);
    p["endpoint"] = l.endpoint;
    p["endpoint_source"] = l.endpoint_source;
    p["region"] = l.region;
    p["addressing"] = l.path_style ? "path" : "virtual host";
    p["credentials"] = l.credentials.source;
    p["credential_chain"] = l.chain;
    // Temporary credentials: when they end and when the signer renews them (never the key, the
    // secret or the token).
    if (auto e = l.signer->expires()) p["credentials_expire"] = iso_time(*e);
    if (auto r = l.signer->renews_at()) p["credentials_renew_at"] = iso_time(*r);
    if (!l.key.empty() && l.key.back() != '/') return p;
    // A prefix: list it (one key) to see the bucket answers, and probe its first object.
    http_client client(s);
    http_request rq;
    rq.url = l.bucket_url + "?list-type=2&max-keys=1&prefix=" + uri_encode(l.key, false);
    rq.follow_redirects = false;
    auto t0 = std::chrono::steady_clock::now();
    http_response r = client.perform(rq, l.signer->current());
    p["latency_ms"] = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (r.status != 200) {
        p["error"] = "listing " + l.location + " failed: " +
                     (r.status ? "HTTP " + std::to_string(r.status) : r.curl_error) + " " + describe_response(r);
        return p;
    }
    p["exists"] = true;
    std::string first = xml_field(r.body, "Key");
    // What a checkpoint load would find there (the index, else the shards).
    try {
        auto entries = list_s3_prefix(location("s3://" + l.bucket + "/" + l.key), s);
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
    p["probed_object"] = "s3://" + l.bucket + "/" + first;
    return p;
}

}  // namespace

store_operations s3_store() {
    store_operations o;
    o.list = list;
    o.remove = [](const location& object, const settings& s) { delete_s3_object(object, s); };
    o.probe = probe;
    return o;
}

}  // namespace ferry::detail
