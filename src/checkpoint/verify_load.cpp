// Verifying a checkpoint load. Most bytes are checked where they landed, so a hot load pays one
// hash pass over memory (a GPU launch for GPU tensors) and no extra read; only tensors whose
// destination does not hold the file's bytes (slices, dtype conversions) are read again, and
// then only the chunks their slice covers.
#include "checkpoint/verify_load.hpp"

#include <algorithm>
#include <optional>

#include "ferry/file.hpp"
#include "formats/checksum_record.hpp"
#include "integrity/crc32c.hpp"

namespace ferry::checkpoints {
namespace {

struct shard_check {
    std::optional<formats::checksum_record> record;
    std::string shown;
};

// Records already parsed, by shard (a load's verifier parses each as its first batch lands).
struct parsed_records {
    std::vector<char>* parsed;
    std::vector<std::optional<formats::checksum_record>>* records;
};

// Records of the shards the load used, header digests checked; those in `already` are taken
// from there, not parsed again.
std::vector<shard_check> shard_records(const checkpoint& c, const detailed_plan& d, verify_mode mode,
                                       const parsed_records* already = nullptr) {
    std::vector<shard_check> out(c.shards.size());
    std::vector<char> used(c.shards.size(), 0);
    for (const auto& g : d.tensors) used[g.file] = 1;
    for (std::size_t f = 0; f < c.shards.size(); ++f) {
        if (!used[f]) continue;
        const safetensors_info& h = c.shards[f].header;
        out[f].shown = redact_location(c.shards[f].path);
        if (already && (*already->parsed)[f]) {
            out[f].record = std::move((*already->records)[f]);
            (*already->parsed)[f] = 0;
        } else {
            out[f].record = formats::find_record(h, out[f].shown);
        }
        if (!out[f].record) {
            if (mode == verify_mode::always)
                throw integrity_error(out[f].shown, "", "no checksums recorded (written without them, or by another "
                                                        "tool; verify=\"auto\" loads it unchecked)");
            continue;
        }
        if (std::uint32_t got = formats::header_digest(h.tensors, h.metadata); got != out[f].record->header)
            throw integrity_error(out[f].shown, "", "the header does not match its checksum", 0, h.data_offset,
                                  formats::crc_text(out[f].record->header), formats::crc_text(got));
    }
    return out;
}

// A check of chunk k (CRCs `want`) of the tensor at absolute offset `at` with `bytes` bytes.
[[noreturn]] void mismatch(const shard_check& s, const std::string& name, std::uint64_t at, std::uint64_t bytes,
                           std::size_t k, std::uint32_t want, std::uint32_t got) {
    const std::uint64_t b = at + k * s.record->chunk;
    throw integrity_error(s.shown, name, "checksum mismatch: the bytes read are not the bytes written", b,
                          std::min(b + s.record->chunk, at + bytes), formats::crc_text(want), formats::crc_text(got));
}

const std::vector<std::uint32_t>& recorded(const shard_check& s, const checkpoint_tensor& t) {
    auto it = s.record->tensors.find(t.name);
    if (it == s.record->tensors.end())
        throw integrity_error(s.shown, t.name, "no checksum recorded for this tensor (the header changed?)");
    if (it->second.size() != (t.bytes + s.record->chunk - 1) / s.record->chunk)
        throw integrity_error(s.shown, t.name, "the record has " + std::to_string(it->second.size()) +
                                                   " chunk checksums for " + std::to_string(t.bytes) + " bytes");
    return it->second;
}

// The chunks [k0, k1) of a tensor read from its shard again and hashed on the host.
void check_from_file(const checkpoint& c, const shard_check& s, const checkpoint_tensor& t, std::uint64_t k0,
                     std::uint64_t k1) {
    const auto& want = recorded(s, t);
    file f(c.shards[t.shard].path, open_mode::read);
    const std::uint64_t chunk = s.record->chunk;
    std::vector<unsigned char> buf(static_cast<std::size_t>(std::min(chunk, t.bytes)));
    for (std::uint64_t k = k0; k < k1; ++k) {
        const std::uint64_t n = std::min(chunk, t.bytes - k * chunk);
        f.read(buf.data(), n, t.offset + k * chunk);
        std::uint32_t got = formats::host_crcs({{buf.data(), n}})[0];
        if (got != want[k]) mismatch(s, t.name, t.offset, t.bytes, k, want[k], got);
    }
}

// Whether tensor i's destination holds its bytes as stored (whole, unconverted).
bool in_place(const checkpoint& c, const detailed_plan& d, std::size_t i) {
    const geometry& g = d.tensors[i];
    const tensor_plan& p = d.plan.tensors[i];
    const checkpoint_tensor& t = c.tensors[p.tensor];
    return !p.convert && g.rows == 1 && g.offset == t.offset && g.seg_bytes == t.bytes;
}

void check_all(const checkpoint& c, const detailed_plan& d, const std::function<unsigned char*(std::size_t)>& dst_of,
               const checkpoint_load_options& o, const std::vector<char>* checked = nullptr,
               const parsed_records* already = nullptr) {
    std::vector<shard_check> shards = shard_records(c, d, o.verify, already);
    std::vector<formats::byte_view> views;
    std::vector<std::size_t> view_of;  // plan index of each view
    for (std::size_t i = 0; i < d.tensors.size(); ++i) {
        const geometry& g = d.tensors[i];
        const tensor_plan& p = d.plan.tensors[i];
        const checkpoint_tensor& t = c.tensors[p.tensor];
        const shard_check& s = shards[g.file];
        if (!s.record || t.bytes == 0 || (checked && (*checked)[i])) continue;
        recorded(s, t);
        if (in_place(c, d, i)) {
            views.push_back({dst_of(i), t.bytes, g.into ? g.into->where() : o.where});
            view_of.push_back(i);
            continue;
        }
        const std::uint64_t first = g.offset - t.offset;
        const std::uint64_t last = first + (g.rows - 1) * g.row_bytes + g.seg_bytes;  // exclusive
        if (last > first) check_from_file(c, s, t, first / s.record->chunk, (last - 1) / s.record->chunk + 1);
    }
    std::uint64_t chunk = formats::checksum_chunk;
    for (const auto& s : shards)
        if (s.record && s.record->chunk != chunk)
            chunk = 0;  // a shard written with another chunk size: hash per shard below
    if (chunk == 0) {
        for (std::size_t v = 0; v < views.size(); ++v) {
            const geometry& g = d.tensors[view_of[v]];
            const checkpoint_tensor& t = c.tensors[d.plan.tensors[view_of[v]].tensor];
            auto got = formats::chunk_crcs({views[v]}, shards[g.file].record->chunk, o.stream)[0];
            const auto& want = recorded(shards[g.file], t);
            for (std::size_t k = 0; k < want.size(); ++k)
                if (got[k] != want[k]) mismatch(shards[g.file], t.name, t.offset, t.bytes, k, want[k], got[k]);
        }
        return;
    }
    auto got = formats::chunk_crcs(views, chunk, o.stream);
    for (std::size_t v = 0; v < views.size(); ++v) {
        const geometry& g = d.tensors[view_of[v]];
        const checkpoint_tensor& t = c.tensors[d.plan.tensors[view_of[v]].tensor];
        const auto& want = recorded(shards[g.file], t);
        for (std::size_t k = 0; k < want.size(); ++k)
            if (got[v][k] != want[k]) mismatch(shards[g.file], t.name, t.offset, t.bytes, k, want[k], got[v][k]);
    }
}

// The error of a load that wrote into caller buffers names them.
[[noreturn]] void rethrow_naming_into(const detailed_plan& d, std::exception_ptr error) {
    try {
        std::rethrow_exception(error);
    } catch (const integrity_error& e) {
        std::vector<std::string> written;
        for (const auto& p : d.plan.tensors)
            if (p.into) written.push_back(p.name);
        if (written.empty()) throw;
        std::string list;
        for (std::size_t i = 0; i < written.size() && i < 20; ++i) list += (i ? ", '" : "'") + written[i] + "'";
        if (written.size() > 20) list += ", ...";
        throw integrity_error(e.file(), e.tensor(),
                              e.reason() + "; the load had already written " + std::to_string(written.size()) +
                                  " into= destinations: " + list,
                              e.begin(), e.end(), e.expected(), e.actual());
    }
}

}  // namespace

void load_verifier::landed(const std::vector<std::size_t>& tensors, const std::vector<std::uint64_t>& left,
                           const std::vector<char>& failed) noexcept {
    if (error_) return;
    try {
        // A batch reads from one shard: one record, one chunk size.
        std::vector<std::size_t> on_gpu;
        std::vector<formats::byte_view> gpu_views;
        const std::optional<formats::checksum_record>* rec = nullptr;
        std::string shown;
        for (std::size_t i : tensors) {
            if (checked_[i] || left[i] != 0 || failed[i] || !in_place(c_, d_, i)) continue;
            const geometry& g = d_.tensors[i];
            const checkpoint_tensor& t = c_.tensors[d_.plan.tensors[i].tensor];
            if (!parsed_[g.file]) {
                records_[g.file] = formats::find_record(c_.shards[g.file].header, redact_location(c_.shards[g.file].path));
                parsed_[g.file] = 1;
            }
            if (!rec || rec != &records_[g.file]) {
                if (rec && !on_gpu.empty()) break;  // another shard: finish() checks the rest
                rec = &records_[g.file];
                shown = redact_location(c_.shards[g.file].path);
            }
            if (!*rec || t.bytes == 0) continue;  // finish() decides what a shard without a record means
            auto it = (*rec)->tensors.find(t.name);
            if (it == (*rec)->tensors.end() || it->second.size() != (t.bytes + (*rec)->chunk - 1) / (*rec)->chunk) continue;
            const placement where = g.into ? g.into->where() : o_.where;
            if (where.on_gpu()) {
                on_gpu.push_back(i);
                gpu_views.push_back({dst_of_(i), t.bytes, where});
                continue;
            }
            // On this thread, chunk by chunk: the engine's workers are still reading the next
            // batches, and a small tensor is one chunk.
            const unsigned char* at = dst_of_(i);
            for (std::size_t k = 0; k < it->second.size(); ++k) {
                const std::uint64_t from = k * (*rec)->chunk;
                const std::uint32_t got = integrity::crc32c(at + from, std::min((*rec)->chunk, t.bytes - from));
                if (got != it->second[k])
                    mismatch(shard_check{*rec, shown}, t.name, t.offset, t.bytes, k, it->second[k], got);
            }
            checked_[i] = 1;
        }
        if (on_gpu.empty()) return;
        // GPU tensors of the batch in one launch, queued: it runs while the next batches are
        // read, and finish() collects it. Only the last batch's hash is left for the end.
        for (std::size_t i : on_gpu) checked_[i] = 1;
        queued_.push_back({formats::queued_chunk_crcs(gpu_views, (*rec)->chunk, o_.stream), std::move(on_gpu), rec,
                           std::move(shown)});
    } catch (...) {
        error_ = std::current_exception();
    }
}

void load_verifier::finish() {
    try {
        if (error_) std::rethrow_exception(error_);
        for (auto& q : queued_) {
            std::vector<std::vector<std::uint32_t>> got = q.crcs.wait();
            for (std::size_t v = 0; v < q.tensors.size(); ++v) {
                const checkpoint_tensor& t = c_.tensors[d_.plan.tensors[q.tensors[v]].tensor];
                const auto& want = (*q.record)->tensors.find(t.name)->second;
                for (std::size_t k = 0; k < want.size(); ++k)
                    if (got[v][k] != want[k])
                        mismatch(shard_check{*q.record, q.shown}, t.name, t.offset, t.bytes, k, want[k], got[v][k]);
            }
        }
        const parsed_records already{&parsed_, &records_};
        check_all(c_, d_, dst_of_, o_, &checked_, &already);
    } catch (...) {
        rethrow_naming_into(d_, std::current_exception());
    }
}

}  // namespace ferry::checkpoints
