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
// caller's buffer (read) or, piece by piece as it arrives, to a byte_sink (read_stream: the
// staged mover passes each filled pinned buffer on to the GPU while the rest of the range is
// still on the wire). A 429, a 5xx, a timeout or a reset connection is retried with exponential
// backoff and full jitter, and a broken transfer resumes at the first byte it did not get.
// Signed requests take their credentials from the target's signer at each attempt, so that
// temporary credentials renewed during a long read are used from then on; an answer that says
// the credentials expired renews them and retries.
//
// A server without Range support (python3 -m http.server, many simple gateways: no
// "Accept-Ranges: bytes" at HEAD and a 200 to a one-byte ranged GET) is read with one plain GET per
// read instead, streamed, the bytes before the range dropped and the transfer ended after it;
// its length and identity are checked as a range's are. traits().ranged then says so, and the
// engine makes such a read one task rather than parallel ranged GETs.
//
// Thread safety: read() may be called from many threads at once (each takes a pooled curl
// handle with its own kept-alive connection).
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "backend/http/http_client.hpp"
#include "backend/http/object_checksum.hpp"
#include "backend/location.hpp"
#include "backend/source.hpp"
#include "ferry/file.hpp"
#include "ferry/settings.hpp"

namespace ferry::detail {

/// What a remote object is, fixed at open.
struct remote_identity {
    std::uint64_t size = 0;
    std::string etag;           ///< as the server sent it (quotes included), or ""
    std::string last_modified;  ///< HTTP date, or ""
    bool ranges = true;         ///< the server answers a Range request with 206
    /// The object's own full-object checksum (S3's x-amz-checksum-*), checked once the reads
    /// cover the object; unset with checksum_note saying why when the object has an unusable one.
    std::optional<object_checksum> checksum;
    std::string checksum_note;
};

/// What to open: the URL to request, the URL messages show, and how requests are signed.
struct http_target {
    std::string url;       ///< what curl requests (may hold a presigned query)
    std::string location;  ///< redacted form for messages ("s3://bucket/key" for S3)
    http_auth auth;        ///< used when there is no signer
    std::shared_ptr<http_signer> signer;
    bool follow_redirects = true;
    std::string kind = "http";
    bool object_checksums = false;  ///< ask for the object's checksum at open (S3)
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
    void read_stream(std::size_t n, std::uint64_t offset, byte_sink& sink, const io_context& where) override;
    std::string version() const override;

    const remote_identity& identity() const noexcept { return identity_; }
    /// Retries made so far (all reads), for stats and tests.
    std::uint64_t retries() const noexcept;

protected:
    http_client& client() { return client_; }
    const http_target& target() const noexcept { return target_; }
    const settings& config() const noexcept { return settings_; }
    /// The typed error for a failed response.
    [[noreturn]] void fail(const http_response& r, const std::string& what, const io_context& where) const;
    /// The credentials for the next request (the signer's, else the target's).
    http_auth auth() const;

private:
    remote_identity probe();
    /// One ranged read with retries; `aim` points a request's body at the bytes still due.
    void ranged(std::size_t n, std::uint64_t offset, const io_context& where,
                const std::function<void(http_request&, std::size_t done)>& aim);

    http_target target_;
    settings settings_;
    http_client client_;
    remote_identity identity_;
    std::unique_ptr<std::atomic<std::uint64_t>> retries_;
    /// Set when a server that claimed Range support answered a range with the whole object.
    std::unique_ptr<std::atomic<bool>> ranges_ignored_;
    std::unique_ptr<checksum_tally> tally_;  ///< set when the object has a checksum to check
};

/// The registry's opener for http:// and https:// locations (read only: open_mode::read).
std::unique_ptr<source> open_http_source(const location& where, open_mode mode, const settings& s);

/// A message for a failed response: the S3 error code and message when the body is S3's XML.
std::string describe_response(const http_response& r);

}  // namespace ferry::detail
