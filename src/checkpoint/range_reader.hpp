// The one seam between checkpoint loads and the I/O engine: "read these byte ranges of these
// files into these destinations, as one batch". Every read is a gather of the I/O scheduler
// (io/scheduler.hpp): those that land in place (whole tensors, slices, row segments, spans
// picked apart on the way) one gather for many tensors, each piece of a converted tensor one of
// its own into a temporary, so that an error names the piece it cut short.
#pragma once

#include <atomic>
#include <cstdint>
#include <exception>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ferry/checkpoint.hpp"
#include "ferry/file.hpp"

namespace ferry::detail {
class file_impl;
}

namespace ferry::checkpoints {

/// Rows of a file landing packed in memory (see detail::gather): the reads of tensors that land
/// in place, whole or sliced. All of one batch go to host memory or to one GPU.
struct gather_request {
    std::size_t file = 0;
    std::uint64_t offset = 0;
    std::uint64_t rows = 1;
    std::uint64_t pitch = 0;
    std::uint64_t width = 0;
    void* dst = nullptr;
    bool span = false;  ///< read the enclosing span and pick the rows out of it
    /// File bytes this request reads.
    std::uint64_t bytes_read() const noexcept { return span ? (rows - 1) * pitch + width : rows * width; }
};

/// One batch in flight. wait() returns, per request in the order submitted (a whole gather is
/// one request), nullptr or its error, after every request finished (the
/// destinations may be released then).
class range_batch {
public:
    range_batch() = default;
    range_batch(range_batch&&) = default;
    range_batch& operator=(range_batch&&) = default;
    ~range_batch();
    /// Waits for all; calls on_done(request index) for each request that succeeded.
    std::vector<std::exception_ptr> wait(const std::function<void(std::size_t)>& on_done = {});

private:
    friend class range_reader;
    std::vector<std::future<std::size_t>> pending_;  ///< one per request
};

/// The files of one load, opened once. Thread-compatible.
class range_reader {
public:
    /// Opens the shards (remote ones side by side: each open is a round trip). Throws
    /// checkpoint_changed_error when a shard is gone, or its size or version (a local file's
    /// identity, a remote object's ETag) is no longer what open_checkpoint saw.
    /// Into GPU memory (`where` on a GPU), each shard's plain ranges go where the planner sends
    /// a large read of it into GPU memory: asked once per shard, at its first request (the
    /// residency probe), so that a shard mostly out of the page cache, or remote, is read by the
    /// workers' own staged streams while a cached one rides the lanes with the rest of its batch.
    explicit range_reader(const std::vector<checkpoint_shard>& shards, placement where = placement::host());
    /// Closes the files. Batches must have been waited for (they wait on destruction).
    ~range_reader();
    /// Starts every request at once, each on its own (its wait() reports one error per
    /// request, in order); returns without waiting. Host memory only.
    range_batch submit_each(const std::vector<gather_request>& requests);
    /// Starts a gather of many rows of many files as one request of the I/O scheduler
    /// (io/scheduler.hpp: into GPU memory, through the stream lanes); its wait() reports one
    /// request.
    range_batch submit(const std::vector<gather_request>& gathers);
    /// After the reads: throws checkpoint_changed_error when a shard's version is no longer
    /// what open_checkpoint saw (a local file rewritten in place while it was read).
    void check_unchanged(const std::vector<checkpoint_shard>& shards) const;
    /// When `read_error` is a remote shard's 404 or 412 (a newer save removed or replaced it
    /// after it was opened): throws checkpoint_changed_error naming the shard. Otherwise returns.
    static void throw_if_removed(std::exception_ptr read_error, const std::vector<checkpoint_shard>& shards);
    std::uint64_t bytes_requested() const noexcept { return bytes_.load(); }
    /// File reads issued (a request of row segments counts its rows).
    std::size_t requests() const noexcept { return count_.load(); }

private:
    /// Starts one gather as its own request of `b`.
    void start(range_batch& b, const std::vector<gather_request>& gathers);

    /// Whether shard i's plain ranges are requests of their own (see the constructor).
    bool own_requests(std::size_t i);

    std::vector<std::shared_ptr<detail::file_impl>> files_;
    bool to_gpu_ = false;
    std::vector<std::optional<bool>> staged_;  ///< per shard, once asked
    std::atomic<std::uint64_t> bytes_{0};
    std::atomic<std::size_t> count_{0};
};

}  // namespace ferry::checkpoints
