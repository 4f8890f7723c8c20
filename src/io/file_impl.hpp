// The state behind ferry::file: the opened source (from the registry), counters, and the
// request machinery: plan a route (io/planner), split the request into tasks and run them on
// the engine's workers with the route's mover (io/movers).
//
// Files: file_impl.cpp (open, close, the source's own operations), file_route.cpp (planning),
// file_requests.cpp (tasks), stream_ordered.cpp (requests in stream order).
#pragma once

#include <sys/types.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "backend/source.hpp"
#include "ferry/memory.hpp"
#include "ferry/settings.hpp"
#include "ferry/types.hpp"
#include "io/engine.hpp"
#include "io/movers/mover.hpp"
#include "io/planner.hpp"
#include "stats_counter.hpp"

namespace ferry::detail {

/// A read either wants every byte or stops at the end of the source.
enum class exactness { exact, up_to_end };

/// Whether a plan weighs the stream lanes; `never` skips their rule (and its page-cache
/// residency probe) for a caller that asks only whether cuFile would serve the file.
enum class lane_use { allowed, never };

/// One request as the engine sees it.
struct request {
    direction dir = direction::read;
    char* mem = nullptr;  ///< destination of a read, source of a write
    std::size_t n = 0;
    std::uint64_t offset = 0;
    memory_kind kind = memory_kind::host;
    int device = 0;
    source* src = nullptr;  ///< the route's source: the file's, or one of its alternatives
    mover how = mover::host;
    io_path counted_as = io_path::host;
    int route = -1;  ///< the statistics' slot of (source, mover): route_slot()
    /// The file side of a stream-ordered request (io/stream_ordered.cpp): not counted on its own
    /// (the request counts once, as a whole), and refused once the file is closed.
    bool file_side = false;
    bool is_write() const noexcept { return dir == direction::write; }
};

class file_impl;

/// Rows of a file's bytes landing packed in memory: row r is `width` bytes at file offset
/// `offset + r * pitch`, landing at `memory + r * width` (one row: a plain range). With `span`
/// the enclosing span is read in one piece and the rows are picked out of it on the way to the
/// GPU (fewer reads, the skipped bytes read too); else each row is its own read.
struct gather {
    std::shared_ptr<file_impl> file;
    std::uint64_t offset = 0;
    std::uint64_t rows = 1;
    std::uint64_t pitch = 0;
    std::uint64_t width = 0;
    void* memory = nullptr;
    bool span = false;
    /// A plain range (one row) read as a request of its own, planned like any read, rather
    /// than on the lanes with the rest of the gather: for a file the planner sends to staging
    /// (mostly out of the page cache, or remote), where each worker's own stream keeps the
    /// source busier, or to its registration (one DMA from its pinned pages).
    bool own_request = false;
};

class file_impl : public std::enable_shared_from_this<file_impl> {
public:
    /// Opens `location` through the source registry.
    file_impl(const std::string& location, open_mode mode, const settings& s);
    ~file_impl();

    const std::string& path() const noexcept { return location_; }
    /// The location as messages show it (a URL's credentials redacted).
    const std::string& shown() const noexcept { return shown_; }
    const settings& config() const noexcept { return config_; }
    std::uint64_t size() const;
    std::string version() const;

    /// Validates and plans a request; for reads with exactness::exact, throws end_of_file_error
    /// when the source is too short, else shortens n to what it has.
    request prepare(direction dir, const void* mem, std::size_t n, std::uint64_t offset, exactness e);
    /// Called once when a request ended: the bytes moved, or the first error.
    using completion = std::function<void(std::size_t, std::exception_ptr)>;
    /// Runs a prepared request on the engine's workers (or on `workers`); the future holds n
    /// or the first error, and `then` (if any) hears the same just before the future does.
    /// Throws usage_error for a file side when the file was closed.
    std::future<std::size_t> start(const request& r, thread_pool* workers = nullptr, completion then = {});
    /// Runs a prepared request in stream order on `s` (io/stream_ordered.cpp); `then` as for
    /// start().
    std::future<std::size_t> start_on_stream(const request& r, stream_t s, completion then = {});
    /// A read routed through the stream lanes (mover::lanes) without a stream of the caller's:
    /// laid out on the lanes after the calling thread's per-thread stream, completed by the
    /// lanes (nothing is queued on a stream of the caller's).
    std::future<std::size_t> start_on_lanes(const request& r, completion then);
    /// Starts the file side of a stream-ordered request: bytes [pos, pos + len) of `r` between
    /// the source and host memory at `host`, on the file workers, which make no CUDA call and
    /// wait on no CUDA work (so a CUDA host function may wait for the future).
    std::future<std::size_t> start_file_side(const request& r, std::size_t pos, std::size_t len, char* host);

    /// Reads exactly [offset, offset + n) into host memory on the calling thread, through the
    /// file's own source (buffered), counted as one request of the host route: the small reads
    /// of a gather's rows (whose bounds the gather checked). Throws end_of_file_error when the
    /// file is shorter.
    void read_now(char* dst, std::size_t n, std::uint64_t offset);
    /// The engine's workers.
    thread_pool& workers() noexcept { return engine_->pool(); }

    /// The route of a request of `n` bytes to or from memory of `kind`, with its reasons.
    /// Counts fallbacks; throws when the settings allow no usable route.
    /// `lanes` false leaves the stream lanes out of the choice (and their residency probe).
    plan_result plan(memory_kind kind, std::size_t n, direction dir, lane_use lanes = lane_use::allowed);
    io_stats stats() const { return counters_.snapshot(); }
    void sync() const;
    void truncate(std::uint64_t size) const;
    void close();

private:
    friend struct request_state;
    friend struct stream_request;
    friend std::future<std::size_t> start_gather(const std::vector<gather>&, int, completion);
    /// start_on_stream (ordered: completed on `s`) and start_on_lanes (not).
    std::future<std::size_t> start_streamed(const request& r, stream_t s, completion then, bool ordered);
    /// A file side that reads through the source itself (a gather's): counted in flight, so
    /// that close() waits for it; refused with usage_error once the file is closed.
    void enter_file_side();
    void leave_file_side() noexcept;
    void check_open() const;
    void run_task(const request& r, std::size_t pos, std::size_t len);
    void move(source& src, mover how, const piece& p, const io_context& where);
    void count(direction dir, io_path p, int route, std::uint64_t bytes, std::uint64_t ns, std::uint64_t requests);
    void fallback(const std::string& reason);
    void log_plan_once(const plan_result& p, direction dir);
    /// The source a route names: the file's own, or one of its alternatives.
    source* route_source(const route& r);
    /// Why O_DIRECT cannot serve this file, or nullopt when it can.
    /// Why alternative `a` cannot serve this file's requests now (nullopt: it can): its probe,
    /// an alignment the staging buffers cannot meet, O_DIRECT refused at read time.
    std::optional<unavailable_reason> alternative_unusable(const local_alternative& a);
    void disable_direct(const std::string& why);

    std::string location_;
    std::string shown_;  ///< location_ as messages and logs show it (a URL's credentials redacted)
    open_mode mode_;
    settings config_;
    std::shared_ptr<engine> engine_;
    pid_t pid_;  ///< the process that opened the file (a forked child may not use it)
    std::unique_ptr<source> source_;
    int host_route_ = -1;  ///< the statistics' slot of (this source, host): read_now counts there

    /// The registration reads of this file into device memory go through (see
    /// ferry::registered_file), kept from the first plan that found it until close.
    std::shared_ptr<source> registration(std::string& changed);
    std::mutex registered_mutex_;
    std::shared_ptr<source> registered_;

    std::mutex direct_mutex_;
    std::string direct_disabled_why_;
    std::atomic<bool> direct_disabled_{false};

    stats_counter counters_;
    std::mutex log_mutex_;
    std::set<std::string> logged_;

    mutable std::mutex inflight_mutex_;
    std::condition_variable inflight_cv_;
    std::size_t inflight_ = 0;
    std::atomic<bool> closed_{false};
};

/// Reads every extent of `extents` into GPU memory of `device` through the stream lanes of the
/// first extent's file, after the calling thread's per-thread stream (io/stream_ordered.cpp):
/// the gather is cut into lane-buffer chunks whose reads the file workers share, and the lanes
/// complete it, so gathers started one after another follow each other on the lanes without a
/// pause. Each file counts its bytes as one request of the lanes route. `then` as for
/// file_impl::start.
std::future<std::size_t> start_gather(const std::vector<gather>& extents, int device,
                                      file_impl::completion then = {});

/// The route a large read of `path` into GPU memory takes (a file or URL, or for a directory a
/// temporary probe file inside it), with the reasons; without a GPU, a read into host memory.
/// Shared by the engine and `ferry doctor`.
plan_result plan_read_route(const std::string& path, const settings& s);

}  // namespace ferry::detail
