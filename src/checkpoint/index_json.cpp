#include "checkpoint/index_json.hpp"

#include <algorithm>
#include <optional>

#include <nlohmann/json.hpp>

#include "ferry/checkpoint.hpp"
#include "ferry/error.hpp"

namespace ferry::checkpoints {

namespace {

using json = nlohmann::json;

// Keeps weight_map's pairs and metadata's values, and skips everything else. A root key given
// twice counts once, the last time, as nlohmann::json's own parse would have it.
class index_reader {
public:
    bool root_object = false;
    bool weight_map_seen = false, weight_map_object = false;
    bool metadata_object = false;
    std::vector<std::pair<std::string, std::optional<std::string>>> entries;
    std::vector<std::pair<std::string, json>> metadata;

    bool null() { return value(json(nullptr)); }
    bool boolean(bool v) { return value(json(v)); }
    bool number_integer(json::number_integer_t v) { return value(json(v)); }
    bool number_unsigned(json::number_unsigned_t v) { return value(json(v)); }
    bool number_float(json::number_float_t v, const json::string_t&) { return value(json(v)); }
    bool string(json::string_t& s) {
        if (depth_ == 2 && in_ == part::weight_map && weight_map_object) {
            if (on_file_) on_file_(s);
            entries.emplace_back(key_, std::move(s));
            return true;
        }
        return value(json(std::move(s)));
    }
    bool binary(json::binary_t&) { return value(json(nullptr)); }
    bool start_object(std::size_t) { return open(true); }
    bool start_array(std::size_t) { return open(false); }
    bool end_object() { return close(); }
    bool end_array() { return close(); }
    bool key(json::string_t& k) {
        if (depth_ == 1) root_key_ = k;
        else if (depth_ == 2) key_ = k;
        else if (building()) keys_[depth_] = k;
        return true;
    }
    bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) {
        throw format_error(shown_, "index", std::string("invalid JSON: ") + e.what());
    }

    index_reader(const std::string& shown, const std::function<void(const std::string&)>& on_file)
        : shown_(shown), on_file_(on_file) {}

private:
    enum class part { other, weight_map, metadata };

    bool building() const { return in_ == part::metadata && metadata_object && depth_ >= 3; }

    // A root value starts: weight_map and metadata start over (the last one given counts).
    void root_value(bool is_object) {
        in_ = part::other;
        if (root_key_ == "weight_map") {
            in_ = part::weight_map;
            weight_map_seen = true;
            weight_map_object = is_object;
            entries.clear();
        } else if (root_key_ == "metadata") {
            in_ = part::metadata;
            metadata_object = is_object;
            metadata.clear();
        }
    }

    bool value(json v) {
        if (depth_ == 0) {
            root_object = false;
        } else if (depth_ == 1) {
            root_value(false);
        } else if (depth_ == 2 && in_ == part::weight_map && weight_map_object) {
            entries.emplace_back(key_, std::nullopt);  // not a file name
        } else if (depth_ == 2 && in_ == part::metadata && metadata_object) {
            metadata.emplace_back(key_, std::move(v));
        } else if (building()) {
            place(std::move(v));
        }
        return true;
    }

    // A value inside a metadata value being built: into its parent, under its key.
    json* place(json v) {
        json& parent = *built_.back();
        if (parent.is_object()) return &(parent[keys_[depth_]] = std::move(v));
        parent.push_back(std::move(v));
        return &parent.back();
    }

    bool open(bool is_object) {
        json fresh = is_object ? json::object() : json::array();
        if (depth_ == 0) {
            root_object = is_object;
        } else if (depth_ == 1) {
            root_value(is_object);
        } else if (depth_ == 2 && in_ == part::weight_map && weight_map_object) {
            entries.emplace_back(key_, std::nullopt);
        } else if (depth_ == 2 && in_ == part::metadata && metadata_object) {
            metadata.emplace_back(key_, std::move(fresh));
            built_.push_back(&metadata.back().second);
        } else if (building()) {
            built_.push_back(place(std::move(fresh)));
        }
        ++depth_;
        if (keys_.size() <= depth_) keys_.resize(depth_ + 1);
        return true;
    }

    bool close() {
        --depth_;
        if (in_ == part::metadata && metadata_object && depth_ >= 2) built_.pop_back();
        if (depth_ == 1) in_ = part::other;
        return true;
    }

    const std::string& shown_;
    const std::function<void(const std::string&)>& on_file_;
    std::size_t depth_ = 0;
    part in_ = part::other;
    std::string root_key_, key_;
    std::vector<std::string> keys_;  ///< inside a metadata value: the key at each depth
    std::vector<json*> built_;       ///< the metadata containers being built, innermost last
};

}  // namespace

index_json parse_index_json(std::string_view text, const std::string& index_path, const std::string& shown_index,
                            const std::function<void(const std::string& file)>& on_file) {
    index_reader r(shown_index, on_file);
    try {
        json::sax_parse(text.begin(), text.end(), &r);
    } catch (const json::exception& e) {  // the reader reports parse errors itself; this is a net
        throw format_error(shown_index, "index", std::string("invalid JSON: ") + e.what());
    }
    if (!r.root_object) throw format_error(shown_index, "index", "not a JSON object");
    if (!r.weight_map_seen || !r.weight_map_object)
        throw format_error(shown_index, "weight_map", "missing or not an object");
    index_json out;
    for (auto& [k, v] : r.metadata) out.metadata[k] = v.is_string() ? v.get<std::string>() : v.dump();
    std::stable_sort(r.entries.begin(), r.entries.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    out.weight_map.reserve(r.entries.size());
    for (std::size_t i = 0; i < r.entries.size(); ++i) {
        auto& [tensor, file] = r.entries[i];
        if (i + 1 < r.entries.size() && r.entries[i + 1].first == tensor)
            throw checkpoint_error(index_path, tensor, "is listed twice in the index's weight_map");
        if (!file) throw checkpoint_error(index_path, tensor, "weight_map value is not a file name");
        out.weight_map.emplace_back(std::move(tensor), std::move(*file));
    }
    return out;
}

}  // namespace ferry::checkpoints
