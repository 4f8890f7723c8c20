#include "formats/safetensors_header.hpp"

#include <algorithm>
#include <limits>
#include <numeric>
#include <optional>
#include <unordered_set>
#include <utility>
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

// The header is parsed by nlohmann::json's SAX interface into just what validation needs (names,
// dtype strings, the numbers of each shape and offset pair, string metadata): building the
// whole document first cost most of a checkpoint's open time (a std::map node and a string per
// key and value; 2.2 ms for 6 shards of 819 tensors, CPU machine). The parse refuses duplicate
// keys, which nlohmann::json would resolve to the last one and the reference refuses. It also
// bounds what the parse keeps: a valid header nests four levels at most (root, entry, field,
// array) and its arrays hold dimensions or an offset pair, so deeper nesting or huge arrays are
// refused before a 100 MB header turns into gigabytes of parsed values.

/// A number of a shape or of data_offsets: `ok` when it is a non-negative integer.
struct header_number {
    bool ok = false;
    std::uint64_t value = 0;
};

/// One field of an entry as written: absent, a string, an array of numbers, or anything else.
struct header_field {
    enum class kind { absent, string, array, other } k = kind::absent;
    std::string text;                    ///< kind::string
    std::vector<header_number> items;    ///< kind::array (a nested container is an item not ok)
};

/// A key of the root object: a tensor's entry, or __metadata__.
struct header_entry {
    std::string name;
    bool is_object = false;
    header_field dtype, shape, offsets;
    std::vector<std::pair<std::string, std::optional<std::string>>> metadata;  ///< nullopt: not a string
};

/// The keys of one JSON object, to refuse duplicates: a short list searched in place (an
/// entry has three keys), a hash set once it grows.
class key_set {
public:
    bool insert(const std::string& key) {
        if (!set_.empty()) return set_.insert(key).second;
        if (std::find(small_.begin(), small_.end(), key) != small_.end()) return false;
        small_.push_back(key);
        if (small_.size() > 8) {
            set_.insert(std::make_move_iterator(small_.begin()), std::make_move_iterator(small_.end()));
            small_.clear();
        }
        return true;
    }

private:
    std::vector<std::string> small_;
    std::unordered_set<std::string> set_;
};

class header_reader {
public:
    explicit header_reader(const std::string& file) : file_(file) {}

    std::vector<header_entry> take() { return std::move(entries_); }

    // nlohmann::json's SAX interface: return true to go on; errors are thrown.
    bool null() { return scalar(nullptr, nullptr); }
    bool boolean(bool) { return scalar(nullptr, nullptr); }
    bool number_integer(json::number_integer_t v) {
        header_number n{v >= 0, static_cast<std::uint64_t>(v)};
        return scalar(&n, nullptr);
    }
    bool number_unsigned(json::number_unsigned_t v) {
        header_number n{true, v};
        return scalar(&n, nullptr);
    }
    bool number_float(json::number_float_t, const json::string_t&) {
        header_number n{false, 0};
        return scalar(&n, nullptr);
    }
    bool string(json::string_t& s) { return scalar(nullptr, &s); }
    bool binary(json::binary_t&) { return scalar(nullptr, nullptr); }
    bool start_object(std::size_t) { return open(false); }
    bool start_array(std::size_t) { return open(true); }
    bool end_object() { return close(); }
    bool end_array() { return close(); }
    bool key(json::string_t& k) {
        level& l = stack_.back();
        if (!l.keys.insert(k))
            throw format_error(file_, stack_.size() == 1 ? tensor_field(k) : "header",
                               "duplicate key '" + detail::escape_text(k, 80) + "'");
        l.key = std::move(k);  // the lexer's buffer, refilled for the next token
        return true;
    }
    bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) {
        throw format_error(file_, "header", std::string("invalid JSON: ") + e.what());
    }

private:
    static constexpr std::size_t max_depth = 4;
    static constexpr std::size_t max_array_items = 1024;

    /// What a container is, from where it stands.
    enum class role { root, entry, metadata, numbers, other };

    struct level {
        bool is_array = false;
        role what = role::other;
        std::size_t items = 0;
        key_set keys;
        std::string key;                 ///< objects: the key whose value comes next
        header_field* field = nullptr;   ///< role::numbers: the field the numbers go to
    };

    void count_item() {
        if (!stack_.empty() && stack_.back().is_array && ++stack_.back().items > max_array_items)
            throw format_error(file_, "header",
                               "array of more than " + std::to_string(max_array_items) + " items");
    }

    /// The field of the current entry that the value of `key` fills, or nullptr.
    header_field* field_of(const std::string& key) {
        header_entry& e = entries_.back();
        if (key == "dtype") return &e.dtype;
        if (key == "shape") return &e.shape;
        if (key == "data_offsets") return &e.offsets;
        return nullptr;
    }

    bool open(bool is_array) {
        count_item();  // a container inside an array is one of its items
        if (stack_.size() >= max_depth) throw format_error(file_, "header", "JSON nested too deeply");
        role what = role::other;
        header_field* field = nullptr;
        if (stack_.empty()) {
            what = role::root;
        } else {
            level& parent = stack_.back();
            switch (parent.what) {
            case role::root:
                what = is_array ? role::other : parent.key == "__metadata__" ? role::metadata : role::entry;
                entries_.push_back({std::move(parent.key), !is_array, {}, {}, {}, {}});
                break;
            case role::entry:
                if (header_field* f = field_of(parent.key)) {
                    f->k = is_array ? header_field::kind::array : header_field::kind::other;
                    if (is_array) what = role::numbers, field = f;
                }
                break;
            case role::metadata:
                entries_.back().metadata.emplace_back(parent.key, std::nullopt);
                break;
            case role::numbers:
                parent.field->items.push_back({});  // a container is no number
                break;
            case role::other:
                break;
            }
        }
        stack_.push_back({is_array, what, 0, {}, {}, field});
        return true;
    }

    bool close() {
        stack_.pop_back();
        return true;
    }

    bool scalar(const header_number* n, json::string_t* s) {
        count_item();
        if (stack_.empty()) return true;  // a bare value; the caller checked the first byte is '{'
        level& l = stack_.back();
        switch (l.what) {
        case role::root:
            entries_.push_back({std::move(l.key), false, {}, {}, {}, {}});
            break;
        case role::entry:
            if (header_field* f = field_of(l.key)) {
                if (s) f->k = header_field::kind::string, f->text = std::move(*s);
                else f->k = header_field::kind::other;
            }
            break;
        case role::metadata:
            entries_.back().metadata.emplace_back(
                l.key, s ? std::optional<std::string>(std::move(*s)) : std::nullopt);
            break;
        case role::numbers:
            l.field->items.push_back(n ? *n : header_number{});
            break;
        case role::other:
            break;
        }
        return true;
    }

    const std::string& file_;
    std::vector<level> stack_;
    std::vector<header_entry> entries_;
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
    header_reader reader(file);
    try {
        json::sax_parse(header.begin(), header.end(), &reader);
    } catch (const json::exception& e) {  // the reader reports parse errors itself; this is a net
        throw format_error(file, "header", std::string("invalid JSON: ") + e.what());
    }
    std::vector<header_entry> entries = reader.take();
    // Checked in name order, so that of several bad entries the same one is named every time.
    std::sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
    info.tensors.reserve(entries.size());

    for (header_entry& e : entries) {
        const std::string& name = e.name;
        if (name == "__metadata__") {
            if (!e.is_object) throw format_error(file, "__metadata__", "not an object of strings");
            std::sort(e.metadata.begin(), e.metadata.end(),
                      [](const auto& a, const auto& b) { return a.first < b.first; });
            for (auto& [key, value] : e.metadata) {
                if (!value)
                    throw format_error(file, "__metadata__", "value of '" + key + "' is not a string");
                info.metadata.emplace(key, std::move(*value));
            }
            continue;
        }
        // Named only for a message: most headers have none to give.
        auto field = [&name] { return tensor_field(name); };
        using kind = header_field::kind;
        if (!e.is_object) throw format_error(file, field(), "entry is not an object");
        if (e.dtype.k == kind::absent || e.shape.k == kind::absent || e.offsets.k == kind::absent)
            throw format_error(file, field(), "needs dtype, shape and data_offsets");
        if (e.dtype.k != kind::string) throw format_error(file, field() + " dtype", "not a string");
        auto type = dtype_from_safetensors_name(e.dtype.text);
        if (!type) throw format_error(file, field() + " dtype", "unknown dtype '" + e.dtype.text + "'");
        safetensors_tensor_info t;
        t.name = name;
        t.type = *type;
        if (e.shape.k != kind::array) throw format_error(file, field() + " shape", "not an array");
        // Checked arithmetic: element count x item size must not wrap.
        std::uint64_t bytes = size_of(t.type);
        t.shape.reserve(e.shape.items.size());
        for (const header_number& d : e.shape.items) {
            if (!d.ok || d.value > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
                throw format_error(file, field() + " shape", "dimension is not a non-negative integer below 2**63");
            t.shape.push_back(static_cast<std::int64_t>(d.value));
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
        const auto& off = e.offsets.items;
        if (e.offsets.k != kind::array || off.size() != 2 || !off[0].ok || !off[1].ok)
            throw format_error(file, field() + " data_offsets",
                               "not a pair of non-negative integers");
        t.begin = off[0].value;
        t.end = off[1].value;
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
