// The safetensors header: parsed with nlohmann::json and validated against the reference rules
// (known dtypes, checked sizes, exact tiling of the data buffer, no trailing bytes, no
// duplicate names, string-only __metadata__); and written.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>

#include "ferry/file.hpp"
#include "ferry/safetensors.hpp"

namespace ferry::formats {

/// Validates the header length N read from the first 8 bytes against the cap and the file size.
void check_safetensors_header_size(std::uint64_t n, std::uint64_t file_size,
                                   const std::string& file);

/// Reads and validates the header of the open file `f` (`size` bytes); messages call it `name`.
/// A remote file (a URL) is asked for its first 256 KiB at once, which hold the whole header of
/// nearly every file (about 100 bytes per tensor): 8 bytes first and then the header would cost
/// a second round trip. A local file reads exactly the 8 bytes, then the header.
safetensors_info read_safetensors_header(const file& f, std::uint64_t size, const std::string& name);

/// Parses the JSON `header` of a file of `file_size` bytes. Throws format_error naming `file`.
safetensors_info parse_safetensors_header(std::string_view header, std::uint64_t file_size,
                                          const std::string& file);

/// One tensor to write: its name, dtype, shape and byte length (views of the caller's tensor,
/// which outlives the layout's making).
struct safetensors_entry {
    std::string_view name;
    ferry::dtype type;
    const std::vector<std::int64_t>* shape = nullptr;
    std::uint64_t bytes = 0;
};

/// The file layout for `entries` as saved: the 8-byte length and the space-padded JSON (so the
/// data buffer starts at a multiple of 8), and each entry's offset in the data buffer, in the
/// order of `entries`. Tensors are placed largest item size first, then by name, so each starts
/// at a multiple of its item size.
struct safetensors_layout {
    std::string prefix;                   ///< length + JSON, ready to write at offset 0
    std::vector<std::uint64_t> offsets;   ///< per entry, relative to the data buffer
    std::uint64_t data_bytes = 0;
};
safetensors_layout layout_safetensors(const std::vector<safetensors_entry>& entries,
                                      const std::map<std::string, std::string>& metadata);

/// Appends `s` to `out` as a JSON string, quotes included (`s` is UTF-8: '"', '\\' and control
/// characters escaped, the rest as it is).
void append_json_string(std::string& out, std::string_view s);

/// save_safetensors of `arrays` (a checkpoint's shard: a part of its tensors, without copying
/// them out). Implemented in safetensors.cpp.
void save_safetensors_part(const std::string& path, std::span<const named_array> arrays,
                           const std::map<std::string, std::string>& metadata, bool checksums = true);

}  // namespace ferry::formats
