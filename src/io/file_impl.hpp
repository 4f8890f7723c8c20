// The state behind ferry::file: descriptors, the lazily made O_DIRECT descriptor and cuFile
// handle, counters, and the request machinery (split into tasks, run on the engine's workers).
#pragma once

#include <sys/types.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>

#include "backend/gds/cufile_handle.hpp"
#include "ferry/file.hpp"
#include "io/engine.hpp"
#include "os/posix_io.hpp"
#include "stats_counter.hpp"

namespace ferry::detail {

/// One request as the engine sees it.
struct request {
    bool is_write = false;
    char* mem = nullptr;  ///< destination of a read, source of a write
    std::size_t n = 0;
    std::uint64_t offset = 0;
    memory_kind kind = memory_kind::host;
    int device = 0;
    io_path path = io_path::host;
    /// The file side of a stream-ordered request (io/stream_ordered.cpp): not counted on its own
    /// (the request counts once, as a whole), and refused once the file is closed.
    bool file_side = false;
};

class file_impl : public std::enable_shared_from_this<file_impl> {
public:
    file_impl(const std::string& path, open_mode mode, const settings& s);
    ~file_impl();

    const std::string& path() const noexcept { return path_; }
    const settings& config() const noexcept { return config_; }
    std::uint64_t size() const;

    /// Validates and plans a request; for reads with `exact`, throws end_of_file_error when
    /// the file is too short, and without it shortens n to what the file has.
    request prepare(bool is_write, const void* mem, std::size_t n, std::uint64_t offset, bool exact);
    /// Runs a prepared request on the engine's workers (or on `workers`); the future holds n
    /// or the first error. Throws usage_error for a file side when the file was closed.
    std::future<std::size_t> start(const request& r, thread_pool* workers = nullptr);
    /// Runs a prepared request in stream order on `s` (io/stream_ordered.cpp).
    std::future<std::size_t> start_on_stream(const request& r, stream_t s);
    /// Starts the file side of a stream-ordered request: bytes [pos, pos + len) of `r` between
    /// the file and host memory at `host`, on the file workers, which make no CUDA call and wait
    /// on no CUDA work (so a CUDA host function may wait for the future).
    std::future<std::size_t> start_file_side(const request& r, std::size_t pos, std::size_t len, char* host);

    path_plan plan(memory_kind kind, std::size_t n, bool is_write);
    io_stats stats() const { return counters_.snapshot(); }
    void sync() const;
    void truncate(std::uint64_t size) const;
    void close();

private:
    friend struct request_state;
    friend struct stream_request;
    void check_open() const;
    void run_task(const request& r, std::size_t pos, std::size_t len);
    void count(bool is_write, io_path p, std::uint64_t bytes, std::uint64_t ns, std::uint64_t requests);
    void fallback(const std::string& reason);
    void log_plan_once(const path_plan& p, bool is_write);
    /// The O_DIRECT descriptor, opened on first use; -1 with direct_reason_ when unusable.
    int direct_fd();
    /// The cuFile handle, registered on first use; null with gds_reason_ when unusable.
    const cufile_handle* gds_handle();
    void disable_direct(const std::string& why);

    std::string path_;
    open_mode mode_;
    settings config_;
    std::shared_ptr<engine> engine_;
    pid_t pid_;  ///< the process that opened the file (a forked child may not use it)
    int fd_ = -1;

    std::mutex direct_mutex_;
    bool direct_tried_ = false;
    int direct_fd_ = -1;
    direct_alignment align_{};
    std::string direct_reason_;
    std::atomic<bool> direct_disabled_{false};

    std::mutex gds_mutex_;
    bool gds_tried_ = false;
    std::optional<cufile_handle> gds_;
    std::string gds_reason_;

    stats_counter counters_;
    std::mutex log_mutex_;
    std::set<std::string> logged_;

    mutable std::mutex inflight_mutex_;
    std::condition_variable inflight_cv_;
    std::size_t inflight_ = 0;
    std::atomic<bool> closed_{false};
};

/// The path a large read of `path` into GPU memory takes (a file, or for a directory a
/// temporary probe file inside it), with the reasons. Shared by the engine and `ferry doctor`.
path_plan plan_read_path(const std::string& path, const settings& s);

}  // namespace ferry::detail
