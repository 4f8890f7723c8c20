// A source: where bytes come from and go to (a local file read buffered or with O_DIRECT, a
// file registered with cuFile, an HTTP or S3 object, an in-memory test object). Sources know
// nothing of GPUs except the one that moves bytes to device memory itself (cuFile): moving bytes
// between host memory and the GPU is the movers' job (src/io/), and works over any source.
//
// One source object serves every worker of a request at once: each member may be called from
// many threads concurrently. A source owns its state (descriptors, handles, connections) and
// releases it in close() (reporting errors) or in its destructor (ignoring them).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "ferry/error.hpp"
#include "ferry/reason.hpp"

namespace ferry::detail {

/// Why a source (or one of its alternatives) cannot be used: plain words, the code of what
/// refused (a cuFile status; 0 when there is none) and the stable cause.
struct unavailable_reason {
    std::string text;
    int code = 0;
    /// The text says that the udev database is missing (why cuFile cannot register files).
    bool udev_missing = false;
    reason_code cause = reason_code::none;
};

/// Where a streaming read hands its bytes: consume() is called with consecutive pieces of the
/// range, in order, each exactly once (a retried request resumes after the last byte it was
/// given). It may throw; the read then stops and rethrows.
class byte_sink {
public:
    virtual ~byte_sink() = default;
    virtual void consume(const char* data, std::size_t n) = 0;
};

/// What a source can do and what it needs, as facts for the planner.
struct source_traits {
    /// 0: reads and writes land at any address, offset and length. Otherwise each of the three
    /// must be a multiple of this (O_DIRECT); read_into() widens a range to it.
    std::size_t align = 0;
    bool writable = false;    ///< write(), sync() and truncate() work
    bool device_dma = false;  ///< read_device()/write_device() move bytes to/from GPU memory
    bool remote = false;      ///< each request pays a network round trip
    /// The request size the source serves best (0: the engine's task size).
    std::size_t request_size = 0;
    /// How many requests the source serves best at once (0: the engine's thread count).
    std::size_t concurrency = 0;
    /// read_stream() delivers the bytes of one request piece by piece as they arrive (a remote
    /// response body), so a mover can pass them on before the request ends.
    bool streams = false;
    /// A read of any byte range is one request. False for an HTTP server without Range support:
    /// each read streams the object from its first byte, so the engine makes it one task.
    bool ranged = true;
};

class source {
public:
    virtual ~source() = default;

    /// The registry's name of this kind of source: "posix", "direct", "cufile", "http", "s3"...
    virtual std::string_view kind() const noexcept = 0;
    /// What messages name: a path, or a URL with any credentials redacted.
    virtual const std::string& location() const noexcept = 0;
    virtual source_traits traits() const noexcept = 0;
    /// The size in bytes, now.
    virtual std::uint64_t size() = 0;

    /// Reads exactly n bytes at `offset` into host memory `dst` (which honours traits().align).
    /// Throws end_of_file_error when the source ends first, else the error of what failed.
    virtual void read(char* dst, std::size_t n, std::uint64_t offset, const io_context& where) = 0;

    /// Reads [offset, offset + n) into `buffer` (aligned to traits().align, `capacity` bytes,
    /// capacity >= n + 2 * align) and returns where the first wanted byte is inside it. Sources
    /// without alignment read into `buffer` itself.
    virtual const char* read_into(char* buffer, std::size_t capacity, std::size_t n, std::uint64_t offset,
                                  const io_context& where) {
        (void)capacity;
        read(buffer, n, offset, where);
        return buffer;
    }
    /// The most payload one read_into() of a `capacity`-byte buffer carries at any offset.
    virtual std::size_t payload(std::size_t capacity) const noexcept { return capacity; }

    /// Reads exactly [offset, offset + n), handing the bytes to `sink` in order as they arrive
    /// (traits().streams); the default reads through a temporary buffer. Throws what read()
    /// throws, or what the sink threw.
    virtual void read_stream(std::size_t n, std::uint64_t offset, byte_sink& sink, const io_context& where);
    /// What identifies the current bytes of the source beyond its size: a remote object's ETag
    /// (or Last-Modified), fixed at open; a local file's device, inode, size and modification
    /// time as of the call; "" when the source has none.
    virtual std::string version() const { return {}; }

    /// Writes exactly n bytes from host memory `src` at `offset`. Needs traits().writable.
    virtual void write(const char* src, std::size_t n, std::uint64_t offset, const io_context& where);
    /// Device DMA (traits().device_dma): n bytes at `offset` to or from `base + buffer_offset`
    /// in GPU memory of the current device.
    virtual void read_device(void* base, std::size_t buffer_offset, std::size_t n, std::uint64_t offset,
                             const io_context& where);
    virtual void write_device(const void* base, std::size_t buffer_offset, std::size_t n,
                              std::uint64_t offset, const io_context& where);
    /// Makes written bytes durable (fsync); sets the size. Need traits().writable.
    virtual void sync();
    virtual void truncate(std::uint64_t size);
    /// Releases what the source holds and reports the first error. Later calls do nothing.
    virtual void close() {}

    /// Another source over the same bytes that the planner may pick instead of this one (a local
    /// file offers those of backend/alternatives.cpp). Opened on first ask, owned by this source (valid until
    /// its close()); null, with the reason in `why`, when it cannot be used. Thread safe.
    virtual source* alternative(std::string_view kind, unavailable_reason& why);
    /// The fraction of the bytes in the page cache, in [0, 1]; -1 when unknown or meaningless.
    virtual double cached_fraction() { return -1; }
    /// The descriptor of the local file it reads, or -1 (remote and in-memory sources).
    virtual int descriptor() const noexcept { return -1; }
};

}  // namespace ferry::detail
