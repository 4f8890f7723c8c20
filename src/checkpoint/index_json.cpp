#include "checkpoint/index_json.hpp"

#include <algorithm>
#include <optional>

#include <simdjson.h>

#include "ferry/checkpoint.hpp"
#include "ferry/error.hpp"

namespace ferry::checkpoints {

namespace {

using element = simdjson::dom::element;
using element_type = simdjson::dom::element_type;

}  // namespace

index_json parse_index_json(std::string_view text, const std::string& index_path, const std::string& shown_index,
                            const std::function<void(const std::string& file)>& on_file) {
    simdjson::dom::parser parser;
    element root;
    if (auto err = parser.parse(text.data(), text.size()).get(root))
        throw format_error(shown_index, "index", std::string("invalid JSON: ") + simdjson::error_message(err));
    if (root.type() != element_type::OBJECT) throw format_error(shown_index, "index", "not a JSON object");

    // A root key given twice counts once, the last time, as a JSON object's reader takes it.
    std::optional<element> weight_map, metadata;
    for (auto [key, value] : simdjson::dom::object(root)) {
        if (key == "weight_map") weight_map = value;
        else if (key == "metadata") metadata = value;
    }
    if (!weight_map || weight_map->type() != element_type::OBJECT)
        throw format_error(shown_index, "weight_map", "missing or not an object");

    index_json out;
    if (metadata && metadata->type() == element_type::OBJECT)
        for (auto [key, value] : simdjson::dom::object(*metadata))
            out.metadata[std::string(key)] = value.type() == element_type::STRING ? std::string(std::string_view(value))
                                                                                   : simdjson::to_string(value);

    std::vector<std::pair<std::string, std::optional<std::string>>> entries;
    for (auto [tensor, file] : simdjson::dom::object(*weight_map)) {
        if (file.type() != element_type::STRING) {
            entries.emplace_back(std::string(tensor), std::nullopt);
            continue;
        }
        std::string name{std::string_view(file)};
        if (on_file) on_file(name);
        entries.emplace_back(std::string(tensor), std::move(name));
    }
    std::stable_sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    out.weight_map.reserve(entries.size());
    for (std::size_t i = 0; i < entries.size(); ++i) {
        auto& [tensor, file] = entries[i];
        if (i + 1 < entries.size() && entries[i + 1].first == tensor)
            throw checkpoint_error(index_path, tensor, "is listed twice in the index's weight_map");
        if (!file) throw checkpoint_error(index_path, tensor, "weight_map value is not a file name");
        out.weight_map.emplace_back(std::move(tensor), std::move(*file));
    }
    return out;
}

}  // namespace ferry::checkpoints
