// Memory kinds and owners of GPU and pinned memory, so users of ferry (and its CLI, tests and
// Python package) need no CUDA runtime of their own.
#pragma once

#include "ferry/export.hpp"

#include <cstddef>
#include <string>

struct CUstream_st;  // CUDA's own stream type, declared here so no CUDA header is needed

namespace ferry {

/// A CUDA stream handle: the same type as cudaStream_t; nullptr is the legacy default stream.
using stream_t = ::CUstream_st*;

enum class memory_kind {
    host,     ///< ordinary pageable host memory (or anything CUDA does not know)
    pinned,   ///< page-locked host memory (cudaHostAlloc / cudaHostRegister)
    device,   ///< device memory (cudaMalloc)
    managed,  ///< unified memory (cudaMallocManaged)
};

FERRY_EXPORT std::string to_string(memory_kind k);

/// What kind of memory `p` points into; detected through CUDA where there is a GPU.
/// Thread safe.
FERRY_EXPORT memory_kind memory_kind_of(const void* p);

/// Number of usable CUDA devices: 0 where there is no GPU or driver (never throws).
FERRY_EXPORT int cuda_device_count();

/// Why CUDA is unusable here ("" when it is usable): no driver, no device, version mismatch.
FERRY_EXPORT std::string cuda_unavailable_reason();

/// The device a device or managed pointer belongs to. Throws usage_error for other memory.
FERRY_EXPORT int device_of(const void* p);

/// Waits for the work queued on `s` (any stream, nullptr for the legacy default stream).
/// Throws cuda_error.
FERRY_EXPORT void synchronize(stream_t s);

/// Owner of one device allocation on a chosen device. Move-only; the destructor never throws.
class FERRY_EXPORT device_buffer {
public:
    device_buffer() = default;
    /// Allocates `size` bytes on `device` (cudaMalloc). Throws cuda_error.
    device_buffer(std::size_t size, int device = 0);
    device_buffer(device_buffer&& o) noexcept;
    device_buffer& operator=(device_buffer&& o) noexcept;
    device_buffer(const device_buffer&) = delete;
    device_buffer& operator=(const device_buffer&) = delete;
    ~device_buffer();

    void* data() const noexcept { return ptr_; }
    std::size_t size() const noexcept { return size_; }
    int device() const noexcept { return device_; }
    /// Frees now, reporting errors (cuda_error).
    void reset();

private:
    void* ptr_ = nullptr;
    std::size_t size_ = 0;
    int device_ = 0;
};

/// Owner of page-locked host memory (cudaHostAlloc). Move-only; the destructor never throws.
class FERRY_EXPORT pinned_buffer {
public:
    pinned_buffer() = default;
    explicit pinned_buffer(std::size_t size);
    pinned_buffer(pinned_buffer&& o) noexcept;
    pinned_buffer& operator=(pinned_buffer&& o) noexcept;
    pinned_buffer(const pinned_buffer&) = delete;
    pinned_buffer& operator=(const pinned_buffer&) = delete;
    ~pinned_buffer();

    void* data() const noexcept { return ptr_; }
    std::size_t size() const noexcept { return size_; }
    void reset();

private:
    void* ptr_ = nullptr;
    std::size_t size_ = 0;
};

/// Synchronous copies between any two pointers (cudaMemcpy with cudaMemcpyDefault, or memcpy
/// when neither side is GPU memory). Throws cuda_error.
FERRY_EXPORT void copy_memory(void* dst, const void* src, std::size_t n);
/// Fills with a byte (cudaMemset or memset).
FERRY_EXPORT void fill_memory(void* dst, int byte, std::size_t n);

/// Owner of a CUDA stream for API users without a CUDA runtime of their own.
class FERRY_EXPORT stream {
public:
    explicit stream(int device = 0);
    stream(stream&& o) noexcept;
    stream& operator=(stream&& o) noexcept;
    stream(const stream&) = delete;
    stream& operator=(const stream&) = delete;
    ~stream();
    stream_t get() const noexcept { return s_; }
    void synchronize() const;

private:
    stream_t s_ = nullptr;
};

}  // namespace ferry
