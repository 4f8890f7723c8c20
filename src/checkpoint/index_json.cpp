#include "checkpoint/index_json.hpp"

#include <algorithm>
#include <optional>
#include <unordered_map>

#include <simdjson.h>

#include "ferry/checkpoint.hpp"
#include "ferry/error.hpp"

namespace ferry::checkpoints {

namespace {

using element = simdjson::dom::element;
using element_type = simdjson::dom::element_type;

}  // namespace

index_json read_index_json(std::string_view text, const std::string& shown_index,
                           const std::function<void(const std::string& file)>& on_file) {
    auto parser = std::make_shared<simdjson::dom::parser>();
    element root;
    if (auto err = parser->parse(text.data(), text.size()).get(root))
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

    // Views into the parser's tape, which `keep` holds; a file is looked up only when it differs
    // from the previous entry's (an index lists a shard's tensors together).
    std::vector<weight_entry> entries;
    entries.reserve(simdjson::dom::object(*weight_map).size());
    std::string_view last;
    std::size_t last_file = not_a_file;
    std::unordered_map<std::string_view, std::size_t> file_of;
    for (auto [tensor, file] : simdjson::dom::object(*weight_map)) {
        if (file.type() != element_type::STRING) {
            entries.push_back({tensor, not_a_file});
            continue;
        }
        std::string_view name(file);
        if (last_file == not_a_file || name != last) {
            auto [it, fresh] = file_of.emplace(name, out.files.size());
            last_file = it->second;
            if (fresh) {
                out.files.emplace_back(name);
                if (on_file) on_file(out.files.back());
            }
            last = name;
        }
        entries.push_back({tensor, last_file});
    }
    out.weight_map = std::move(entries);
    out.keep = std::move(parser);
    return out;
}

void order_index_json(index_json& index, const std::string& index_path) {
    auto& entries = index.weight_map;
    auto by_name = [](const weight_entry& a, const weight_entry& b) { return a.tensor < b.tensor; };
    if (!std::is_sorted(entries.begin(), entries.end(), by_name))
        std::stable_sort(entries.begin(), entries.end(), by_name);
    for (std::size_t i = 0; i < entries.size(); ++i) {
        const weight_entry& e = entries[i];
        if (i + 1 < entries.size() && entries[i + 1].tensor == e.tensor)
            throw checkpoint_error(index_path, std::string(e.tensor), "is listed twice in the index's weight_map");
        if (e.file == not_a_file)
            throw checkpoint_error(index_path, std::string(e.tensor), "weight_map value is not a file name");
    }
}

index_json parse_index_json(std::string_view text, const std::string& index_path, const std::string& shown_index,
                            const std::function<void(const std::string& file)>& on_file) {
    index_json out = read_index_json(text, shown_index, on_file);
    order_index_json(out, index_path);
    return out;
}

}  // namespace ferry::checkpoints
