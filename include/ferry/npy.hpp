// numpy's .npy format: load (versions 1.0, 2.0, 3.0; C or Fortran order; any byte order) into
// host or GPU memory, and save (C order, the oldest version that fits, data 64-byte aligned,
// the header byte-for-byte as numpy writes it).
#pragma once

#include "ferry/export.hpp"

#include <cstdint>
#include <string>
#include <vector>

#include "ferry/array.hpp"
#include "ferry/dtype.hpp"
#include "ferry/load_options.hpp"

namespace ferry {

/// numpy caps .npy headers at this many bytes when loading; so does ferry.
inline constexpr std::size_t npy_max_header_size = 10000;

/// What a .npy header says.
struct FERRY_EXPORT npy_info {
    int major = 1;
    int minor = 0;
    typed_order type;
    storage_order layout = storage_order::c;
    std::vector<std::int64_t> shape;
    std::uint64_t header_size = 0;  ///< the header's stored length (dict, padding, newline)
    std::uint64_t data_offset = 0;  ///< where the elements start
    std::uint64_t data_bytes = 0;   ///< element count x item size
};

/// Reads and validates the header of a .npy file, including that the file holds all the
/// elements. Throws format_error (file, field, reason) for invalid content, system_error when
/// the file cannot be read.
FERRY_EXPORT npy_info read_npy_info(const std::string& path);

/// Loads a .npy file: one read of the payload straight into the destination memory, then
/// deserialization there (byte order, dtype, layout per `options`). The array owns its memory.
FERRY_EXPORT array load_npy(const std::string& path, const load_options& options = {});

/// Saves `a` as .npy, atomically (a temporary file renamed over `path`). Fortran-order arrays
/// are written in C order; the byte order is kept (a big-endian array is saved as '>...').
/// Throws usage_error for dtypes numpy has no type string for (bfloat16, float8_*).
FERRY_EXPORT void save_npy(const std::string& path, const array& a);

}  // namespace ferry
