// Checksum records: JSON in and out, chunk CRCs where the bytes are, and the check of a load.
#include "formats/checksum_record.hpp"

#include <algorithm>
#include <atomic>
#include <stdexcept>
#include <thread>

#include <simdjson.h>

#include "cuda/checksum_kernels.hpp"
#include "ferry/error.hpp"
#include "integrity/crc32c.hpp"

namespace ferry::formats {
namespace {

constexpr std::string_view field_name = "__metadata__/ferry.checksums";

[[noreturn]] void bad(const std::string& file, const std::string& reason) {
    throw format_error(file, std::string(field_name), reason);
}

std::uint32_t parse_hex8(std::string_view s, const std::string& file) {
    std::uint32_t v = 0;
    for (char c : s) {
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (d < 0) bad(file, "'" + std::string(s) + "' is not 8 lowercase hex digits");
        v = v << 4 | static_cast<std::uint32_t>(d);
    }
    return v;
}

}  // namespace

std::string crc_text(std::uint32_t crc) {
    char hex[8];
    integrity::crc32c_hex(crc, hex);
    return "crc32c:" + std::string(hex, 8);
}

// Written as text, entry by entry (names escaped as the safetensors header's are): an
// nlohmann::ordered_json object looks every key up before it adds it, which made a save of
// 100,000 tensors with checksums 2.7 s against 0.3 s without, on the CPU machine.
std::string to_json(const checksum_record& r) {
    char hex[8];
    integrity::crc32c_hex(r.header, hex);
    std::string out = "{\"v\":1,\"alg\":\"crc32c\",\"chunk\":" + std::to_string(r.chunk) + ",\"header\":\"";
    out.append(hex, 8);
    out += "\",\"tensors\":{";
    bool first = true;
    for (const auto& [name, crcs] : r.tensors) {
        if (!first) out += ',';
        first = false;
        append_json_string(out, name);
        out += ":\"";
        for (std::uint32_t c : crcs) {
            integrity::crc32c_hex(c, hex);
            out.append(hex, 8);
        }
        out += '"';
    }
    out += "}}";
    return out;
}

// Parsed by simdjson, as the safetensors header is: through nlohmann::json the records of a
// 100,000-tensor checkpoint were a quarter of its verified load on the CPU machine.
checksum_record parse_checksum_record(std::string_view text, const std::string& file) {
    simdjson::dom::parser parser;
    simdjson::dom::element root;
    if (parser.parse(text.data(), text.size()).get(root) != simdjson::SUCCESS || !root.is_object())
        bad(file, "not a JSON object");
    auto field = [&](const char* name) -> simdjson::dom::element {
        simdjson::dom::element e;
        if (root[name].get(e) != simdjson::SUCCESS) bad(file, std::string("no \"") + name + "\"");
        return e;
    };
    auto text_of = [](simdjson::dom::element e) { return simdjson::minify(e); };
    std::uint64_t version = 0;
    if (field("v").get(version) != simdjson::SUCCESS || version != 1)
        bad(file, "version " + text_of(field("v")) + " is not 1 (written by a newer ferry?)");
    std::string_view alg;
    if (field("alg").get(alg) != simdjson::SUCCESS || alg != "crc32c")
        bad(file, "algorithm " + text_of(field("alg")) + " is not \"crc32c\"");
    checksum_record r;
    std::uint64_t chunk = 0;
    if (field("chunk").get(chunk) != simdjson::SUCCESS || chunk < 4096 || chunk > (1ull << 40))
        bad(file, "chunk " + text_of(field("chunk")) + " is not a byte count in [4096, 2^40]");
    r.chunk = chunk;
    std::string_view header;
    if (field("header").get(header) != simdjson::SUCCESS || header.size() != 8) bad(file, "header is not 8 hex digits");
    r.header = parse_hex8(header, file);
    simdjson::dom::object tensors;
    if (field("tensors").get(tensors) != simdjson::SUCCESS) bad(file, "tensors is not an object");
    for (auto [name, value] : tensors) {
        std::string_view s;
        if (value.get(s) != simdjson::SUCCESS || s.size() % 8 != 0)
            bad(file, "tensor '" + std::string(name) + "': not a string of 8 hex digits per chunk");
        std::vector<std::uint32_t> crcs;
        crcs.reserve(s.size() / 8);
        for (std::size_t i = 0; i < s.size(); i += 8) crcs.push_back(parse_hex8(s.substr(i, 8), file));
        // A name given twice: the last one, as nlohmann::json took it.
        r.tensors.insert_or_assign(std::string(name), std::move(crcs));
    }
    return r;
}

std::uint32_t header_digest(const std::vector<safetensors_tensor_info>& tensors,
                            const std::map<std::string, std::string>& metadata) {
    std::vector<const safetensors_tensor_info*> sorted;
    for (const auto& t : tensors) sorted.push_back(&t);
    std::sort(sorted.begin(), sorted.end(), [](auto* a, auto* b) { return a->name < b->name; });
    std::string s;
    for (const auto* t : sorted) {
        s += t->name;
        s += '\0';
        s += safetensors_name(t->type).value_or("?");
        s += '\0';
        for (std::int64_t d : t->shape) s += std::to_string(d) + ",";
        s += '\0' + std::to_string(t->begin) + '\0' + std::to_string(t->end) + '\n';
    }
    for (const auto& [k, v] : metadata) {
        if (k == checksum_key) continue;
        s += k + '\0' + v + '\n';
    }
    return integrity::crc32c(s.data(), s.size());
}

std::vector<std::uint32_t> host_crcs(const std::vector<std::pair<const void*, std::uint64_t>>& spans,
                                     unsigned threads) {
    std::vector<std::uint32_t> out(spans.size(), 0);
    std::uint64_t total = 0;
    for (const auto& s : spans) total += s.second;
    unsigned n = threads ? threads : std::max(1u, std::thread::hardware_concurrency());
    // A thread costs ~50 us to start: worth it only for a few MiB each.
    n = static_cast<unsigned>(std::clamp<std::uint64_t>(total >> 22, 1, std::min<std::uint64_t>(n, spans.size())));
    std::atomic<std::size_t> next{0};
    auto work = [&] {
        for (std::size_t i; (i = next.fetch_add(1)) < spans.size();)
            out[i] = integrity::crc32c(spans[i].first, spans[i].second);
    };
    std::vector<std::thread> pool;
    for (unsigned k = 1; k < n; ++k) pool.emplace_back(work);
    work();
    for (auto& t : pool) t.join();
    return out;
}

queued_chunk_crcs::queued_chunk_crcs(const std::vector<byte_view>& views, std::uint64_t chunk, stream_t s)
    : out_(views.size()) {
    std::map<int, std::vector<kernels::crc_span>> device;
    std::map<int, std::vector<std::pair<std::size_t, std::size_t>>> device_at;
    for (std::size_t v = 0; v < views.size(); ++v) {
        const byte_view& bv = views[v];
        const std::size_t chunks = static_cast<std::size_t>((bv.bytes + chunk - 1) / chunk);
        out_[v].assign(chunks, 0);
        for (std::size_t k = 0; k < chunks; ++k) {
            const auto* p = static_cast<const unsigned char*>(bv.data) + k * chunk;
            std::uint64_t n = std::min(chunk, bv.bytes - k * chunk);
            if (bv.where.on_gpu()) {
                device[bv.where.device].push_back({p, n});
                device_at[bv.where.device].push_back({v, k});
            } else {
                host_.push_back({p, n});
                host_at_.push_back({v, k});
            }
        }
    }
    passes_.reserve(device.size());
    for (auto& [d, spans] : device) {
        passes_.emplace_back(spans, d, s);
        device_at_.push_back(std::move(device_at[d]));
    }
}

std::vector<std::vector<std::uint32_t>> queued_chunk_crcs::wait() {
    std::vector<std::uint32_t> crcs;
    if (!host_.empty()) crcs = host_crcs(host_);  // while the kernels run
    for (std::size_t i = 0; i < crcs.size(); ++i) out_[host_at_[i].first][host_at_[i].second] = crcs[i];
    for (std::size_t d = 0; d < passes_.size(); ++d) {
        crcs = passes_[d].wait();
        for (std::size_t i = 0; i < crcs.size(); ++i) out_[device_at_[d][i].first][device_at_[d][i].second] = crcs[i];
    }
    return std::move(out_);
}

std::vector<std::vector<std::uint32_t>> chunk_crcs(const std::vector<byte_view>& views, std::uint64_t chunk,
                                                   stream_t s) {
    return queued_chunk_crcs(views, chunk, s).wait();
}

}  // namespace ferry::formats

namespace ferry {

std::vector<std::vector<std::uint32_t>> crc32c_chunks(const std::vector<crc_input>& inputs, std::uint64_t chunk,
                                                      stream_t s) {
    if (chunk == 0) throw usage_error("crc32c_chunks: the chunk size is 0 bytes");
    std::vector<formats::byte_view> views;
    views.reserve(inputs.size());
    for (const crc_input& in : inputs) views.push_back({in.data, in.bytes, in.where});
    return formats::chunk_crcs(views, chunk, s);
}

}  // namespace ferry

namespace ferry::formats {

std::optional<checksum_record> find_record(const safetensors_info& info, const std::string& file) {
    auto it = info.metadata.find(std::string(checksum_key));
    if (it == info.metadata.end()) return std::nullopt;
    return parse_checksum_record(it->second, file);
}

void verify_loaded(const safetensors_info& info, const std::string& file, const std::vector<loaded_view>& views,
                   verify_mode mode, stream_t s) {
    if (mode == verify_mode::never) return;
    std::optional<checksum_record> rec = find_record(info, file);
    if (!rec) {
        if (mode == verify_mode::always)
            throw integrity_error(file, "", "no checksums recorded (written without them, or by another tool; "
                                            "verify=\"auto\" loads it unchecked, `ferry verify --record` adds a sidecar)");
        return;
    }
    if (std::uint32_t h = header_digest(info.tensors, info.metadata); h != rec->header)
        throw integrity_error(file, "", "the header (tensor names, dtypes, shapes, offsets or metadata) does not "
                                        "match its checksum", 0, info.data_offset, crc_text(rec->header), crc_text(h));
    std::vector<byte_view> bytes;
    for (const auto& v : views) {
        auto it = rec->tensors.find(v.tensor->name);
        const std::uint64_t n = v.tensor->end - v.tensor->begin;
        if (it == rec->tensors.end())
            throw integrity_error(file, v.tensor->name, "no checksum recorded for this tensor (the header changed?)");
        if (it->second.size() != (n + rec->chunk - 1) / rec->chunk)
            throw integrity_error(file, v.tensor->name, "the record has " + std::to_string(it->second.size()) +
                                                            " chunk checksums for " + std::to_string(n) + " bytes");
        bytes.push_back(v.bytes);
    }
    std::vector<std::vector<std::uint32_t>> got = chunk_crcs(bytes, rec->chunk, s);
    std::size_t bad_chunks = 0;
    std::optional<integrity_error> first;
    for (std::size_t i = 0; i < views.size(); ++i) {
        const auto& want = rec->tensors.find(views[i].tensor->name)->second;
        for (std::size_t k = 0; k < want.size(); ++k) {
            if (want[k] == got[i][k]) continue;
            ++bad_chunks;
            if (first) continue;
            const std::uint64_t b = info.data_offset + views[i].tensor->begin + k * rec->chunk;
            const std::uint64_t e = std::min(b + rec->chunk, info.data_offset + views[i].tensor->end);
            first.emplace(file, views[i].tensor->name, "checksum mismatch: the bytes read are not the bytes written",
                          b, e, crc_text(want[k]), crc_text(got[i][k]));
        }
    }
    if (!first) return;
    if (bad_chunks == 1) throw *first;
    throw integrity_error(first->file(), first->tensor(),
                          first->reason() + " (and " + std::to_string(bad_chunks - 1) + " more chunks)", first->begin(),
                          first->end(), first->expected(), first->actual());
}

checksum_record blank_checksum_record(const std::vector<safetensors_entry>& entries,
                                      const std::vector<std::uint64_t>& offsets,
                                      const std::map<std::string, std::string>& metadata) {
    checksum_record r;
    std::vector<safetensors_tensor_info> table;
    table.reserve(entries.size());
    for (std::size_t i = 0; i < entries.size(); ++i) {
        table.push_back({std::string(entries[i].name), entries[i].type, *entries[i].shape, offsets[i],
                         offsets[i] + entries[i].bytes});
        r.tensors.emplace(std::string(entries[i].name),
                          std::vector<std::uint32_t>(static_cast<std::size_t>((entries[i].bytes + r.chunk - 1) / r.chunk)));
    }
    r.header = header_digest(table, metadata);
    return r;
}

void fill_checksum_record(checksum_record& r, const std::vector<safetensors_entry>& entries,
                          const std::vector<array>& data) {
    std::vector<byte_view> views;
    views.reserve(entries.size());
    for (std::size_t i = 0; i < entries.size(); ++i) views.push_back({data[i].data(), data[i].nbytes(), data[i].where()});
    std::vector<std::vector<std::uint32_t>> crcs = chunk_crcs(views, r.chunk);
    for (std::size_t i = 0; i < entries.size(); ++i) {
        auto it = r.tensors.find(entries[i].name);
        if (it == r.tensors.end() || it->second.size() != crcs[i].size())
            throw std::logic_error("checksum record: tensor '" + std::string(entries[i].name) + "' is not the one laid out");
        it->second = std::move(crcs[i]);
    }
}

}  // namespace ferry::formats
