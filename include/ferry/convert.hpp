// Deserialization of arrays already in memory: byte order to native, dtype conversion, Fortran
// to C order. Arrays in GPU memory are converted by CUDA kernels on the GPU (the CPU never
// touches their elements); arrays in host or pinned memory by the CPU, with identical results.
//
// Stream ordering: GPU work is enqueued on `s` and every function synchronizes `s` before it
// returns, so the result is ready and the input may be released. Thread safety: functions may
// run concurrently on different arrays.
#pragma once

#include "ferry/export.hpp"

#include <vector>

#include "ferry/array.hpp"
#include "ferry/dtype.hpp"
#include "ferry/memory.hpp"

namespace ferry {

/// Whether astype supports `from` -> `to`: the same type, or float16, bfloat16 or float64 to
/// and from float32.
FERRY_EXPORT bool can_astype(dtype from, dtype to) noexcept;

/// The elements of `a` in native byte order: `a` itself when they already are, else a new
/// array at the same place.
FERRY_EXPORT array to_native(const array& a, stream_t s = nullptr);

/// Swaps the bytes of `a`'s storage in place and returns the relabelled (native-order) array.
/// Every array sharing that storage sees the swapped bytes: use only on storage you own alone.
/// A read-only array that is not native is refused with usage_error.
FERRY_EXPORT array to_native_in_place(const array& a, stream_t s = nullptr);

/// `a` in C order: `a` itself when it already is (or when C and Fortran order coincide), else
/// a transposed copy at the same place, in the same byte order.
FERRY_EXPORT array to_c_order(const array& a, stream_t s = nullptr);

/// `a` converted to `to` (native byte order, same layout and place); `a` itself when it is
/// already native `to`. Throws usage_error for an unsupported pair (see can_astype).
FERRY_EXPORT array astype(const array& a, dtype to, stream_t s = nullptr);

/// to_native, then to C order: the array as a C program would lay it out.
FERRY_EXPORT array to_native_c(const array& a, stream_t s = nullptr);

/// to_native_c of many arrays in one go, for arrays whose storage the caller owns alone: bytes
/// are swapped in place (as to_native_in_place), Fortran-order arrays transposed into one new
/// allocation per placement (views of it are returned). GPU work is queued on `s` and waited
/// for once per device, not per array. Read-only arrays that are not native are refused.
FERRY_EXPORT std::vector<array> to_native_c_many(const std::vector<array>& arrays, stream_t s = nullptr);

}  // namespace ferry
