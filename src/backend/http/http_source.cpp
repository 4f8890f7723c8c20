// Ranged GETs with retries, resumption and identity checks (see http_source.hpp).
#include "backend/http/http_source.hpp"

#include <algorithm>
#include <charconv>

#include "backend/http/xml_field.hpp"
#include "backend/location.hpp"
#include "log.hpp"

namespace ferry::detail {
namespace {

// "bytes first-last/total" or "bytes */total": first and total (UINT64_MAX when "*").
struct content_range {
    std::uint64_t first = UINT64_MAX, last = UINT64_MAX, total = UINT64_MAX;
    bool valid = false;
};

bool parse_u64(std::string_view s, std::uint64_t& v) {
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    return !s.empty() && ec == std::errc() && p == s.data() + s.size();
}

content_range parse_content_range(std::string_view h) {
    content_range r;
    if (h.rfind("bytes ", 0) != 0) return r;
    h.remove_prefix(6);
    auto slash = h.find('/');
    if (slash == std::string_view::npos) return r;
    std::string_view span = h.substr(0, slash), total = h.substr(slash + 1);
    if (total != "*" && !parse_u64(total, r.total)) return r;
    if (span != "*") {
        auto dash = span.find('-');
        if (dash == std::string_view::npos || !parse_u64(span.substr(0, dash), r.first) ||
            !parse_u64(span.substr(dash + 1), r.last))
            return r;
    }
    r.valid = true;
    return r;
}

bool weak(const std::string& etag) { return etag.rfind("W/", 0) == 0; }

}  // namespace

std::string describe_response(const http_response& r) {
    if (!r.refused.empty()) return r.refused;
    if (r.curl_code != 0 && r.status == 0) return r.curl_error;
    std::string code = xml_field(r.body, "Code"), message = xml_field(r.body, "Message");
    std::string s = code.empty() ? std::string() : code;
    if (!message.empty()) s += (s.empty() ? "" : ": ") + message;
    if (r.curl_code != 0) s += (s.empty() ? "" : "; ") + r.curl_error;
    return s;
}

http_source::http_source(http_target target, const settings& s)
    : target_(std::move(target)),
      settings_(s.resolved()),
      client_(settings_),
      retries_(std::make_unique<std::atomic<std::uint64_t>>(0)),
      ranges_ignored_(std::make_unique<std::atomic<bool>>(false)) {
    identity_ = probe();
    if (identity_.checksum)
        tally_ = std::make_unique<checksum_tally>(*identity_.checksum, identity_.size, target_.location);
    if (log_enabled(log_level::info, settings_))
        log(log_level::info, settings_,
            target_.location + ": " + std::to_string(identity_.size) + " bytes, etag " +
                (identity_.etag.empty() ? "(none)" : identity_.etag) + ", " +
                (identity_.ranges ? std::to_string(settings_.remote_concurrency) + " ranged GETs of " +
                                        std::to_string(settings_.remote_range_size) + " bytes in flight"
                                  : std::string("no Range support: one plain GET per read")) +
                (auth().label.empty() ? "" : ", credentials: " + auth().label) +
                (identity_.checksum ? ", x-amz-checksum-" + identity_.checksum->alg + " checked once every byte is read"
                                    : identity_.checksum_note.empty() ? "" : ", not checked: " + identity_.checksum_note));
}

source_traits http_source::traits() const noexcept {
    source_traits t;
    t.remote = true;
    t.request_size = settings_.remote_range_size;
    t.concurrency = settings_.remote_concurrency;
    t.streams = true;
    if (!identity_.ranges || ranges_ignored_->load()) {
        // Each read streams the object from its first byte: one task per read, not parallel ones.
        t.ranged = false;
        t.concurrency = 1;
        t.request_size = static_cast<std::size_t>(std::max<std::uint64_t>(identity_.size, 1));
    }
    return t;
}

std::uint64_t http_source::retries() const noexcept { return retries_->load(); }

void http_source::fail(const http_response& r, const std::string& what, const io_context& where) const {
    std::string detail = describe_response(r);
    io_context w = where;
    if (w.path.empty()) w.path = target_.location;
    throw remote_error(r.status, target_.location, what + (detail.empty() ? "" : " (" + detail + ")"),
                       auth().label, std::move(w));
}

http_auth http_source::auth() const { return target_.signer ? target_.signer->current() : target_.auth; }

remote_identity http_source::probe() {
    io_context where{target_.location, 0, 0};
    auto attempt = [&](bool head) {
        char probe_byte = 0;  // outlives every request that writes it
        for (std::size_t tries = 0;; ++tries) {
            http_request rq;
            rq.url = target_.url;
            rq.follow_redirects = target_.follow_redirects;
            if (target_.object_checksums) rq.headers.push_back("x-amz-checksum-mode: ENABLED");
            if (head) {
                rq.method = "HEAD";
            } else {
                rq.range = "0-0";
                rq.sink = &probe_byte;  // the one byte is read and dropped
                rq.sink_capacity = 1;
            }
            const http_auth signing = auth();
            http_response r = client_.perform(rq, signing);
            if (r.credentials_expired() && target_.signer && tries == 0 && target_.signer->renew(signing)) continue;
            if ((r.transport_retryable() || r.status_retryable()) && tries < settings_.remote_retries) {
                retries_->fetch_add(1);
                backoff_sleep(tries, settings_.remote_retry_delay_ms, "waiting to retry " + target_.location);
                continue;
            }
            return r;
        }
    };
    http_response r = attempt(true);
    bool from_head = true;
    // Presigned GET URLs refuse HEAD (403: the signature covers the method), some servers answer
    // 405 or 501: ask for the first byte instead.
    if (r.curl_code == 0 && (r.status == 403 || r.status == 405 || r.status == 501 || r.status == 400)) {
        r = attempt(false);
        from_head = false;
    }
    if (r.curl_code != 0 && r.status == 0) fail(r, "cannot reach the object", where);
    remote_identity id;
    id.etag = r.header("etag");
    id.last_modified = r.header("last-modified");
    if (from_head) {
        if (r.status < 200 || r.status >= 300) fail(r, "cannot open the object", where);
        std::uint64_t len = 0;
        if (!parse_u64(r.header("content-length"), len))
            fail(r, "the server did not say the object's size (no Content-Length)", where);
        id.size = len;
        id.checksum = parse_object_checksum(r.headers, id.etag, id.checksum_note);
        // Servers that serve ranges mostly say so; one that does not say is asked for one byte
        // (a round trip at open, only for such servers), so the plan knows before the first read.
        std::string ar = r.header("accept-ranges");
        if (ar.find("bytes") == std::string::npos && len > 0) {
            if (ar.find("none") != std::string::npos) {
                id.ranges = false;
            } else {
                http_response one = attempt(false);
                if (one.curl_code == 0 && one.status == 200) id.ranges = false;
            }
        }
    } else {
        content_range cr = parse_content_range(r.header("content-range"));
        if (r.status == 416 && cr.valid && cr.total != UINT64_MAX) {
            id.size = cr.total;  // "bytes */0": an empty object
        } else if (r.status == 206 && cr.valid && cr.total != UINT64_MAX) {
            id.size = cr.total;
        } else if (r.status == 200 && parse_u64(r.header("content-length"), id.size)) {
            id.ranges = false;  // no Range support: each read is a plain GET
        } else {
            fail(r, "cannot open the object", where);
        }
    }
    return id;
}

void http_source::read(char* dst, std::size_t n, std::uint64_t offset, const io_context& where) {
    ranged(n, offset, where, [dst](http_request& rq, std::size_t done) { rq.sink = dst + done; });
    if (tally_) tally_->add(offset, n, tally_->hash(dst, n));
}

void http_source::read_stream(std::size_t n, std::uint64_t offset, byte_sink& sink, const io_context& where) {
    // A resumed request starts at the first byte the sink has not been given, so the sink sees
    // each byte once, in order (and the running CRC covers each byte once).
    std::uint32_t crc = 0;
    ranged(n, offset, where, [&sink, &crc, this](http_request& rq, std::size_t) {
        rq.consume = [&sink, &crc, this](const char* data, std::size_t len) {
            if (tally_) crc = tally_->hash(data, len, crc);
            sink.consume(data, len);
        };
    });
    if (tally_) tally_->add(offset, n, crc);
}

std::string http_source::version() const {
    if (!identity_.etag.empty()) return "ETag " + identity_.etag;
    if (!identity_.last_modified.empty()) return "Last-Modified " + identity_.last_modified;
    return {};
}

void http_source::ranged(std::size_t n, std::uint64_t offset, const io_context& where_in,
                         const std::function<void(http_request&, std::size_t)>& aim) {
    // Messages name the redacted location, whatever the caller calls it (a presigned URL's
    // signature must not reach an error).
    io_context where = where_in;
    where.path = target_.location;
    if (n == 0) return;
    if (offset > identity_.size || n > identity_.size - offset) throw end_of_file_error(where, identity_.size);

    std::size_t done = 0;
    std::size_t tries = 0;
    bool renewed = false;  // credentials renewed once for this range after an "expired" answer
    while (done < n) {
        std::uint64_t first = offset + done, last = offset + n - 1;
        // Without Range support the body is the whole object: drop what comes before the
        // range and end the transfer once the range is in.
        const bool plain = !identity_.ranges || ranges_ignored_->load();
        http_request rq;
        rq.url = target_.url;
        rq.follow_redirects = target_.follow_redirects;
        if (plain) {
            rq.skip = first;
            rq.end_when_full = true;
        } else {
            rq.range = std::to_string(first) + "-" + std::to_string(last);
        }
        if (!identity_.etag.empty() && !weak(identity_.etag)) rq.headers.push_back("If-Match: " + identity_.etag);
        else if (!identity_.last_modified.empty())
            rq.headers.push_back("If-Unmodified-Since: " + identity_.last_modified);
        rq.sink_capacity = n - done;
        aim(rq, done);
        bool whole = first == 0 && last + 1 == identity_.size;
        static const std::string ignored = "the server sent the whole object for a range";
        rq.accept = [&](int status, const std::map<std::string, std::string>& h) -> std::string {
            auto get = [&](const char* name) {
                auto it = h.find(name);
                return it == h.end() ? std::string() : it->second;
            };
            std::string etag = get("etag");
            if (!identity_.etag.empty() && !etag.empty() && etag != identity_.etag)
                return "the object changed since it was opened (ETag " + identity_.etag + " became " + etag + ")";
            std::string lm = get("last-modified");
            if (identity_.etag.empty() && !identity_.last_modified.empty() && !lm.empty() &&
                lm != identity_.last_modified)
                return "the object changed since it was opened (Last-Modified " + identity_.last_modified +
                       " became " + lm + ")";
            if (status == 206) {
                content_range cr = parse_content_range(get("content-range"));
                if (!cr.valid || cr.first != first)
                    return "the server answered another range (" + get("content-range") + ")";
                if (cr.total != UINT64_MAX && cr.total != identity_.size)
                    return "the object changed since it was opened (size " + std::to_string(identity_.size) +
                           " became " + std::to_string(cr.total) + ")";
                return {};
            }
            if (status == 200 && (whole || plain)) {
                std::uint64_t len = 0;
                std::string cl = get("content-length");
                if (!cl.empty() && parse_u64(cl, len) && len != identity_.size)
                    return "the object changed since it was opened (size " + std::to_string(identity_.size) +
                           " became " + std::to_string(len) + ")";
                return {};
            }
            if (status == 200) return ignored;
            return "the server answered a range with status " + std::to_string(status);
        };
        const http_auth signing = auth();
        http_response r = client_.perform(rq, signing);
        if (r.consumer_error) std::rethrow_exception(r.consumer_error);
        done += r.received;
        bool progressed = r.received > 0;
        if (r.curl_code == 0 && r.refused.empty() && r.status >= 200 && r.status < 300) {
            if (done == n) return;
            // A complete response that is short: the server cut the body without saying so.
        } else if (r.refused == ignored) {
            // It said "Accept-Ranges: bytes" and then ignored a Range: read as without ranges
            // from now on (not a retry: nothing is wrong with the server).
            if (!ranges_ignored_->exchange(true))
                log(log_level::info, settings_,
                    target_.location + ": the server ignores Range requests: one plain GET per read");
            continue;
        } else if (!r.refused.empty()) {
            io_context w{where.path, first, last + 1 - first};
            fail(r, "refused a response", w);
        } else if (r.status == 412) {
            io_context w{where.path, first, last + 1 - first};
            throw remote_error(412, target_.location,
                               "the object changed since it was opened (If-Match " + identity_.etag + " failed)",
                               signing.label, w);
        } else if (r.status == 416) {
            throw end_of_file_error(io_context{where.path, first, last + 1 - first}, identity_.size);
        } else if (r.credentials_expired() && target_.signer && !renewed) {
            // Temporary credentials the server holds expired (a clock ahead of ours, or a
            // renewal that came too late): renew them and ask again, once per range.
            renewed = true;
            if (target_.signer->renew(signing)) {
                retries_->fetch_add(1);
                continue;
            }
            fail(r, "ranged GET failed", io_context{where.path, first, last + 1 - first});
        } else if (!(r.transport_retryable() || r.status_retryable())) {
            fail(r, "ranged GET failed", io_context{where.path, first, last + 1 - first});
        }
        if (progressed) tries = 0;  // a resumed range starts its retry budget again
        if (tries >= settings_.remote_retries) {
            io_context w{where.path, first, last + 1 - first};
            if (r.status >= 200 && r.status < 300 && r.curl_code == 0) {
                r.refused = "the body ended after " + std::to_string(r.received) + " bytes, " +
                            std::to_string(last + 1 - first) + " were due";
            }
            fail(r, "ranged GET failed after " + std::to_string(tries) + " retries", w);
        }
        retries_->fetch_add(1);
        if (log_enabled(log_level::debug, settings_))
            log(log_level::debug, settings_,
                target_.location + ": retrying bytes [" + std::to_string(offset + done) + ", " +
                    std::to_string(offset + n) + ") after " +
                    (r.status ? "HTTP " + std::to_string(r.status) : r.curl_error));
        backoff_sleep(tries, settings_.remote_retry_delay_ms, "waiting to retry " + target_.location);
        ++tries;
    }
}

std::unique_ptr<source> open_http_source(const location& where, open_mode mode, const settings& s) {
    if (where.scheme() != "http" && where.scheme() != "https")
        throw usage_error("not an http:// or https:// URL: " + where.shown());
    // Left to curl, an empty host reads the path's first segment as one ("Could not resolve
    // host: a.npy").
    if (where.host().empty()) throw usage_error("the URL has no host: " + where.shown());
    if (mode != open_mode::read)
        throw usage_error("http(s) objects open for reading only: " + where.shown());
    http_target t;
    t.url = where.text();
    t.location = where.shown();
    t.kind = "http";
    return std::make_unique<http_source>(std::move(t), s);
}

}  // namespace ferry::detail
