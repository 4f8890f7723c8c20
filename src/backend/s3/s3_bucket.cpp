// ListObjectsV2 and DeleteObject (see s3_bucket.hpp).
#include "backend/s3/s3_bucket.hpp"

#include <cstdlib>

#include "backend/http/http_client.hpp"
#include "backend/http/http_source.hpp"
#include "backend/http/xml_field.hpp"
#include "backend/location.hpp"
#include "backend/s3/s3_location.hpp"
#include "ferry/error.hpp"

namespace ferry::detail {
namespace {

// One signed request with retries (429, 5xx, timeouts) and one renewal of expired credentials.
http_response signed_request(const s3_location& l, http_client& c, http_request rq, const settings& s,
                             const std::string& what) {
    rq.follow_redirects = false;
    bool renewed = false;
    for (std::size_t tries = 0;; ++tries) {
        const http_auth signing = l.signer ? l.signer->current() : l.auth;
        http_response r = c.perform(rq, signing);
        if (r.curl_code == 0 && r.status >= 200 && r.status < 300) return r;
        if (r.credentials_expired() && l.signer && !renewed) {
            renewed = true;
            if (l.signer->renew(signing)) continue;
        }
        if (!(r.transport_retryable() || r.status_retryable()) || tries >= s.remote_retries) {
            std::string detail = describe_response(r);
            throw remote_error(r.status, l.location, what + (detail.empty() ? "" : " (" + detail + ")"), signing.label);
        }
        backoff_sleep(tries, s.remote_retry_delay_ms);
    }
}

}  // namespace

std::vector<s3_entry> list_s3_prefix(const location& prefix, const settings& config, bool direct_only,
                                     const s3_options& o, const env_lookup& env) {
    settings s = config.resolved();
    s3_location l = resolve_s3_location(prefix, o, env, s);
    http_client client(s);
    std::vector<s3_entry> out;
    std::string token;
    // Each page holds up to 1000 keys; the bound only stops a server that never says "done".
    for (int page = 0; page < 100000; ++page) {
        // SigV4 signs the query as given: parameters in canonical (sorted) order, AWS-encoded.
        std::string q = "?";
        if (!token.empty()) q += "continuation-token=" + uri_encode(token, false) + "&";
        if (direct_only) q += "delimiter=%2F&";
        q += "list-type=2&prefix=" + uri_encode(l.key, false);
        http_request rq;
        rq.url = l.bucket_url + q;
        http_response r = signed_request(l, client, rq, s, "cannot list the prefix");
        for (std::size_t at = r.body.find("<Contents>"); at != std::string::npos; at = r.body.find("<Contents>", at + 1)) {
            std::size_t end = r.body.find("</Contents>", at);
            if (end == std::string::npos) break;
            s3_entry e;
            e.key = xml_field(r.body, "Key", at, end);
            e.size = std::strtoull(xml_field(r.body, "Size", at, end).c_str(), nullptr, 10);
            e.etag = xml_field(r.body, "ETag", at, end);
            if (!e.key.empty()) out.push_back(std::move(e));
        }
        if (xml_field(r.body, "IsTruncated") != "true") return out;
        token = xml_field(r.body, "NextContinuationToken");
        if (token.empty())
            throw remote_error(r.status, l.location, "the listing is truncated but gives no continuation token",
                               l.auth.label);
    }
    throw remote_error(0, l.location, "the listing did not end after 100000 pages", l.auth.label);
}

void delete_s3_object(const location& where, const settings& config, const s3_options& o,
                      const env_lookup& env) {
    settings s = config.resolved();
    s3_location l = resolve_s3_location(where, o, env, s);
    if (l.key.empty()) throw usage_error("an s3:// location to delete needs an object key: " + l.location);
    http_client client(s);
    http_request rq;
    rq.method = "DELETE";
    rq.url = l.object_url;
    try {
        signed_request(l, client, rq, s, "cannot delete the object");
    } catch (const remote_error& e) {
        if (e.status() != 404) throw;  // S3-compatible stores that say 404 for a missing key
    }
}

}  // namespace ferry::detail
