// Multipart upload (see s3_object_writer.hpp): CreateMultipartUpload, UploadPart,
// CompleteMultipartUpload, AbortMultipartUpload.
#include "backend/s3/s3_object_writer.hpp"

#include <algorithm>
#include <cstring>

#include "backend/http/http_source.hpp"
#include "backend/http/xml_field.hpp"
#include "backend/location.hpp"
#include "ferry/error.hpp"

namespace ferry::detail {
namespace {

// S3 allows parts of 5 MiB to 5 GiB and at most 10,000 of them; 8 MiB parts (or the range size,
// if larger) keep memory small per writer thread and allow objects up to 80 GB.
constexpr std::size_t min_part = 8u << 20;
constexpr std::size_t max_parts = 10000;

}  // namespace

s3_object_writer::s3_object_writer(s3_location where, const settings& s)
    : where_(std::move(where)),
      settings_(s.resolved()),
      client_(settings_),
      part_size_(std::max(min_part, settings_.remote_range_size)) {
    // Query strings are written in SigV4's canonical form (sorted, "name=" for empty values):
    // libcurl signs the query as it is given.
    http_response r = request("POST", where_.object_url + "?uploads=", nullptr, 0, "cannot start the upload");
    upload_id_ = xml_field(r.body, "UploadId");
    if (upload_id_.empty()) {
        r.refused = "no UploadId in the answer";
        fail(r, "cannot start the upload");
    }
}

s3_object_writer::~s3_object_writer() { abort(); }

http_auth s3_object_writer::auth() const { return where_.signer ? where_.signer->current() : where_.auth; }

source_traits s3_object_writer::traits() const noexcept {
    source_traits t;
    t.writable = true;
    t.remote = true;
    t.request_size = part_size_;
    t.concurrency = settings_.remote_concurrency;
    return t;
}

std::uint64_t s3_object_writer::size() {
    std::lock_guard lock(mutex_);
    return size_;
}

void s3_object_writer::read(char*, std::size_t, std::uint64_t, const io_context&) {
    throw usage_error("an S3 object open for writing cannot be read before it is closed: " + where_.location);
}

void s3_object_writer::fail(const http_response& r, const std::string& what) {
    std::string detail = describe_response(r);
    throw remote_error(r.status, where_.location, what + (detail.empty() ? "" : " (" + detail + ")"),
                       auth().label);
}

http_response s3_object_writer::request(const std::string& method, const std::string& url, const char* body,
                                        std::size_t n, const std::string& what) {
    bool renewed = false;
    for (std::size_t tries = 0;; ++tries) {
        http_request rq;
        rq.method = method;
        rq.url = url;
        rq.body = body;
        rq.body_size = n;
        rq.follow_redirects = false;
        const http_auth signing = auth();
        http_response r = client_.perform(rq, signing);
        // A long upload may outlive temporary credentials the server already counts as expired.
        if (r.credentials_expired() && where_.signer && !renewed) {
            renewed = true;
            if (where_.signer->renew(signing)) continue;
        }
        // CompleteMultipartUpload may answer 200 with an <Error> body.
        bool error_body = r.status == 200 && r.body.find("<Error>") != std::string::npos;
        if (r.curl_code == 0 && r.status >= 200 && r.status < 300 && !error_body) return r;
        bool retryable = r.transport_retryable() || r.status_retryable() ||
                         (error_body && xml_field(r.body, "Code") == "InternalError");
        if (!retryable || tries >= settings_.remote_retries) fail(r, what);
        backoff_sleep(tries, settings_.remote_retry_delay_ms);
    }
}

void s3_object_writer::upload(std::size_t index, const char* data, std::size_t n) {
    if (index + 1 > max_parts)
        throw usage_error("object too large for a multipart upload of " + std::to_string(part_size_) +
                          "-byte parts (10,000 parts at most; raise FERRY_REMOTE_RANGE_SIZE): " + where_.location);
    std::string url = where_.object_url + "?partNumber=" + std::to_string(index + 1) +
                      "&uploadId=" + uri_encode(upload_id_, false);
    http_response r = request("PUT", url, data, n, "cannot upload part " + std::to_string(index + 1));
    std::string etag = r.header("etag");
    if (etag.empty()) {
        r.refused = "no ETag for part " + std::to_string(index + 1);
        fail(r, "cannot upload part");
    }
    std::lock_guard lock(mutex_);
    etags_[index] = etag;
}

void s3_object_writer::write(const char* src, std::size_t n, std::uint64_t offset, const io_context&) {
    while (n > 0) {
        std::size_t index = static_cast<std::size_t>(offset / part_size_);
        std::size_t within = static_cast<std::size_t>(offset % part_size_);
        std::size_t take = std::min(n, part_size_ - within);
        char* dst;
        {
            std::lock_guard lock(mutex_);
            if (finished_) throw usage_error("write after close: " + where_.location);
            if (etags_.count(index)) throw usage_error("a part was written twice: " + where_.location);
            part& p = pending_[index];
            if (!p.data) p.data.reset(new char[part_size_]);
            dst = p.data.get();
            if (!truncated_) size_ = std::max<std::uint64_t>(size_, offset + take);
        }
        std::memcpy(dst + within, src, take);  // disjoint bytes of a stable buffer: no lock needed
        part full;
        {
            std::lock_guard lock(mutex_);
            part& p = pending_[index];
            p.filled += take;
            if (p.filled == part_size_) {
                full = std::move(p);
                pending_.erase(index);
            }
        }
        if (full.data) upload(index, full.data.get(), part_size_);
        src += take;
        offset += take;
        n -= take;
    }
}

void s3_object_writer::truncate(std::uint64_t size) {
    std::lock_guard lock(mutex_);
    size_ = size;
    truncated_ = true;
}

void s3_object_writer::sync() {
    std::map<std::size_t, part> rest;
    std::uint64_t size;
    {
        std::lock_guard lock(mutex_);
        if (finished_) return;
        rest = std::move(pending_);
        size = size_;
    }
    try {
        std::size_t parts = static_cast<std::size_t>((size + part_size_ - 1) / part_size_);
        for (auto& [index, p] : rest) {
            std::uint64_t begin = static_cast<std::uint64_t>(index) * part_size_;
            std::size_t want = static_cast<std::size_t>(std::min<std::uint64_t>(part_size_, size > begin ? size - begin : 0));
            if (want == 0) continue;  // bytes past a truncated end
            if (p.filled < want)
                throw usage_error("bytes of part " + std::to_string(index + 1) + " were never written (" +
                                  std::to_string(p.filled) + " of " + std::to_string(want) + "): " + where_.location);
            upload(index, p.data.get(), want);
        }
        std::string xml = "<CompleteMultipartUpload>";
        {
            std::lock_guard lock(mutex_);
            for (std::size_t i = 0; i < parts; ++i)
                if (!etags_.count(i))
                    throw usage_error("part " + std::to_string(i + 1) + " was never written: " + where_.location);
            for (std::size_t i = 0; i < parts; ++i)
                xml += "<Part><PartNumber>" + std::to_string(i + 1) + "</PartNumber><ETag>" + etags_[i] +
                       "</ETag></Part>";
        }
        xml += "</CompleteMultipartUpload>";
        if (parts == 0) {
            // An empty object: a multipart upload needs at least one part, a plain PUT does not.
            abort();
            request("PUT", where_.object_url, "", 0, "cannot write the empty object");
        } else {
            request("POST", where_.object_url + "?uploadId=" + uri_encode(upload_id_, false), xml.data(), xml.size(),
                    "cannot complete the upload");
        }
        std::lock_guard lock(mutex_);
        finished_ = true;
    } catch (...) {
        abort();
        throw;
    }
}

void s3_object_writer::abort() noexcept {
    {
        std::lock_guard lock(mutex_);
        if (finished_) return;
        finished_ = true;
        pending_.clear();
    }
    if (upload_id_.empty()) return;
    try {
        http_request rq;
        rq.method = "DELETE";
        rq.url = where_.object_url + "?uploadId=" + uri_encode(upload_id_, false);
        rq.follow_redirects = false;
        client_.perform(rq, auth());
    } catch (...) {
    }
}

}  // namespace ferry::detail
