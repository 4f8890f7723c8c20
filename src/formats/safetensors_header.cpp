#include "formats/safetensors_header.hpp"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <limits>
#include <numeric>
#include <optional>
#include <unordered_set>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>
#include <simdjson.h>

#include "backend/location.hpp"
#include "escape_text.hpp"
#include "ferry/error.hpp"

namespace ferry::formats {
namespace {

std::string tensor_field(std::string_view name) {
    return "tensor '" + detail::escape_text(name, 80) + "'";
}

// The header is parsed by simdjson, which checks the whole text (UTF-8 included) at several
// GB/s into a tape, and the walk below keeps just what validation needs (names, dtype strings,
// the numbers of each shape and offset pair, string metadata). nlohmann::json's parse, even
// through its SAX interface, read about 50 MB/s: most of a checkpoint's open time (3 ms for 6
// shards of 819 tensors on the H200 machine, every load). The walk refuses duplicate keys,
// which a map would resolve to the last one and the reference refuses, and arrays of more than
// 1024 items; the parse refuses nesting deeper than four levels (root, entry, field, array):
// a valid header needs no more. While it runs the parse holds about four bytes per header byte
// (209 MB for a 52 MB header of metadata, CPU machine), all given back when it returns.

/// A number of a shape or of data_offsets: `ok` when it is a non-negative integer.
struct header_number {
    bool ok = false;
    std::uint64_t value = 0;
};

/// One field of an entry as written: absent, a string, an array of numbers, or anything else.
/// Text is a view into the parser's tape; numbers are items [first, first + count) of the
/// walk's one pool, so an entry costs no allocation of its own (100,000 tensors made 400,000
/// of them, a third of the open of such a checkpoint on the CPU machine).
struct header_field {
    enum class kind : std::uint8_t { absent, string, array, other } k = kind::absent;
    std::string_view text;   ///< kind::string
    std::uint32_t first = 0, count = 0;  ///< kind::array (a nested container is an item not ok)
};

/// A key of the root object: a tensor's entry, or __metadata__.
struct header_entry {
    std::string_view name;  ///< into the parser's tape
    bool is_object = false;
    header_field dtype, shape, offsets;
};

/// The keys of one JSON object, to refuse duplicates: a short list searched in place (an
/// entry has three keys), a hash set once it grows.
class key_set {
public:
    bool insert(std::string_view key) {
        if (!set_.empty()) return set_.insert(key).second;
        if (std::find(small_.begin(), small_.end(), key) != small_.end()) return false;
        small_.push_back(key);
        if (small_.size() > 8) {
            set_.insert(small_.begin(), small_.end());
            small_.clear();
        }
        return true;
    }

private:
    std::vector<std::string_view> small_;  // views into the parser's tape, which outlives the set
    std::unordered_set<std::string_view> set_;
};

constexpr std::size_t max_depth = 4;
constexpr std::size_t max_array_items = 1024;

using element = simdjson::dom::element;
using element_type = simdjson::dom::element_type;

/// The root's entries, views into the parser that made them: valid while it lives. The root's
/// own keys are checked for duplicates once sorted (a hash set of 12,500 names cost more than
/// the parse), nested objects' as they are walked.
struct header_entries {
    std::vector<header_entry> entries;
    std::vector<header_number> numbers;
    std::vector<std::pair<std::string_view, std::optional<std::string_view>>> metadata;  ///< nullopt: not a string
    std::size_t metadata_entries = 0;  ///< root keys named __metadata__ (more than one is a duplicate)
};

class header_walk {
public:
    explicit header_walk(const std::string& file) : file_(file) {}

    header_entries entries(element root) {
        header_entries out;
        out.entries.reserve(simdjson::dom::object(root).size());
        for (auto [key, value] : simdjson::dom::object(root)) {
            header_entry& e = out.entries.emplace_back();
            e.name = key;
            e.is_object = value.type() == element_type::OBJECT;
            if (!e.is_object) {
                check(value);
            } else if (e.name == "__metadata__") {
                if (out.metadata_entries++) continue;  // refused as a duplicate once sorted
                each_field(value, [&](std::string_view k, element v) {
                    if (v.type() == element_type::STRING) {
                        out.metadata.emplace_back(k, std::string_view(v));
                    } else {
                        check(v);
                        out.metadata.emplace_back(k, std::nullopt);
                    }
                });
            } else {
                each_field(value, [&](std::string_view k, element v) {
                    header_field* f = k == "dtype" ? &e.dtype : k == "shape" ? &e.shape : k == "data_offsets" ? &e.offsets : nullptr;
                    if (!f) check(v);
                    else if (v.type() == element_type::STRING) f->k = header_field::kind::string, f->text = std::string_view(v);
                    else if (v.type() == element_type::ARRAY) f->k = header_field::kind::array, numbers(v, *f, out.numbers);
                    else f->k = header_field::kind::other;
                });
            }
        }
        return out;
    }

private:
    // fn(key, value) for each field of a nested object, refusing a key given twice.
    template <class Fn>
    void each_field(element obj, const Fn& fn) {
        key_set keys;
        for (auto [k, v] : simdjson::dom::object(obj)) {
            if (!keys.insert(k)) throw format_error(file_, "header", "duplicate key '" + detail::escape_text(k, 80) + "'");
            fn(k, v);
        }
    }

    void count(std::size_t& n) const {
        if (++n > max_array_items)
            throw format_error(file_, "header", "array of more than " + std::to_string(max_array_items) + " items");
    }

    void numbers(element arr, header_field& f, std::vector<header_number>& pool) {
        std::size_t n = 0;
        f.first = static_cast<std::uint32_t>(pool.size());
        for (element v : simdjson::dom::array(arr)) {
            count(n);
            switch (v.type()) {
            case element_type::INT64: {
                std::int64_t x = std::int64_t(v);
                pool.push_back({x >= 0, static_cast<std::uint64_t>(x)});
                break;
            }
            case element_type::UINT64:
                pool.push_back({true, std::uint64_t(v)});
                break;
            default:
                check(v);
                pool.push_back({});
            }
        }
        f.count = static_cast<std::uint32_t>(n);
    }

    // A value whose content is not kept: its arrays and objects still follow the rules.
    void check(element v) {
        if (v.type() == element_type::ARRAY) {
            std::size_t n = 0;
            for (element x : simdjson::dom::array(v)) count(n), check(x);
        } else if (v.type() == element_type::OBJECT) {
            each_field(v, [&](std::string_view, element x) { check(x); });
        }
    }

    const std::string& file_;
};

/// Parses `header` into `parser` and walks it; the entries view the parser's tape.
header_entries read_entries(simdjson::dom::parser& parser, std::string_view header, const std::string& file) {
    // The document itself is one level more to simdjson than to the count above.
    if (parser.allocate(header.size(), max_depth + 1) != simdjson::SUCCESS) throw std::bad_alloc();
    element root;
    if (auto err = parser.parse(header.data(), header.size()).get(root)) {
        if (err == simdjson::DEPTH_ERROR) throw format_error(file, "header", "JSON nested too deeply");
        throw format_error(file, "header", std::string("invalid JSON: ") + simdjson::error_message(err));
    }
    if (root.type() != element_type::OBJECT) throw format_error(file, "header", "not a JSON object");
    header_entries out = header_walk(file).entries(root);
    // Checked in name order, so that of several bad entries the same one is named every time;
    // writers mostly give them sorted already.
    auto by_name = [](const header_entry& a, const header_entry& b) { return a.name < b.name; };
    if (!std::is_sorted(out.entries.begin(), out.entries.end(), by_name))
        std::sort(out.entries.begin(), out.entries.end(), by_name);
    auto twice = std::adjacent_find(out.entries.begin(), out.entries.end(),
                                    [](const header_entry& a, const header_entry& b) { return a.name == b.name; });
    if (twice != out.entries.end())
        throw format_error(file, tensor_field(twice->name), "duplicate key '" + detail::escape_text(twice->name, 80) + "'");
    return out;
}

/// One tensor's entry checked against the reference rules (dtype known, shape of non-negative
/// integers whose product times the item size fits 64 bits and equals the byte range).
safetensors_tensor_info checked_tensor(const header_entry& e, const std::vector<header_number>& pool,
                                       const std::string& file) {
    const std::string_view name = e.name;
    // Named only for a message: most headers have none to give.
    auto field = [name] { return tensor_field(name); };
    using kind = header_field::kind;
    if (!e.is_object) throw format_error(file, field(), "entry is not an object");
    if (e.dtype.k == kind::absent || e.shape.k == kind::absent || e.offsets.k == kind::absent)
        throw format_error(file, field(), "needs dtype, shape and data_offsets");
    if (e.dtype.k != kind::string) throw format_error(file, field() + " dtype", "not a string");
    auto type = dtype_from_safetensors_name(e.dtype.text);
    if (!type) throw format_error(file, field() + " dtype", "unknown dtype '" + std::string(e.dtype.text) + "'");
    safetensors_tensor_info t;
    t.name = name;
    t.type = *type;
    if (e.shape.k != kind::array) throw format_error(file, field() + " shape", "not an array");
    // Checked arithmetic: element count x item size must not wrap.
    std::uint64_t bytes = size_of(t.type);
    t.shape.reserve(e.shape.count);
    for (std::uint32_t i = 0; i < e.shape.count; ++i) {
        const header_number& d = pool[e.shape.first + i];
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
    const header_number* off = pool.data() + e.offsets.first;
    if (e.offsets.k != kind::array || e.offsets.count != 2 || !off[0].ok || !off[1].ok)
        throw format_error(file, field() + " data_offsets", "not a pair of non-negative integers");
    t.begin = off[0].value;
    t.end = off[1].value;
    if (t.end < t.begin) throw format_error(file, field() + " data_offsets", "end before begin");
    if (t.end - t.begin != bytes)
        throw format_error(file, field() + " data_offsets",
                           "byte range of " + std::to_string(t.end - t.begin) +
                               " bytes does not match shape x dtype (" + std::to_string(bytes) + " bytes)");
    return t;
}

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
    const bool remote = detail::location(f.path()).is_url();
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
    simdjson::dom::parser parser;
    header_entries h = read_entries(parser, header, file);
    info.tensors.reserve(h.entries.size());
    for (const header_entry& e : h.entries) {
        if (e.name != "__metadata__") {
            info.tensors.push_back(checked_tensor(e, h.numbers, file));
            continue;
        }
        if (!e.is_object) throw format_error(file, "__metadata__", "not an object of strings");
        std::sort(h.metadata.begin(), h.metadata.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
        for (const auto& [key, value] : h.metadata) {
            if (!value)
                throw format_error(file, "__metadata__", "value of '" + std::string(key) + "' is not a string");
            info.metadata.emplace(std::string(key), std::string(*value));
        }
    }

    // The tensors must tile the data buffer exactly: sorted by offsets, each starts where the
    // previous ended, from 0 to the end of the file.
    std::vector<const safetensors_tensor_info*> by_offset;
    by_offset.reserve(info.tensors.size());
    for (const auto& t : info.tensors) by_offset.push_back(&t);
    auto by_begin = [](auto* a, auto* b) { return a->begin != b->begin ? a->begin < b->begin : a->end < b->end; };
    if (!std::is_sorted(by_offset.begin(), by_offset.end(), by_begin))
        std::sort(by_offset.begin(), by_offset.end(), by_begin);
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
    return info;  // in name order: the entries were sorted
}

void append_json_string(std::string& out, std::string_view s) {
    out += '"';
    const bool plain = std::none_of(s.begin(), s.end(), [](char ch) {
        const auto c = static_cast<unsigned char>(ch);
        return c < 0x20 || c == '"' || c == '\\';
    });
    if (plain) {  // nearly every name
        out += s;
        out += '"';
        return;
    }
    for (char ch : s) {
        const auto c = static_cast<unsigned char>(ch);
        if (c == '"' || c == '\\') {
            out += '\\';
            out += ch;
        } else if (c < 0x20) {
            char esc[8];
            std::snprintf(esc, sizeof esc, "\\u%04x", c);
            out += esc;
        } else {
            out += ch;
        }
    }
    out += '"';
}

// The JSON is written as text, entry by entry: nlohmann::ordered_json made an object, three
// values and their strings per tensor, most of a save of 100,000 small tensors on the CPU
// machine. The metadata (a few strings) still goes through it.
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
    std::string text = "{";
    std::size_t guess = 2;
    for (const auto& e : entries) guess += e.name.size() + 64 + 21 * e.shape->size();
    text.reserve(guess);
    if (!metadata.empty()) {
        nlohmann::ordered_json m = nlohmann::ordered_json::object();
        for (const auto& [k, v] : metadata) m[k] = v;
        text += "\"__metadata__\":" + m.dump();
    }
    // The caller has refused duplicate names and '__metadata__' as a tensor's.
    std::uint64_t offset = 0;
    char number[24];
    auto append_number = [&](std::uint64_t x) { text.append(number, std::to_chars(number, number + sizeof number, x).ptr); };
    for (std::size_t i : order) {
        const auto& e = entries[i];
        auto name = safetensors_name(e.type);
        if (!name)
            throw usage_error("safetensors cannot store dtype " + std::string(to_string(e.type)) + " (tensor '" +
                              std::string(e.name) + "')");
        out.offsets[i] = offset;
        if (text.size() > 1) text += ',';
        append_json_string(text, e.name);
        text += ":{\"dtype\":\"";
        text += *name;
        text += "\",\"shape\":[";
        for (std::size_t d = 0; d < e.shape->size(); ++d) {
            if (d) text += ',';
            append_number(static_cast<std::uint64_t>((*e.shape)[d]));
        }
        text += "],\"data_offsets\":[";
        append_number(offset);
        text += ',';
        append_number(offset + e.bytes);
        text += "]}";
        offset += e.bytes;
    }
    text += '}';
    out.data_bytes = offset;
    // Pad with spaces so the data buffer starts 8-byte aligned, as the reference does.
    text.append((8 - text.size() % 8) % 8, ' ');
    std::uint64_t n = text.size();
    out.prefix.resize(8);
    for (int i = 0; i < 8; ++i) out.prefix[i] = static_cast<char>((n >> (8 * i)) & 0xff);
    out.prefix += text;
    return out;
}

}  // namespace ferry::formats
