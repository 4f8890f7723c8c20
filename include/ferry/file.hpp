// ferry::file: parallel reads and writes between a file and any memory (pageable host, pinned
// host, device, managed), through GPUDirect Storage, pipelined pinned staging buffers, or plain
// parallel pread/pwrite. The kind of memory is detected, never passed in.
//
// The way a byte takes: file.cpp (this API) -> io/file_impl.cpp (the location opened through
// backend/registry.cpp as a source) -> io/file_requests.cpp (io/planner.cpp chooses the route,
// the request is split into tasks on the engine's thread pool) -> io/movers/ (host, staged or
// device DMA) -> backend/<source>/ (posix pread, direct O_DIRECT, cufile cuFileRead) ->
// (staged) cudaMemcpyAsync from a pinned buffer to the GPU. See docs/design/engine.md.
#pragma once

#include "ferry/export.hpp"

#include <cstddef>
#include <cstdint>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "ferry/memory.hpp"
#include "ferry/reason.hpp"
#include "ferry/settings.hpp"
#include "ferry/stats.hpp"
#include "ferry/types.hpp"

namespace ferry {

/// How a read of this file into GPU memory will be served, and why (see `ferry doctor`).
struct FERRY_EXPORT path_plan {
    io_path path;                      ///< for a large read into device memory
    std::vector<std::string> reasons;  ///< each decision that led there, in plain words
    /// The same decisions as stable codes, codes[i] for reasons[i]: match on these, not on the
    /// words (include/ferry/reason.hpp, docs/doctor.md).
    std::vector<plan_reason> codes;
};

namespace detail {
class file_impl;
}

/// `location` as messages show it: a URL loses its user information, and the values of query
/// parameters that carry credentials (presigned signatures, tokens, keys) read REDACTED; a
/// local path comes back as it is. Thread safe.
FERRY_EXPORT std::string redact_location(const std::string& location);

/// An open file. Move-only.
///
/// Thread safety: every member function may be called from many threads at once; requests run
/// in parallel. Ownership: the memory passed to a request must stay valid until it completes
/// (for futures and stream-ordered calls: until the future is ready / the stream passes it).
/// Alignment: none required; O_DIRECT and cuFile alignment is handled inside.
class file;

/// One piece of a batched read (read_batch): `length` bytes at `offset` of `source` into
/// `memory`.
struct read_piece {
    const file* source = nullptr;
    std::uint64_t offset = 0;
    std::size_t length = 0;
    void* memory = nullptr;
};

/// Starts every piece as one read and returns at once. Into GPU memory the pieces, of any
/// number of files, go through the stream lanes together: each lane buffer is filled from as
/// many pieces as fit, and adjacent destination bytes move in one copy, so many small pieces
/// cost about what one large read costs (files that GPUDirect Storage serves take one request
/// per piece). Into host memory each piece lands in place on the workers. The memory of all
/// pieces is host memory, or GPU memory of one device (usage_error otherwise); a piece past the
/// end of its file fails with end_of_file_error before any byte moves. The future holds the
/// bytes read, or the first error once nothing of the batch runs any more. The files must stay
/// open until it is ready (close() waits for it).
FERRY_EXPORT std::future<std::size_t> read_batch(const std::vector<read_piece>& pieces);

class FERRY_EXPORT file {
public:
    /// Opens `path`. Throws system_error (with errno and the path) when it cannot.
    file(const std::string& path, open_mode mode = open_mode::read,
         const settings& s = settings::global());
    file(file&&) noexcept;
    file& operator=(file&&) noexcept;
    file(const file&) = delete;
    file& operator=(const file&) = delete;
    /// Closes, ignoring errors (call close() to see them). Waits for requests in flight.
    ~file();

    const std::string& path() const noexcept;
    /// Current size in bytes (fstat).
    std::uint64_t size() const;
    /// What identifies these bytes beyond their size: a remote object's ETag (or Last-Modified),
    /// as "ETag \"...\"", fixed at open; a local file's device, inode, size and modification
    /// time as of the call (fstat), as "inode D:I size N mtime S.NS". Two calls that give
    /// different versions saw different objects or contents.
    std::string version() const;
    const settings& config() const noexcept;

    /// Reads exactly [offset, offset + n) into `dst`. Throws end_of_file_error if the file ends
    /// first, system_error / cuda_error / cufile_error on failure. Returns n.
    std::size_t read(void* dst, std::size_t n, std::uint64_t offset) const;
    /// Reads up to n bytes, stopping at end of file; returns the count read (partial read).
    std::size_t read_some(void* dst, std::size_t n, std::uint64_t offset) const;
    /// Writes exactly n bytes from `src` at `offset`. Returns n.
    std::size_t write(const void* src, std::size_t n, std::uint64_t offset) const;

    /// The same, returning at once; the future holds n or the exception.
    std::future<std::size_t> read_async(void* dst, std::size_t n, std::uint64_t offset) const;
    std::future<std::size_t> write_async(const void* src, std::size_t n, std::uint64_t offset) const;

    /// Stream-ordered: the read starts after the work queued on `s` before this call and work
    /// queued on `s` after it starts only once the read completed. Returns at once. The future
    /// reports completion or the error; on error the bytes of `dst` are unspecified, and the
    /// stream still proceeds. GPU memory goes through ferry's pinned stream lanes (counted as
    /// `staged`; refused with usage_error under gds_mode::on, which allows cuFile only). A
    /// request that its stream reaches after close() fails with usage_error.
    std::future<std::size_t> read_async(void* dst, std::size_t n, std::uint64_t offset,
                                        stream_t s) const;
    std::future<std::size_t> write_async(const void* src, std::size_t n, std::uint64_t offset,
                                         stream_t s) const;

    /// fsync (data and metadata).
    void sync() const;
    /// Sets the size (ftruncate).
    void truncate(std::uint64_t size) const;

    /// The path a large read of this file into GPU memory takes, and why.
    path_plan plan() const;
    /// What this file moved, by path.
    io_stats stats() const;

    /// Closes now and reports errors. Further calls throw usage_error.
    void close();

private:
    friend std::future<std::size_t> read_batch(const std::vector<read_piece>& pieces);
    std::shared_ptr<detail::file_impl> impl_;
};

}  // namespace ferry
