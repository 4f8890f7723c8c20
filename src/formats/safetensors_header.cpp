#include "formats/safetensors_header.hpp"

#include <algorithm>
#include <limits>
#include <numeric>
#include <set>
#include <vector>

#include <nlohmann/json.hpp>

#include "escape_text.hpp"
#include "ferry/error.hpp"

namespace ferry::formats {
namespace {

using json = nlohmann::json;

std::string tensor_field(std::string_view name) {
    return "tensor '" + detail::escape_text(name, 80) + "'";
}

bool as_u64(const json& v, std::uint64_t& out) {
    if (v.is_number_unsigned()) {
        out = v.get<std::uint64_t>();
        return true;
    }
    if (v.is_number_integer() && v.get<std::int64_t>() >= 0) {
        out = static_cast<std::uint64_t>(v.get<std::int64_t>());
        return true;
    }
    return false;
}

// nlohmann::json keeps the last of duplicate keys; the reference refuses them. This parser
// callback sees every key, so it refuses them first. It also bounds what the parse can build:
// a valid header nests four levels at most (root, entry, field, array) and its arrays hold
// dimensions or an offset pair, so deeper nesting or huge arrays are refused before they turn a
// 100 MB header into gigabytes of parsed values.
class header_guard {
public:
    explicit header_guard(const std::string& file) : file_(file) {}
    bool operator()(int /*depth*/, json::parse_event_t event, json& parsed) {
        switch (event) {
        case json::parse_event_t::object_start:
            open(false);
            break;
        case json::parse_event_t::array_start:
            open(true);
            break;
        case json::parse_event_t::object_end:
        case json::parse_event_t::array_end:
            stack_.pop_back();
            break;
        case json::parse_event_t::key: {
            const auto& key = parsed.get_ref<const std::string&>();
            if (!stack_.back().keys.insert(key).second)
                throw format_error(file_, stack_.size() == 1 ? tensor_field(key) : "header",
                                   "duplicate key '" + detail::escape_text(key, 80) + "'");
            break;
        }
        case json::parse_event_t::value:
            count_item();
            break;
        }
        return true;
    }

private:
    static constexpr std::size_t max_depth = 4;
    static constexpr std::size_t max_array_items = 1024;

    struct level {
        bool is_array = false;
        std::size_t items = 0;
        std::set<std::string> keys;
    };

    void count_item() {
        if (!stack_.empty() && stack_.back().is_array && ++stack_.back().items > max_array_items)
            throw format_error(file_, "header",
                               "array of more than " + std::to_string(max_array_items) + " items");
    }

    void open(bool is_array) {
        count_item();  // a container inside an array is one of its items
        if (stack_.size() >= max_depth) throw format_error(file_, "header", "JSON nested too deeply");
        stack_.push_back({is_array, 0, {}});
    }

    const std::string& file_;
    std::vector<level> stack_;
};

}  // namespace

void check_safetensors_header_size(std::uint64_t n, std::uint64_t file_size,
                                   const std::string& file) {
    if (file_size < 8) throw format_error(file, "header_length", "file shorter than 8 bytes");
    if (n > safetensors_max_header_size)
        throw format_error(file, "header_length",
                           "header of " + std::to_string(n) + " bytes exceeds the cap of " +
                               std::to_string(safetensors_max_header_size));
    if (n > file_size - 8)
        throw format_error(file, "header_length",
                           "header of " + std::to_string(n) + " bytes runs past the end of the " +
                               std::to_string(file_size) + "-byte file");
    if (n < 2) throw format_error(file, "header", "header too short to be a JSON object");
}

safetensors_info read_safetensors_header(const file& f, std::uint64_t size, const std::string& name) {
    constexpr std::uint64_t remote_guess = 256 << 10;
    if (size < 8) throw format_error(name, "header_length", "file shorter than 8 bytes");
    const bool remote = f.path().find("://") != std::string::npos;
    const std::uint64_t first = remote ? std::min(size, remote_guess) : 8;
    std::string head(first, '\0');
    f.read(head.data(), first, 0);
    std::uint64_t n = 0;
    for (int i = 0; i < 8; ++i) n |= static_cast<std::uint64_t>(static_cast<unsigned char>(head[i])) << (8 * i);
    // Validated before allocating: n <= min(cap, size - 8).
    check_safetensors_header_size(n, size, name);
    if (8 + n <= first) return parse_safetensors_header(std::string_view(head).substr(8, n), size, name);
    std::string header(n, '\0');
    const std::uint64_t have = first - 8;
    std::copy(head.begin() + 8, head.end(), header.begin());
    f.read(header.data() + have, n - have, first);
    return parse_safetensors_header(header, size, name);
}

safetensors_info parse_safetensors_header(std::string_view header, std::uint64_t file_size,
                                          const std::string& file) {
    check_safetensors_header_size(header.size(), file_size, file);
    safetensors_info info;
    info.header_size = header.size();
    info.data_offset = 8 + header.size();
    const std::uint64_t buffer_size = file_size - info.data_offset;

    if (header.front() != '{') throw format_error(file, "header", "does not start with '{'");
    json root;
    try {
        header_guard dup(file);
        root = json::parse(header.begin(), header.end(), std::ref(dup));
    } catch (const json::exception& e) {
        throw format_error(file, "header", std::string("invalid JSON: ") + e.what());
    }
    if (!root.is_object()) throw format_error(file, "header", "not a JSON object");

    for (auto it = root.begin(); it != root.end(); ++it) {
        const std::string& name = it.key();
        const json& v = it.value();
        if (name == "__metadata__") {
            if (!v.is_object())
                throw format_error(file, "__metadata__", "not an object of strings");
            for (auto m = v.begin(); m != v.end(); ++m) {
                if (!m.value().is_string())
                    throw format_error(file, "__metadata__",
                                       "value of '" + m.key() + "' is not a string");
                info.metadata.emplace(m.key(), m.value().get<std::string>());
            }
            continue;
        }
        // Named only for a message: most headers have none to give.
        auto field = [&name] { return tensor_field(name); };
        if (!v.is_object()) throw format_error(file, field(), "entry is not an object");
        auto dt = v.find("dtype");
        auto sh = v.find("shape");
        auto off = v.find("data_offsets");
        if (dt == v.end() || sh == v.end() || off == v.end())
            throw format_error(file, field(), "needs dtype, shape and data_offsets");
        if (!dt->is_string()) throw format_error(file, field() + " dtype", "not a string");
        auto type = dtype_from_safetensors_name(dt->get_ref<const std::string&>());
        if (!type)
            throw format_error(file, field() + " dtype",
                               "unknown dtype '" + dt->get<std::string>() + "'");
        safetensors_tensor_info t;
        t.name = name;
        t.type = *type;
        if (!sh->is_array()) throw format_error(file, field() + " shape", "not an array");
        // Checked arithmetic: element count x item size must not wrap.
        std::uint64_t bytes = size_of(t.type);
        for (const json& d : *sh) {
            std::uint64_t n = 0;
            if (!as_u64(d, n) || n > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
                throw format_error(file, field() + " shape", "dimension is not a non-negative integer below 2**63");
            t.shape.push_back(static_cast<std::int64_t>(n));
        }
        bool zero = std::find(t.shape.begin(), t.shape.end(), 0) != t.shape.end();
        if (zero) {
            bytes = 0;
        } else {
            for (std::int64_t d : t.shape) {
                auto u = static_cast<std::uint64_t>(d);
                if (bytes > std::numeric_limits<std::uint64_t>::max() / u)
                    throw format_error(file, field() + " shape", "size overflows 64 bits");
                bytes *= u;
            }
        }
        if (!off->is_array() || off->size() != 2 || !as_u64((*off)[0], t.begin) ||
            !as_u64((*off)[1], t.end))
            throw format_error(file, field() + " data_offsets",
                               "not a pair of non-negative integers");
        if (t.end < t.begin) throw format_error(file, field() + " data_offsets", "end before begin");
        if (t.end - t.begin != bytes)
            throw format_error(file, field() + " data_offsets",
                               "byte range of " + std::to_string(t.end - t.begin) +
                                   " bytes does not match shape x dtype (" +
                                   std::to_string(bytes) + " bytes)");
        info.tensors.push_back(std::move(t));
    }

    // The tensors must tile the data buffer exactly: sorted by offsets, each starts where the
    // previous ended, from 0 to the end of the file.
    std::vector<const safetensors_tensor_info*> by_offset;
    for (const auto& t : info.tensors) by_offset.push_back(&t);
    std::sort(by_offset.begin(), by_offset.end(), [](auto* a, auto* b) {
        return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
    });
    std::uint64_t expected = 0;
    for (const auto* t : by_offset) {
        if (t->begin != expected)
            throw format_error(file, tensor_field(t->name) + " data_offsets",
                               t->begin < expected
                                   ? "overlaps the previous tensor (begins at " +
                                         std::to_string(t->begin) + ", previous ends at " +
                                         std::to_string(expected) + ")"
                                   : "leaves a gap (begins at " + std::to_string(t->begin) +
                                         ", previous ends at " + std::to_string(expected) + ")");
        expected = t->end;
    }
    if (expected > buffer_size)
        throw format_error(file, "data", "file is truncated: tensors need " +
                                             std::to_string(expected) + " bytes of data, " +
                                             std::to_string(buffer_size) + " present");
    if (expected < buffer_size)
        throw format_error(file, "data", std::to_string(buffer_size - expected) +
                                             " trailing bytes after the last tensor");
    std::sort(info.tensors.begin(), info.tensors.end(),
              [](const auto& a, const auto& b) { return a.name < b.name; });
    return info;
}

safetensors_layout layout_safetensors(const std::vector<safetensors_entry>& entries,
                                      const std::map<std::string, std::string>& metadata) {
    std::vector<std::size_t> order(entries.size());
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
        std::size_t sa = size_of(entries[a].type), sb = size_of(entries[b].type);
        return sa != sb ? sa > sb : entries[a].name < entries[b].name;
    });
    safetensors_layout out;
    out.offsets.resize(entries.size());
    nlohmann::ordered_json root = nlohmann::ordered_json::object();
    if (!metadata.empty()) {
        nlohmann::ordered_json m = nlohmann::ordered_json::object();
        for (const auto& [k, v] : metadata) m[k] = v;
        root["__metadata__"] = std::move(m);
    }
    std::uint64_t offset = 0;
    for (std::size_t i : order) {
        const auto& e = entries[i];
        auto name = safetensors_name(e.type);
        if (!name)
            throw usage_error("safetensors cannot store dtype " + std::string(to_string(e.type)) +
                              " (tensor '" + e.name + "')");
        out.offsets[i] = offset;
        nlohmann::ordered_json t;
        t["dtype"] = std::string(*name);
        t["shape"] = e.shape;
        t["data_offsets"] = {offset, offset + e.bytes};
        root[e.name] = std::move(t);
        offset += e.bytes;
    }
    out.data_bytes = offset;
    std::string text = root.dump();
    // Pad with spaces so the data buffer starts 8-byte aligned, as the reference does.
    text.append((8 - text.size() % 8) % 8, ' ');
    std::uint64_t n = text.size();
    out.prefix.resize(8);
    for (int i = 0; i < 8; ++i) out.prefix[i] = static_cast<char>((n >> (8 * i)) & 0xff);
    out.prefix += text;
    return out;
}

}  // namespace ferry::formats
