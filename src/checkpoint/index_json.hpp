// The JSON of a checkpoint's index (model.safetensors.index.json): its metadata and its
// weight_map, parsed by simdjson. nlohmann::json's parse, even through its SAX interface, took
// 1.2 ms for the index of 819 tensors on the H200 machine (about 50 MB/s), on every load, and
// would take 100x that for a checkpoint of 90,000 tensors; simdjson's takes a few percent of it.
#pragma once

#include <functional>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ferry::checkpoints {

/// One weight_map entry: a tensor's name (a view into the parsed text, which index_json keeps)
/// and its shard, an index into index_json::files.
struct weight_entry {
    std::string_view tensor;
    std::size_t file = 0;  ///< not_a_file where the value is no string (read_index_json only)
};

constexpr std::size_t not_a_file = SIZE_MAX;

struct index_json {
    /// `metadata`'s entries: strings as they are, any other value as its JSON text.
    std::map<std::string, std::string> metadata;
    /// The shard file names the weight_map gives, each once, in the order first met.
    std::vector<std::string> files;
    /// weight_map: tensor -> shard, sorted by tensor name, each tensor once. No string of its
    /// own per tensor: an index of 100,000 tensors made 200,000 of them, and sorted them.
    std::vector<weight_entry> weight_map;
    /// What the views of weight_map point into.
    std::shared_ptr<const void> keep;
};

/// Parses an index's text. Throws format_error (invalid JSON, not an object, no weight_map
/// object) or checkpoint_error naming the tensor (a value that is not a file name, a tensor
/// listed twice), naming the index as `shown_index` (a URL redacted); checkpoint_error is given
/// `index_path` and redacts it itself.
/// `on_file`, when given, sees each weight_map value that is a string, once, in document order,
/// as the parser meets it (before the text is checked to the end): a caller can start work on a
/// shard while the rest of the index is parsed.
index_json parse_index_json(std::string_view text, const std::string& index_path, const std::string& shown_index,
                            const std::function<void(const std::string& file)>& on_file = {});

/// parse_index_json in two steps, for a caller with work to start once the shards are known:
/// read_index_json throws format_error alone and gives the weight_map in the document's order,
/// a value that is not a file name as not_a_file; order_index_json then sorts it and throws
/// parse_index_json's checkpoint_errors.
index_json read_index_json(std::string_view text, const std::string& shown_index,
                           const std::function<void(const std::string& file)>& on_file = {});
void order_index_json(index_json& index, const std::string& index_path);

}  // namespace ferry::checkpoints
