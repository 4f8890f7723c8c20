// One HTTP exchange over libcurl, and the connections kept between exchanges.
//
// Curl easy handles live in one process-wide pool, kept per host (scheme://host:port): a worker
// takes one for a request and gives it back, so each handle keeps its connection alive (HTTP/1.1
// keep-alive) for the next request to that host from any worker of any file. A checkpoint opens
// each shard twice (headers, then the load) and many shards sit on one host: per-file pools paid
// a new TCP (and TLS) handshake for every open. All handles share one curl share object for the
// DNS cache and TLS session IDs, so a new connection skips the lookup and the full handshake. A
// forked child never reuses its parent's connections (their sockets are shared with it).
//
// perform() makes exactly one attempt and reports what happened; retrying, resuming and
// checking an object's identity belong to the sources (http_source), which know what a
// response means.
//
// Thread safety: perform() may be called from many threads at once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "ferry/settings.hpp"

typedef void CURL;  // NOLINT: curl's own typedef, so this header needs no curl.h

namespace ferry::detail {

/// How a request is signed. Empty: not at all (plain or presigned URLs).
struct http_auth {
    std::string sigv4;          ///< CURLOPT_AWS_SIGV4 ("aws:amz:us-east-1:s3"), or ""
    std::string user_password;  ///< "ACCESS_KEY:SECRET" for SigV4; never shown anywhere
    std::string session_token;  ///< sent as x-amz-security-token when set
    std::string label;          ///< which credentials these are, for messages ("environment")
};

/// Signing material that may change while an object is read: temporary credentials renewed
/// before they expire. Thread safe.
class http_signer {
public:
    virtual ~http_signer() = default;
    /// The credentials to sign the next request with (renewed first when they are due).
    virtual http_auth current() = 0;
    /// The server refused `used` as expired: renew now. True when newer credentials are in place.
    virtual bool renew(const http_auth& used) = 0;
};

struct http_request {
    std::string method = "GET";  ///< GET, HEAD, PUT, POST, DELETE
    std::string url;
    std::vector<std::string> headers;  ///< "Name: value"
    std::string range;                 ///< CURLOPT_RANGE "first-last", or ""
    const char* body = nullptr;        ///< request body (PUT/POST), sent as is and hashed by SigV4
    std::size_t body_size = 0;
    /// Where a successful (2xx) response body goes: straight into [sink, sink + sink_capacity),
    /// or, when `consume` is set, handed to it piece by piece (at most sink_capacity bytes in
    /// all). Neither: into http_response::body. More bytes than the capacity abort the transfer.
    char* sink = nullptr;
    std::function<void(const char*, std::size_t)> consume;
    std::size_t sink_capacity = 0;
    /// Body bytes dropped before the sink gets any (a server that ignores Range sends the object
    /// from its first byte).
    std::uint64_t skip = 0;
    /// Once the sink holds sink_capacity bytes the transfer ends, not as an error (the rest of a
    /// whole-object body is not wanted).
    bool end_when_full = false;
    /// Called once the headers of a 2xx response are in, before any body byte is stored; a
    /// non-empty return aborts the transfer and becomes http_response::refused.
    std::function<std::string(int status, const std::map<std::string, std::string>& headers)> accept;
    bool follow_redirects = true;
};

struct http_response {
    int status = 0;          ///< HTTP status of the last response, 0 when none came
    int curl_code = 0;       ///< CURLcode (0: the exchange completed)
    std::string curl_error;  ///< curl's description of a failed exchange
    std::map<std::string, std::string> headers;  ///< names in lower case
    std::string body;        ///< the body when no sink took it (error bodies always land here)
    std::size_t received = 0;  ///< body bytes stored in the sink (or consumed)
    std::uint64_t skipped = 0;  ///< body bytes dropped (http_request::skip)
    bool ended_full = false;    ///< the transfer was ended once the sink was full (end_when_full)
    std::string refused;       ///< why accept() refused the response
    std::exception_ptr consumer_error;  ///< what `consume` threw (the transfer stopped there)
    double seconds = 0;        ///< time the exchange took

    /// The exchange failed below HTTP in a way a retry can fix: connection refused or reset,
    /// timeout, a body cut short.
    bool transport_retryable() const noexcept;
    /// Statuses a retry can fix: 408, 429, 5xx.
    bool status_retryable() const noexcept;
    /// The header's value, or "".
    std::string header(const std::string& lower_name) const;
    /// The S3-style error code of an XML error body ("NoSuchKey", "ExpiredToken"), or "".
    std::string error_code() const;
    /// The error says the credentials expired (ExpiredToken and its kin).
    bool credentials_expired() const;
};

/// Requests with one set of timeouts (the settings'), over the process-wide handle pool.
class http_client {
public:
    explicit http_client(const settings& s);
    http_client(const http_client&) = delete;
    http_client& operator=(const http_client&) = delete;

    /// One exchange. Throws interrupted_error when this thread's stop flag (ferry::stop_scope)
    /// asks, looking at it every 20 ms while the exchange waits.
    http_response perform(const http_request& request, const http_auth& auth);

private:
    settings settings_;
};

/// Sleeps the backoff before retry number `attempt` (0-based): full jitter over
/// [0, min(20 s, first_delay * 2^attempt)]. Throws interrupted_error ("interrupted: <what>") when
/// this thread's stop flag asks meanwhile.
void backoff_sleep(std::size_t attempt, std::size_t first_delay_ms,
                   const std::string& what = "waiting to retry a request");

}  // namespace ferry::detail
