// safetensors load and save. The path of the payload: the header is read and validated on the
// CPU; the byte ranges of the wanted tensors are merged, and each merged range is one
// file::read_async straight into one allocation at the destination (the engine splits large
// ranges across its threads); all are in flight at once. Tensors are views into it.
#include "ferry/safetensors.hpp"

#include <algorithm>
#include <exception>
#include <future>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <unordered_set>

#include "array/host_kernels.hpp"
#include "escape_text.hpp"
#include "cuda/deserialize_kernels.hpp"
#include "ferry/convert.hpp"
#include "ferry/error.hpp"
#include "ferry/file.hpp"
#include "formats/atomic_write.hpp"
#include "formats/checksum_record.hpp"
#include "formats/deserialize.hpp"
#include "formats/safetensors_header.hpp"

namespace ferry {
namespace {

// Ranges closer than this are read as one, gap included: one larger read beats two small ones,
// and the gap costs only that much memory.
constexpr std::uint64_t merge_gap = 1 << 20;
// Each merged range starts in the allocation at the same offset modulo this as in the data
// buffer, so tensors keep the alignment the writer gave them.
constexpr std::uint64_t placement_alignment = 256;

safetensors_info read_info(const file& f) {
    return formats::read_safetensors_header(f, f.size(), redact_location(f.path()));
}

struct merged_range {
    std::uint64_t begin = 0;  // in the data buffer
    std::uint64_t end = 0;
    std::uint64_t at = 0;     // in the allocation
};

void wait_all(std::vector<std::future<std::size_t>>& pending) {
    // Every read must finish before the buffer can be released, even when one failed.
    std::exception_ptr first;
    for (auto& p : pending) {
        try {
            p.get();
        } catch (...) {
            if (!first) first = std::current_exception();
        }
    }
    if (first) std::rethrow_exception(first);
}

// Starts requests with `issue`, then waits for all of them. If starting one throws, those
// already started are waited for (their errors dropped) before the first error propagates.
template <class Issue>
void issue_and_wait(Issue&& issue) {
    std::vector<std::future<std::size_t>> pending;
    try {
        issue(pending);
    } catch (...) {
        try {
            wait_all(pending);
        } catch (...) {
        }
        throw;
    }
    wait_all(pending);
}

}  // namespace

safetensors_info read_safetensors_info(const std::string& path) {
    file f(path, open_mode::read);
    return read_info(f);
}

std::vector<named_array> load_safetensors(const std::string& path, const load_options& options,
                                          const std::vector<std::string>& names,
                                          safetensors_info* header) {
    file f(path, open_mode::read);
    safetensors_info info = read_info(f);

    std::vector<const safetensors_tensor_info*> wanted;
    if (names.empty()) {
        for (const auto& t : info.tensors) wanted.push_back(&t);
    } else {
        std::set<std::string> unique(names.begin(), names.end());
        for (const auto& name : unique) {
            auto it = std::lower_bound(info.tensors.begin(), info.tensors.end(), name,
                                       [](const auto& t, const std::string& n) { return t.name < n; });
            if (it == info.tensors.end() || it->name != name)
                throw usage_error(path + ": no tensor named '" + name + "'");
            wanted.push_back(&*it);
        }
    }

    // A conversion that cannot be done is refused before anything is read, not skipped.
    for (const auto* t : wanted)
        formats::check_conversion(t->type, options, path + ": tensor '" + t->name + "'");

    // Merge the byte ranges in file order.
    std::vector<const safetensors_tensor_info*> by_offset = wanted;
    std::sort(by_offset.begin(), by_offset.end(),
              [](auto* a, auto* b) { return a->begin < b->begin; });
    std::vector<merged_range> ranges;
    std::vector<std::size_t> range_of(by_offset.size());
    for (std::size_t i = 0; i < by_offset.size(); ++i) {
        const auto* t = by_offset[i];
        if (ranges.empty() || t->begin > ranges.back().end + merge_gap)
            ranges.push_back({t->begin, t->end, 0});
        else
            ranges.back().end = std::max(ranges.back().end, t->end);
        range_of[i] = ranges.size() - 1;
    }
    std::uint64_t total = 0;
    for (auto& r : ranges) {
        std::uint64_t want = r.begin % placement_alignment;
        total += (want + placement_alignment - total % placement_alignment) % placement_alignment;
        r.at = total;
        total += r.end - r.begin;
    }
    array storage(dtype::uint8, {static_cast<std::int64_t>(total)}, options.where);
    auto* base = static_cast<unsigned char*>(storage.data());

    issue_and_wait([&](std::vector<std::future<std::size_t>>& pending) {
        for (const auto& r : ranges)
            if (r.end > r.begin)
                pending.push_back(f.read_async(base + r.at, r.end - r.begin, info.data_offset + r.begin));
    });
    if (options.verify != verify_mode::never) {  // the bytes as read, before any conversion
        std::vector<formats::loaded_view> views;
        for (std::size_t i = 0; i < by_offset.size(); ++i) {
            const merged_range& r = ranges[range_of[i]];
            views.push_back({by_offset[i], {base + r.at + (by_offset[i]->begin - r.begin),
                                            by_offset[i]->end - by_offset[i]->begin, options.where}});
        }
        formats::verify_loaded(info, redact_location(f.path()), views, options.verify, options.stream);
    }

    std::vector<named_array> out;
    out.reserve(wanted.size());
    for (std::size_t i = 0; i < by_offset.size(); ++i) {
        const auto* t = by_offset[i];
        const merged_range& r = ranges[range_of[i]];
        void* p = base + r.at + (t->begin - r.begin);
        out.push_back({t->name, array(storage.owner(), p, t->type, t->shape, options.where,
                                      storage_order::c, byte_order::little)});
    }

    // safetensors is little-endian: on a little-endian machine only `as` has work to do.
    // Converted tensors go to one second allocation, converted on one stream, synchronized once.
    std::uint64_t converted_bytes = 0;
    std::vector<std::uint64_t> converted_at(out.size(), UINT64_MAX);
    for (std::size_t i = 0; i < out.size(); ++i) {
        const array& a = out[i].value;
        if (options.as && a.type() != *options.as && can_astype(a.type(), *options.as)) {
            converted_bytes = (converted_bytes + placement_alignment - 1) / placement_alignment *
                              placement_alignment;
            converted_at[i] = converted_bytes;
            converted_bytes += a.size() * size_of(*options.as);
        }
    }
    if (converted_bytes > 0) {
        array converted(dtype::uint8, {static_cast<std::int64_t>(converted_bytes)}, options.where);
        auto* cbase = static_cast<unsigned char*>(converted.data());
        for (std::size_t i = 0; i < out.size(); ++i) {
            if (converted_at[i] == UINT64_MAX) continue;
            array& a = out[i].value;
            array src = to_native(a, options.stream);
            void* dst = cbase + converted_at[i];
            if (options.where.on_gpu())
                kernels::convert(src.data(), src.type(), dst, *options.as, src.size(),
                                 options.where.device, options.stream);
            else
                host_kernels::convert(src.data(), src.type(), dst, *options.as, src.size());
            a = array(converted.owner(), dst, *options.as, a.shape(), options.where);
        }
        if (options.where.on_gpu()) kernels::synchronize(options.stream, options.where.device);
    }
    for (auto& na : out) {
        if (!options.keep_byte_order && !na.value.is_native())
            na.value = to_native(na.value, options.stream);  // a copy: the storage is shared
    }
    std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
    if (header) *header = std::move(info);
    return out;
}

void save_safetensors(const std::string& path, const std::vector<named_array>& arrays,
                      const std::map<std::string, std::string>& metadata, bool checksums) {
    formats::save_safetensors_part(path, arrays, metadata, checksums);
}

}  // namespace ferry

namespace ferry::formats {

// Per tensor: a name check, a view and a write piece, nothing copied (the shard of a checkpoint
// of 100,000 small tensors is made of them).
void save_safetensors_part(const std::string& path, std::span<const named_array> arrays,
                           const std::map<std::string, std::string>& given_metadata, bool checksums) {
    std::map<std::string, std::string> metadata = given_metadata;
    metadata.erase(std::string(formats::checksum_key));  // a copied record describes another file
    std::unordered_set<std::string_view> seen;
    seen.reserve(arrays.size());
    std::vector<formats::safetensors_entry> entries;
    std::vector<array> data;
    entries.reserve(arrays.size());
    data.reserve(arrays.size());
    // The header is JSON, which holds UTF-8 text only: a name of other bytes (a file's stem,
    // os.fsdecode's surrogates encoded) is refused here, naming it, before anything is written.
    for (const auto& [key, value] : metadata) {
        if (!detail::is_utf8(key) || !detail::is_utf8(value))
            throw format_error(path, "metadata", "'" + key + "': '" + value +
                                                     "' is not UTF-8 text (a safetensors header is UTF-8 JSON)");
    }
    for (const auto& na : arrays) {
        if (!detail::is_utf8(na.name))
            throw format_error(path, "tensor name",
                               "'" + na.name + "' is not UTF-8 text (a safetensors header is UTF-8 JSON)");
        if (na.name == "__metadata__")
            throw usage_error("safetensors: '__metadata__' is reserved and cannot name a tensor");
        if (!seen.insert(na.name).second)
            throw usage_error("safetensors: duplicate tensor name '" + na.name + "'");
        if (!safetensors_name(na.value.type()))
            throw usage_error("safetensors cannot store dtype " +
                              std::string(to_string(na.value.type())) + " (tensor '" + na.name + "')");
        array a = to_c_order(na.value);
        if (a.endian() != byte_order::little && swap_unit_of(a.type()) > 1)
            a = to_native(a);  // native is little-endian on every machine ferry builds for
        data.push_back(std::move(a));
    }
    for (std::size_t i = 0; i < data.size(); ++i)
        entries.push_back({arrays[i].name, data[i].type(), &data[i].shape(), data[i].nbytes()});
    formats::safetensors_layout layout = formats::layout_safetensors(entries, metadata);
    std::optional<formats::checksum_record> record;
    if (checksums) {
        // The offsets do not depend on the header's length, and the record's length does not
        // depend on the checksums: the layout is final before anything is hashed.
        record = formats::blank_checksum_record(entries, layout.offsets, metadata);
        metadata.emplace(formats::checksum_key, formats::to_json(*record));
        layout = formats::layout_safetensors(entries, metadata);
    }
    std::vector<formats::write_piece> pieces;
    pieces.reserve(data.size() + 1);
    for (std::size_t i = 0; i < data.size(); ++i)
        pieces.push_back({data[i].data(), data[i].nbytes(), layout.prefix.size() + layout.offsets[i]});
    formats::save_atomically(path, [&](formats::atomic_write& out) {
        if (!record) {
            pieces.insert(pieces.begin(), {layout.prefix.data(), layout.prefix.size(), 0});
            out.write(pieces);
            return;
        }
        // A local file gets its data first and its header last, so the hash runs while the
        // data's writeback goes to the disk (and, for GPU tensors, beside the staging copies)
        // instead of before the first byte is written. An upload goes in file order.
        const bool header_last = !out.remote();
        if (header_last) out.write(pieces);
        formats::fill_checksum_record(*record, entries, data);
        metadata[std::string(formats::checksum_key)] = formats::to_json(*record);
        formats::safetensors_layout final_layout = formats::layout_safetensors(entries, metadata);
        if (final_layout.prefix.size() != layout.prefix.size())
            throw std::logic_error("safetensors: the header's length changed once the checksums were filled in");
        if (header_last) {
            out.write({{final_layout.prefix.data(), final_layout.prefix.size(), 0}});
        } else {
            pieces.insert(pieces.begin(), {final_layout.prefix.data(), final_layout.prefix.size(), 0});
            out.write(pieces);
        }
    });
}

}  // namespace ferry::formats
