// A checksum of an array's logical contents, independent of how a file stored them.
#pragma once

#include "ferry/export.hpp"

#include <string>

#include "ferry/array.hpp"

namespace ferry {

/// "xxh64:" and 16 lowercase hex digits: XXH64 (seed 0) of the elements in C (row-major) order,
/// each in little-endian byte order, i.e. numpy's
/// `a.astype(a.dtype.newbyteorder('<')).tobytes(order='C')`. A big-endian or Fortran-order
/// array and its native C-order twin have the same checksum.
///
/// Host arrays in native C order are hashed in place. Others are first made native C order: on
/// the GPU by kernels into a temporary device copy (so device memory briefly doubles), on the
/// host in a temporary copy. Device data then reaches the CPU in 16 MiB chunks through a
/// bounce buffer; the whole array is never copied to host memory at once.
FERRY_EXPORT std::string checksum(const array& a);

}  // namespace ferry
