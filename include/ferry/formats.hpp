// One entry point for every file format ferry reads and writes (.npy, safetensors, raw): find
// the format, describe a file, load all its arrays, save arrays. The CLI's load, info and
// convert commands are thin layers over these.
#pragma once

#include "ferry/export.hpp"

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ferry/array.hpp"
#include "ferry/dtype.hpp"
#include "ferry/load_options.hpp"

namespace ferry {

enum class file_format { npy, safetensors, raw };

/// "npy", "safetensors", "raw".
FERRY_EXPORT std::string_view to_string(file_format f) noexcept;
/// Parses "npy", "safetensors" or "raw"; throws usage_error on anything else.
FERRY_EXPORT file_format parse_file_format(std::string_view text);

/// The format of an existing file, by content first: the .npy magic; a safetensors header
/// (a plausible little-endian length followed by '{'). Otherwise by extension (.npy,
/// .safetensors), else raw. Only the first 9 bytes are read. Throws system_error when the
/// file cannot be opened.
FERRY_EXPORT file_format detect_format(const std::string& path);
/// The format an output path asks for, by extension alone: .npy, .safetensors, else raw.
FERRY_EXPORT file_format format_from_extension(const std::string& path);

/// What load_any reads and how.
struct FERRY_EXPORT any_load_options {
    load_options load;                       ///< placement, dtype conversion, layout, stream
    std::optional<file_format> format;       ///< forces a format instead of detect_format
    std::vector<std::string> tensors;        ///< safetensors: this subset (all when empty)
    /// raw: the dtype and byte order (required for raw files, refused for the others)
    std::optional<typed_order> raw_type;
    std::int64_t count = -1;                 ///< raw: items, -1 = the rest of the file
    std::uint64_t offset = 0;                ///< raw: bytes to skip
    std::vector<std::int64_t> shape;         ///< raw: the array's shape (optional)
};

/// The arrays of one file.
struct FERRY_EXPORT loaded_file {
    file_format format = file_format::raw;
    /// .npy and raw: one array named "". safetensors: the tensors, sorted by name.
    std::vector<named_array> arrays;
    std::map<std::string, std::string> metadata;  ///< safetensors __metadata__
    std::uint64_t payload_bytes = 0;  ///< bytes of array data read from the file
};

/// Loads every array of `path` (see load_npy, load_safetensors, fromfile for the semantics).
/// Throws usage_error for options that do not apply to the file's format (tensors for a .npy
/// file; raw_type, count, offset or shape for a non-raw file; a raw file without raw_type), and whatever
/// the format's loader throws.
FERRY_EXPORT loaded_file load_any(const std::string& path, const any_load_options& options = {});

/// One array as a file stores it.
struct FERRY_EXPORT array_description {
    std::string name;
    typed_order type;
    storage_order layout = storage_order::c;
    std::vector<std::int64_t> shape;
    std::uint64_t begin = 0;  ///< absolute byte range in the file
    std::uint64_t end = 0;
};

/// What a file holds, from its header alone (no payload is read).
struct FERRY_EXPORT file_description {
    file_format format = file_format::raw;
    std::string version;           ///< "1.0", "2.0", "3.0" for .npy; empty otherwise
    std::uint64_t file_size = 0;
    std::uint64_t header_size = 0; ///< bytes before the data (raw: 0)
    std::vector<array_description> arrays;  ///< raw files: none (their dtype is not stored)
    std::map<std::string, std::string> metadata;
};

/// Describes `path`, validating its header. Throws format_error for invalid content.
FERRY_EXPORT file_description describe_file(const std::string& path,
                               std::optional<file_format> format = std::nullopt);

/// `d` as one JSON object, the shape `ferry info --json` prints and `ferry.info()` returns
/// (docs/formats.md): file, format, version, file_size, header_size, arrays (name, dtype,
/// byte_order, order, shape, begin, end) and metadata. Text that is not UTF-8 is replaced.
FERRY_EXPORT std::string to_json(const file_description& d, const std::string& path);

/// Saves `arrays` as `format`, atomically. npy and raw take exactly one array; safetensors any
/// number plus `metadata`. Throws usage_error when the arrays do not fit the format.
FERRY_EXPORT void save_any(const std::string& path, file_format format, const std::vector<named_array>& arrays,
              const std::map<std::string, std::string>& metadata = {}, bool checksums = true);

}  // namespace ferry
