// Raw binary files: numpy.fromfile / ndarray.tofile with numpy's meaning, into and out of host
// or GPU memory.
#pragma once

#include "ferry/export.hpp"

#include <cstdint>
#include <string>
#include <vector>

#include "ferry/array.hpp"
#include "ferry/dtype.hpp"
#include "ferry/load_options.hpp"

namespace ferry {

/// Reads `count` items of `type` (its byte order included, e.g. parse_dtype(">f4")) starting
/// `offset` bytes into the file. count -1 means the rest of the file, which must then be a whole
/// number of items; an explicit count that runs past the end is an error, never a short read.
/// A non-empty `shape` gives the array's shape; its element count is the count when count is
/// -1 and must equal it otherwise. The payload is read straight into `options.where` and
/// deserialized there. Throws format_error (file, field, reason) when the file does not hold
/// what was asked for, usage_error for bad arguments.
FERRY_EXPORT array fromfile(const std::string& path, typed_order type, std::int64_t count = -1,
               std::uint64_t offset = 0, const std::vector<std::int64_t>& shape = {},
               const load_options& options = {});

/// fromfile into the caller's array `out` (any memory; C-contiguous; of `type`'s dtype): no
/// allocation. count -1 reads out's element count, which must fit in the file after `offset`;
/// an explicit count must equal it. A byte order other than native is swapped in place (on
/// the GPU for device memory) unless options.keep_byte_order. options.as and options.c_order
/// would need other storage: refused with usage_error, as is a read-only `out` or a mismatch of
/// dtype or size.
/// Returns a view of `out` (in the file's byte order when it was kept).
FERRY_EXPORT array fromfile_into(const std::string& path, typed_order type, const array& out,
                                 std::int64_t count = -1, std::uint64_t offset = 0,
                                 const load_options& options = {});

/// Writes the elements of `a` in C order, in the array's byte order, and nothing else (as
/// ndarray.tofile), atomically.
FERRY_EXPORT void tofile(const array& a, const std::string& path);

}  // namespace ferry
