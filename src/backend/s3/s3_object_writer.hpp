// Writing an S3 object by multipart upload: the object appears whole when sync() completes the
// upload, or not at all (a failed writer, or one closed or dropped without sync(), aborts the
// upload, so no part lingers and no partial object is ever visible). sync() is the commit: a
// ferry::file closed by its destructor after an exception must not publish what it had so far.
//
// Writes may come from many threads at any offsets (as the engine's tasks do): bytes are
// gathered into part-sized buffers, part k holding [k * part_size, (k + 1) * part_size), and a
// part is uploaded by the thread that fills it. sync() uploads the last, short part and
// completes; a byte range never written is an error there. Each byte is written once.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backend/http/http_client.hpp"
#include "backend/s3/s3_location.hpp"
#include "backend/source.hpp"

namespace ferry::detail {

class s3_object_writer : public source {
public:
    /// Starts the multipart upload (so a missing bucket or a refused key fails here).
    s3_object_writer(s3_location where, const settings& s);
    ~s3_object_writer() override;

    std::string_view kind() const noexcept override { return "s3"; }
    const std::string& location() const noexcept override { return where_.location; }
    source_traits traits() const noexcept override;
    std::uint64_t size() override;
    void read(char* dst, std::size_t n, std::uint64_t offset, const io_context& where) override;
    void write(const char* src, std::size_t n, std::uint64_t offset, const io_context& where) override;
    /// Uploads what is left and completes the upload: the object appears now, whole. Later
    /// writes are errors; later sync() calls do nothing.
    void sync() override;
    void truncate(std::uint64_t size) override;
    /// Aborts the upload unless sync() completed it: nothing appears.
    void close() override { abort(); }
    /// Aborts the upload: nothing appears. Does nothing after sync().
    void abort() noexcept;

    std::size_t part_size() const noexcept { return part_size_; }

private:
    struct part {
        std::unique_ptr<char[]> data;
        std::size_t filled = 0;
    };
    http_auth auth() const;
    http_response request(const std::string& method, const std::string& url, const char* body, std::size_t n,
                          const std::string& what);
    void upload(std::size_t index, const char* data, std::size_t n);
    [[noreturn]] void fail(const http_response& r, const std::string& what);

    s3_location where_;
    settings settings_;
    http_client client_;
    std::size_t part_size_;
    std::string upload_id_;
    std::mutex mutex_;
    std::map<std::size_t, part> pending_;
    std::map<std::size_t, std::string> etags_;  ///< part index -> ETag
    std::uint64_t size_ = 0;
    bool truncated_ = false;
    bool finished_ = false;
};

}  // namespace ferry::detail
