// CPU side of deserialization, for arrays in host or pinned memory: the same operations and the
// same results, bit for bit, as src/cuda/deserialize_kernels.hpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "ferry/dtype.hpp"

namespace ferry::host_kernels {

/// Reverses the bytes of each `unit`-byte group (1 is a no-op; 2, 4, 8, 16) of `count` groups.
void byte_swap(void* data, std::size_t count, std::size_t unit);

/// Like byte_swap, from `src` into `dst` (which may equal `src`).
void byte_swap_copy(const void* src, void* dst, std::size_t count, std::size_t unit);

/// Converts `count` native-order elements (see kernels::can_convert for the pairs).
void convert(const void* src, dtype from, void* dst, dtype to, std::size_t count);

/// Writes to `dst` the C-order copy of the Fortran-order array at `src`.
void fortran_to_c(const void* src, void* dst, std::size_t itemsize,
                  const std::vector<std::int64_t>& shape);

}  // namespace ferry::host_kernels
