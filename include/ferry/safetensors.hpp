// safetensors: load all tensors, or a chosen subset, into host or GPU memory with one coalesced
// parallel read; save a dict of arrays plus string metadata.
//
// Memory ownership of loaded tensors: a load makes ONE allocation (at options.where) that holds
// the byte ranges of every tensor it reads; each returned array is a view into it and holds
// shared ownership of it. The allocation is freed when the last of those arrays (and the last
// DLPack export made from them) is destroyed, so keeping one small tensor keeps the whole
// allocation alive: clone() it to hold it alone. Tensors converted on load (options.as) are
// copied into a second allocation shared the same way; the first is then freed as soon as no
// unconverted tensor refers to it.
#pragma once

#include "ferry/export.hpp"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "ferry/array.hpp"
#include "ferry/dtype.hpp"
#include "ferry/load_options.hpp"

namespace ferry {

/// The reference implementation refuses headers larger than this; so does ferry.
inline constexpr std::uint64_t safetensors_max_header_size = 100'000'000;

struct FERRY_EXPORT safetensors_tensor_info {
    std::string name;
    ferry::dtype type = dtype::uint8;
    std::vector<std::int64_t> shape;
    std::uint64_t begin = 0;  ///< data_offsets[0], relative to the data buffer
    std::uint64_t end = 0;    ///< data_offsets[1]
};

/// What a safetensors header says, validated against the reference rules.
struct FERRY_EXPORT safetensors_info {
    std::uint64_t header_size = 0;  ///< N, the JSON's length in bytes (padding included)
    std::uint64_t data_offset = 0;  ///< 8 + N: where the data buffer starts in the file
    std::vector<safetensors_tensor_info> tensors;  ///< sorted by name
    std::map<std::string, std::string> metadata;   ///< __metadata__
};

/// Reads and validates the header. Nothing larger than min(100,000,000, file size) is
/// allocated before it validates. Throws format_error (file, field, reason) for invalid content,
/// system_error when the file cannot be read.
FERRY_EXPORT safetensors_info read_safetensors_info(const std::string& path);

/// Loads the tensors named in `names` (all when empty), sorted by name. The byte ranges needed
/// are merged and read concurrently, one file read per merged range, into one allocation (see
/// the ownership note above). Throws usage_error for a name the file does not have. When
/// `header` is not null it receives the validated header (metadata included).
FERRY_EXPORT std::vector<named_array> load_safetensors(const std::string& path,
                                          const load_options& options = {},
                                          const std::vector<std::string>& names = {},
                                          safetensors_info* header = nullptr);

/// Saves `arrays` (unique names, not "__metadata__") and `metadata`, atomically. Arrays are
/// written little-endian in C order whatever their byte order or layout; the data of each
/// tensor starts at a multiple of its item size. With `checksums`, a CRC-32C of every 64 MiB
/// chunk of every tensor and of the header is recorded in the metadata ("ferry.checksums";
/// ferry/integrity.hpp), computed where each array is (on its GPU for device arrays). Throws
/// usage_error for complex128 (which safetensors cannot store) or a duplicate name. A
/// "ferry.checksums" entry in `metadata` (a record copied from another file) is dropped.
FERRY_EXPORT void save_safetensors(const std::string& path, const std::vector<named_array>& arrays,
                      const std::map<std::string, std::string>& metadata = {}, bool checksums = true);

}  // namespace ferry
