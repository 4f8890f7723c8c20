// The .npy header: its preamble (magic, version, length) and the Python-literal dict, read with
// a small grammar (never an evaluator), and written exactly as numpy writes it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ferry/npy.hpp"

namespace ferry::formats {

/// Bytes before the header length ends: 6 magic + 2 version + 2 (v1) or 4 (v2, v3) length.
inline constexpr std::size_t npy_preamble_max = 12;

struct npy_preamble {
    int major = 1;
    int minor = 0;
    std::size_t size = 10;           ///< bytes of magic, version and length
    std::uint32_t header_size = 0;   ///< bytes of the header that follow
};

/// Parses the preamble from the first bytes of the file (fewer than 12 when the file is that
/// short). Throws format_error naming `file`.
npy_preamble parse_npy_preamble(std::string_view bytes, const std::string& file);

/// Parses the header dict; fills type, layout and shape of the result, plus the version and
/// sizes from `pre`. Throws format_error naming `file` and the field.
npy_info parse_npy_header(std::string_view header, const npy_preamble& pre,
                          const std::string& file);

/// The preamble and header numpy writes for an array of `type` and `shape` in `layout`: version
/// 1.0 unless the header needs 2.0; padded so the data starts at a multiple of 64.
std::string format_npy_header(const typed_order& type, const std::vector<std::int64_t>& shape,
                              storage_order layout = storage_order::c);

}  // namespace ferry::formats
