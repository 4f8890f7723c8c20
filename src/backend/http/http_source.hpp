// A remote object read over HTTP(S) with ranged GETs: http://, https:// and presigned URLs, and
// (with SigV4 signing and an S3 endpoint, see backend/s3/) s3:// objects.
//
// At open the source fixes the object's identity: its size, ETag and Last-Modified from a HEAD
// (or from a one-byte ranged GET where HEAD is refused, as presigned GET URLs do). Every ranged
// GET then carries If-Match (or If-Unmodified-Since) and its response is checked against that
// identity before a byte is stored, so an object replaced during a load is an error, never a
// mix of old and new bytes.
//
// A read of [offset, offset + n) is one ranged GET whose body curl hands straight to the
// caller's buffer. A 429, a 5xx, a timeout or a reset connection is retried with exponential
// backoff and full jitter, and a broken transfer resumes at the first byte it did not get.
//
// Thread safety: read() may be called from many threads at once (each takes a pooled curl
// handle with its own kept-alive connection).
#pragma once

#include <atomic>
#include <memory>
#include <string>

#include "backend/http/http_client.hpp"
#include "backend/source.hpp"
#include "ferry/file.hpp"
#include "ferry/settings.hpp"

namespace ferry::detail {

/// What a remote object is, fixed at open.
struct remote_identity {
    std::uint64_t size = 0;
    std::string etag;           ///< as the server sent it (quotes included), or ""
    std::string last_modified;  ///< HTTP date, or ""
};

/// What to open: the URL to request, the URL messages show, and how requests are signed.
struct http_target {
    std::string url;       ///< what curl requests (may hold a presigned query)
    std::string location;  ///< redacted form for messages ("s3://bucket/key" for S3)
    http_auth auth;
    bool follow_redirects = true;
    std::string kind = "http";
};

class http_source : public source {
public:
    /// Opens the object: one HEAD (or ranged GET) to learn its identity.
    /// Throws remote_error (with the HTTP status) when the object cannot be reached.
    http_source(http_target target, const settings& s);

    std::string_view kind() const noexcept override { return target_.kind; }
    const std::string& location() const noexcept override { return target_.location; }
    source_traits traits() const noexcept override;
    std::uint64_t size() override { return identity_.size; }
    void read(char* dst, std::size_t n, std::uint64_t offset, const io_context& where) override;

    const remote_identity& identity() const noexcept { return identity_; }
    /// Retries made so far (all reads), for stats and tests.
    std::uint64_t retries() const noexcept;

protected:
    http_client& client() { return client_; }
    const http_target& target() const noexcept { return target_; }
    const settings& config() const noexcept { return settings_; }
    /// The typed error for a failed response.
    [[noreturn]] void fail(const http_response& r, const std::string& what, const io_context& where) const;

private:
    remote_identity probe();

    http_target target_;
    settings settings_;
    http_client client_;
    remote_identity identity_;
    std::unique_ptr<std::atomic<std::uint64_t>> retries_;
};

/// The registry's opener for http:// and https:// locations (read only: open_mode::read).
std::unique_ptr<source> open_http_source(const std::string& location, open_mode mode, const settings& s);

/// A message for a failed response: the S3 error code and message when the body is S3's XML.
std::string describe_response(const http_response& r);

}  // namespace ferry::detail
