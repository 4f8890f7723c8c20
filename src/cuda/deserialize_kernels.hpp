// GPU side of deserialization: byte swapping, dtype conversion and Fortran -> C transposition of
// contiguous element buffers already in device memory.
//
// Every function enqueues its kernel on `s` on `device` and returns without waiting; the caller
// orders later work on the same stream or synchronizes it. Launch errors throw cuda_error.
// Pointers need only element alignment; 16-byte-aligned spans are processed with vector loads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "ferry/dtype.hpp"
#include "ferry/memory.hpp"

namespace ferry::kernels {

/// Reverses the bytes of each `unit`-byte group (unit 2, 4, 8 or 16) of `count` groups in place.
void byte_swap(void* data, std::size_t count, std::size_t unit, int device, stream_t s);

/// Whether convert() supports `from` -> `to`: the same type (a copy), or float16, bfloat16 or
/// float64 to and from float32.
bool can_convert(dtype from, dtype to) noexcept;

/// Converts `count` native-order elements; `src` and `dst` must not overlap.
void convert(const void* src, dtype from, void* dst, dtype to, std::size_t count, int device,
             stream_t s);

/// Writes to `dst` the C-order copy of the Fortran-order array at `src` with `shape`.
void fortran_to_c(const void* src, void* dst, std::size_t itemsize,
                  const std::vector<std::int64_t>& shape, int device, stream_t s);

/// Copies n bytes on `s` (cudaMemcpyAsync), ordered with the kernels queued there.
void copy(void* dst, const void* src, std::size_t n, int device, stream_t s);

/// Waits for the work queued on `s` (on `device`). Throws cuda_error.
void synchronize(stream_t s, int device);

}  // namespace ferry::kernels
