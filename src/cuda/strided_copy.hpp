// 2-D copies: `height` rows of `width` bytes from a source with pitch `spitch` to a destination
// with pitch `dpitch`, in one DMA request (cudaMemcpy2DAsync), between any kinds of memory. The
// checkpoint loader gathers row segments of sliced tensors with it.
#pragma once

#include <cstddef>

#include "ferry/memory.hpp"

namespace ferry::kernels {

/// Enqueues the copy on `s` on `device` and returns; pinned or device sources keep it
/// asynchronous. Throws cuda_error.
void copy_2d(void* dst, std::size_t dpitch, const void* src, std::size_t spitch, std::size_t width,
             std::size_t height, int device, stream_t s);

}  // namespace ferry::kernels
