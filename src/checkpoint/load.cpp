// Executing a checkpoint plan. A load of every tensor whole, as stored, reads each shard's
// tensors as one range, submitted before the plan is even made (whole_shards), and through
// open_and_load_checkpoint before the open has merged the shards' tensors and checked them
// against the index (early_reads). Otherwise all
// reads that land in place (whole tensors and dim-0 slices, host row segments) are submitted
// first as one batch over every shard, coalesced where both the file ranges and the
// destinations touch. Tensors that need a temporary (span + gather,
// GPU row segments, dtype conversion, and small whole tensors bound for a caller's scattered
// host buffers, read together where they adjoin in the file) then flow through two slots of
// temporaries held under the process-wide budget: the reads of one slot overlap the gather and
// conversion of the other, and the stream is synchronized once per slot reuse, never per tensor.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <exception>
#include <functional>
#include <future>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>

#include "array/host_kernels.hpp"
#include "checkpoint/memory_budget.hpp"
#include "checkpoint/open.hpp"
#include "checkpoint/plan.hpp"
#include "checkpoint/range_reader.hpp"
#include "checkpoint/verify_load.hpp"
#include "cuda/deserialize_kernels.hpp"
#include "cuda/strided_copy.hpp"
#include "ferry/checkpoint.hpp"
#include "ferry/error.hpp"
#include "ferry/file.hpp"
#include "stop.hpp"

namespace ferry {
namespace {

using namespace checkpoints;
using clock_type = std::chrono::steady_clock;

// Tensors keep the alignment modulo this that the writer gave them in the file.
constexpr std::uint64_t placement_alignment = 256;

std::uint64_t align_like(std::uint64_t at, std::uint64_t like) {
    std::uint64_t want = like % placement_alignment;
    return at + (want + placement_alignment - at % placement_alignment) % placement_alignment;
}

// The block of the fresh tensors, from the caller's allocator when there is one: checked
// before any byte lands in it.
array make_block(std::uint64_t bytes, const checkpoint_load_options& o) {
    if (!o.allocate) return array(dtype::uint8, {static_cast<std::int64_t>(bytes)}, o.where);
    array b = o.allocate(bytes, o.where);
    const placement w = b.where();
    if (b.read_only()) throw usage_error("load_checkpoint: the allocator returned read-only memory");
    if (b.nbytes() < bytes || b.data() == nullptr)
        throw usage_error("load_checkpoint: the allocator returned " + std::to_string(b.nbytes()) + " bytes, " +
                          std::to_string(bytes) + " asked");
    if (w.kind != o.where.kind || (o.where.on_gpu() && w.device != o.where.device))
        throw usage_error("load_checkpoint: the allocator returned " + to_string(w) + " memory, " +
                          to_string(o.where) + " asked");
    return b;
}

// Largest slot of a load whose temporaries all stay in host memory (see size_slots).
constexpr std::uint64_t host_slot_bytes = 4ull << 20;

struct piece {
    std::size_t t = 0;  // index into plan.tensors
    std::uint64_t r0 = 0, r1 = 0;
    std::uint64_t host = 0, dev = 0;  // offsets in the slot
};

// Pinning pages is slow (tens of milliseconds for a 128 MiB arena), so the pinned staging of
// the last GPU load is kept for the next one. Never freed: at process exit CUDA may already be
// unloading, and the system takes the memory back anyway.
struct pinned_cache {
    std::mutex m;
    array arena;
};
pinned_cache& the_pinned_cache() {
    static auto* c = new pinned_cache;
    return *c;
}

array take_staging(std::uint64_t bytes, bool pinned) {
    if (pinned) {
        pinned_cache& c = the_pinned_cache();
        std::lock_guard lock(c.m);
        if (c.arena.nbytes() >= bytes) return std::exchange(c.arena, array());
    }
    return array(dtype::uint8, {static_cast<std::int64_t>(std::max<std::uint64_t>(1, bytes))},
                 pinned ? placement::pinned() : placement::host());
}

void return_staging(array a, bool pinned) noexcept {
    if (!pinned) return;
    pinned_cache& c = the_pinned_cache();
    std::lock_guard lock(c.m);
    if (a.nbytes() > c.arena.nbytes()) std::swap(c.arena, a);
}

struct staging_owner {
    array a;
    bool pinned = false;
    ~staging_owner() { return_staging(std::move(a), pinned); }
};

std::string describe(const std::exception_ptr& e) {
    try {
        std::rethrow_exception(e);
    } catch (const std::exception& x) {
        return x.what();
    } catch (...) {
        return "unknown error";
    }
}

}  // namespace

namespace {

std::uint64_t up256(std::uint64_t x) { return (x + 255) / 256 * 256; }

/// Where each fresh tensor lands in the one block of the load (`at`, an offset; tensors read
/// into a caller's destination have none): tensors read in place keep file order, so a run of
/// adjacent tensors of one shard is one range in the block and one read. A load of every
/// tensor whole lays the block out by shard instead, from the headers alone (whole_shards).
struct block_layout {
    std::vector<std::uint64_t> at;
    array block;
};

block_layout lay_out_block(const std::vector<geometry>& geo, const checkpoint_load_options& o) {
    const std::size_t n = geo.size();
    block_layout b;
    b.at.assign(n, 0);
    std::vector<std::size_t> order;
    for (std::size_t i = 0; i < n; ++i)
        if (!geo[i].into) order.push_back(i);
    auto in_file_order = [&](std::size_t x, std::size_t y) {
        bool sx = geo[x].staged, sy = geo[y].staged;
        if (sx != sy) return sy;
        return std::tie(geo[x].file, geo[x].offset) < std::tie(geo[y].file, geo[y].offset);
    };
    // Plans in name order are often in file order too (writers place tensors by name).
    if (!std::is_sorted(order.begin(), order.end(), in_file_order))
        std::stable_sort(order.begin(), order.end(), in_file_order);
    std::uint64_t total = 0;
    std::size_t prev = SIZE_MAX;
    for (std::size_t i : order) {
        const geometry& g = geo[i];
        bool in_place_run = !g.staged && g.rows == 1 && prev != SIZE_MAX && geo[prev].file == g.file &&
                            geo[prev].offset + geo[prev].seg_bytes == g.offset;
        b.at[i] = in_place_run ? total : align_like(total, g.staged ? 0 : g.offset);
        total = b.at[i] + g.rows * g.out_seg_bytes;
        prev = (!g.staged && g.rows == 1) ? i : SIZE_MAX;
    }
    if (!order.empty()) b.block = make_block(std::max<std::uint64_t>(total, 1), o);
    return b;
}

/// The in-place reads of a load (whole tensors, slices, row segments and spans of tensors that
/// need no conversion): gathers of the I/O scheduler, plain ranges merged where file ranges and
/// destinations are both contiguous, cut into batches of one shard and about batch_bytes, each
/// with the tensors it serves and the bytes it reads. Batches are submitted at once and awaited
/// in order, so that progress moves and an I/O error names the tensors of its batch only (the
/// lanes carry one batch right behind the other).
struct direct_batches {
    std::vector<std::vector<gather_request>> requests;
    std::vector<std::vector<std::size_t>> tensors;
    std::vector<std::uint64_t> bytes;
};

template <typename DstOf>
direct_batches batch_direct_reads(const std::vector<tensor_plan>& plans, const std::vector<geometry>& geo,
                                  DstOf dst_of) {
    struct direct_req {
        gather_request g;
        std::size_t t;
    };
    std::vector<direct_req> direct;
    direct.reserve(geo.size());
    for (std::size_t i = 0; i < geo.size(); ++i) {
        const geometry& g = geo[i];
        if (g.staged || g.seg_bytes == 0) continue;
        unsigned char* dst = dst_of(i);
        if (g.rows == 1) direct.push_back({{g.file, g.offset, 1, g.seg_bytes, g.seg_bytes, dst, false}, i});
        else
            direct.push_back({{g.file, g.offset, g.rows, g.row_bytes, g.seg_bytes, dst, plans[i].route == read_route::span}, i});
    }
    auto by_place = [](const auto& a, const auto& b) { return std::tie(a.g.file, a.g.offset) < std::tie(b.g.file, b.g.offset); };
    if (!std::is_sorted(direct.begin(), direct.end(), by_place)) std::sort(direct.begin(), direct.end(), by_place);
    std::vector<gather_request> merged;
    std::vector<std::vector<std::size_t>> merged_tensors;
    for (const auto& dr : direct) {
        if (!merged.empty() && dr.g.rows == 1) {
            gather_request& m = merged.back();
            if (m.rows == 1 && m.file == dr.g.file && m.offset + m.width == dr.g.offset &&
                static_cast<unsigned char*>(m.dst) + m.width == dr.g.dst) {
                m.width += dr.g.width;
                m.pitch = m.width;
                if (merged_tensors.back().back() != dr.t) merged_tensors.back().push_back(dr.t);
                continue;
            }
        }
        merged.push_back(dr.g);
        merged_tensors.push_back({dr.t});
    }
    constexpr std::uint64_t batch_bytes = 512ull << 20;
    direct_batches out;
    std::uint64_t in_batch = batch_bytes;
    for (std::size_t k = 0; k < merged.size(); ++k) {
        if (in_batch >= batch_bytes || (k > 0 && merged[k].file != merged[k - 1].file)) {
            out.requests.emplace_back();
            out.tensors.emplace_back();
            out.bytes.push_back(0);
            in_batch = 0;
        }
        out.requests.back().push_back(merged[k]);
        for (std::size_t t : merged_tensors[k]) out.tensors.back().push_back(t);
        out.bytes.back() += merged[k].bytes_read();
        in_batch += merged[k].bytes_read();
    }
    return out;
}

/// A load of every tensor, whole and as stored, into the fresh block (no selection, slice,
/// conversion or destination of the caller's): each shard's tensors are one range of the file
/// landing as one range of the block, which the shards' headers alone decide. So those reads
/// start before the plan is made and the tensors are wrapped, instead of after (on an H100 the
/// plan of 50,000 tensors took 25 ms, a quarter of the reads it held back). `usable` is false
/// for any other load, or where a shard's tensors leave gaps in the file above slack_bytes and
/// 1/64 of its bytes (read whole, the gaps would be read for nothing).
struct whole_shards {
    struct region {
        std::uint64_t lo = 0, hi = 0;  ///< file range of the shard's tensors
        std::uint64_t at = 0;          ///< its place in the block
    };
    bool usable = false;
    std::vector<region> regions;  ///< per shard; lo == hi where it has no byte to read
    std::uint64_t total = 0;      ///< bytes of the block

    /// Whether the options ask for every tensor, whole and as stored.
    static bool whole_load(const checkpoint_load_options& o) {
        return o.select.how == tensor_selection::kind::all && o.into.empty() && !o.only_into && o.slices.empty() &&
               o.slice_rules.empty() && !o.as;
    }

    static whole_shards of(const checkpoint& c, const checkpoint_load_options& o) {
        if (!whole_load(o) || c.tensors.empty()) return {};
        return of_tensors(c.shards.size(), [&](const auto& add) {
            for (const auto& t : c.tensors) add(t.shard, t.offset, t.bytes);
        });
    }

    /// The same from the shards' headers alone, before the open has merged their tensors.
    static whole_shards of(const std::vector<checkpoint_shard>& shards, const checkpoint_load_options& o) {
        std::size_t tensors = 0;
        for (const auto& s : shards) tensors += s.header.tensors.size();
        if (!whole_load(o) || tensors == 0) return {};
        return of_tensors(shards.size(), [&](const auto& add) {
            for (std::size_t s = 0; s < shards.size(); ++s)
                for (const auto& t : shards[s].header.tensors)
                    add(s, shards[s].header.data_offset + t.begin, t.end - t.begin);
        });
    }

    /// Whether every shard's range of `w` lies within this one's (reads of these serve w's
    /// tensors, placed by this layout).
    bool covers(const whole_shards& w) const {
        if (!usable || !w.usable || regions.size() != w.regions.size()) return false;
        for (std::size_t s = 0; s < regions.size(); ++s) {
            const region &mine = regions[s], &theirs = w.regions[s];
            if (theirs.hi != theirs.lo && (theirs.lo < mine.lo || theirs.hi > mine.hi)) return false;
        }
        return true;
    }

    /// Each shard's bytes after its header, [data_offset, file size), laid out as of_tensors()
    /// lays out tensors' ranges: what a shard's header alone (its first 8 bytes) tells.
    static whole_shards of_data(const std::vector<std::uint64_t>& data_offsets, const std::vector<std::uint64_t>& sizes) {
        whole_shards w;
        w.regions.resize(sizes.size());
        for (std::size_t s = 0; s < sizes.size(); ++s) {
            region& r = w.regions[s];
            r.lo = data_offsets[s];
            r.hi = sizes[s];
            r.at = align_like(w.total, r.lo);
            w.total = r.at + (r.hi - r.lo);
        }
        w.usable = true;
        return w;
    }

    /// The regions of tensors that each(add) gives as add(shard, file offset, bytes).
    template <typename Each>
    static whole_shards of_tensors(std::size_t shards, const Each& each) {
        whole_shards w;
        w.regions.assign(shards, {UINT64_MAX, 0, 0});
        std::vector<std::uint64_t> covered(shards, 0);
        each([&](std::size_t shard, std::uint64_t offset, std::uint64_t bytes) {
            if (bytes == 0) return;
            region& r = w.regions[shard];
            r.lo = std::min(r.lo, offset);
            r.hi = std::max(r.hi, offset + bytes);
            covered[shard] += bytes;
        });
        for (std::size_t s = 0; s < shards; ++s) {
            region& r = w.regions[s];
            if (r.lo == UINT64_MAX) r.lo = r.hi = 0;
            const std::uint64_t span = r.hi - r.lo;
            if (span > covered[s] + std::max<std::uint64_t>(slack_bytes, covered[s] / 64)) return {};
            r.at = align_like(w.total, r.lo);
            w.total = r.at + span;
        }
        w.usable = true;
        return w;
    }

    /// The place in the block of each planned tensor (an empty one at its shard's place).
    std::vector<std::uint64_t> places(const std::vector<geometry>& geo) const {
        std::vector<std::uint64_t> at(geo.size());
        for (std::size_t i = 0; i < geo.size(); ++i) {
            const region& r = regions[geo[i].file];
            at[i] = r.at + (geo[i].seg_bytes == 0 ? 0 : geo[i].offset - r.lo);
        }
        return at;
    }

    /// One batch per shard with bytes to read: its range, into its place in `block` (the tensors
    /// and bytes each serves are filled in by serve(), once there is a plan).
    direct_batches batches(unsigned char* block) const {
        direct_batches out;
        for (std::size_t s = 0; s < regions.size(); ++s) {
            const region& r = regions[s];
            if (r.hi == r.lo) continue;
            out.requests.push_back({{s, r.lo, 1, r.hi - r.lo, r.hi - r.lo, block + r.at, false}});
            out.tensors.emplace_back();
            out.bytes.push_back(0);
        }
        return out;
    }

    /// The tensors each batch of batches() serves, in plan order, and their bytes.
    void serve(direct_batches& b, const std::vector<geometry>& geo) const {
        std::vector<std::size_t> batch_of(regions.size(), SIZE_MAX);  // a batch reads one shard
        for (std::size_t k = 0; k < b.requests.size(); ++k) batch_of[b.requests[k].front().file] = k;
        for (std::size_t i = 0; i < geo.size(); ++i) {
            if (geo[i].seg_bytes == 0) continue;
            const std::size_t k = batch_of[geo[i].file];
            b.tensors[k].push_back(i);
            b.bytes[k] += geo[i].seg_bytes;  // progress counts the tensors' bytes, not the gaps
        }
    }

    static constexpr std::uint64_t slack_bytes = 1ull << 20;
};

/// Which tensors are complete, which failed, the first error and the bytes done: a tensor is
/// complete when none of its requests or pieces is left.
struct completion {
    std::vector<std::uint64_t> left;
    std::vector<char> failed;
    std::exception_ptr first_error;
    std::uint64_t done_bytes = 0;
    std::uint64_t total_bytes = 0;
    const std::function<void(std::uint64_t, std::uint64_t)>* report = nullptr;

    void fail(std::size_t t, const std::exception_ptr& e) {
        failed[t] = 1;
        if (!first_error) first_error = e;
    }
    void progress(std::uint64_t b) {
        done_bytes += b;
        if (report && *report) (*report)(done_bytes, total_bytes);
    }
    /// The error naming how many tensors completed and the first that did not.
    [[noreturn]] void throw_first_error(const std::string& source, const std::vector<tensor_plan>& plans) const {
        const std::size_t n = plans.size();
        std::vector<std::string> complete, incomplete;
        for (std::size_t i = 0; i < n; ++i) (failed[i] || left[i] ? incomplete : complete).push_back(plans[i].name);
        std::string what = source + ": I/O error after " + std::to_string(complete.size()) + " of " +
                           std::to_string(n) + " tensors completed (first incomplete: '" +
                           (incomplete.empty() ? std::string() : incomplete.front()) + "'): " + describe(first_error);
        throw checkpoint_io_error(std::move(what), std::move(complete), std::move(incomplete));
    }
};

/// The tensors that need a temporary (span + gather, GPU row segments, dtype conversion), in
/// pieces of rows through one or two slots of temporaries held under the process-wide budget:
/// the reads of one slot overlap the gather and conversion of the other, and the stream is
/// synchronized once per slot reuse, never per tensor.
class staged_pieces {
public:
    template <typename DstOf>
    staged_pieces(const detailed_plan& d, const checkpoint_load_options& o, range_reader& reader, completion& done,
                  DstOf dst_of)
        : plans_(d.plan.tensors), geo_(d.tensors), o_(o), reader_(reader), done_(done), dst_of_(dst_of),
          gpu_(o.where.on_gpu()) {
        for (std::size_t i = 0; i < geo_.size(); ++i) {
            const geometry& g = geo_[i];
            if (!g.staged || g.seg_bytes == 0) continue;
            for (std::uint64_t r0 = 0; r0 < g.rows; r0 += g.rows_per_piece) {
                pieces_.push_back({i, r0, std::min(g.rows, r0 + g.rows_per_piece), 0, 0});
                ++done_.left[i];
            }
        }
    }

    /// Reads, gathers and converts every piece; returns the temporary memory held (host and
    /// device) and the device part of it.
    std::pair<std::uint64_t, std::uint64_t> run(const detailed_plan& d, memory_budget& budget) {
        if (pieces_.empty()) return {0, 0};
        size_slots(d, budget.cap());
        budget_hold hold(budget, slots_ * (hs_ + ds_));  // waits while other loads hold the budget
        staging_owner staging{take_staging(slots_ * hs_, gpu_), gpu_};
        host_arena_ = &staging.a;
        array dev_arena;
        if (ds_ > 0) dev_arena = array(dtype::uint8, {static_cast<std::int64_t>(slots_ * ds_)}, o_.where);
        dev_arena_ = &dev_arena;
        batch_pieces();
        inflight_.clear();
        inflight_.resize(batches_.size());
        for (std::size_t b = 0; b < batches_.size(); ++b) {
            // One slot: the previous batch leaves it before this one reads into it. Two: the
            // previous batch is placed while this one reads.
            if (slots_ == 1 && b >= 1) finish(b - 1);
            // The slot of batch b - slots is free once the work queued from it has run.
            if (b >= slots_ && gpu_) kernels::synchronize(o_.stream, o_.where.device);
            inflight_[b] = submit(b);
            if (slots_ == 2 && b >= 1) finish(b - 1);
        }
        finish(batches_.size() - 1);
        if (gpu_) kernels::synchronize(o_.stream, o_.where.device);
        return {hold.bytes(), ds_ > 0 ? slots_ * ds_ : 0};
    }

private:
    struct batch {
        std::size_t first = 0, last = 0;
    };

    std::uint64_t host_bytes(const piece& p) const {
        const geometry& g = geo_[p.t];
        std::uint64_t rows = p.r1 - p.r0;
        return plans_[p.t].route == read_route::span ? (rows - 1) * g.row_bytes + g.seg_bytes : rows * g.seg_bytes;
    }
    std::uint64_t dev_bytes(const piece& p) const {
        const geometry& g = geo_[p.t];
        return g.where.on_gpu() && plans_[p.t].convert ? (p.r1 - p.r0) * g.seg_bytes : 0;
    }

    /// Two slots of a piece pair's size where the budget has room, else one; one slot where
    /// everything fits in it.
    void size_slots(const detailed_plan& d, std::uint64_t cap) {
        std::uint64_t need_host = 0, need_dev = 0;
        for (const auto& p : pieces_) {
            need_host += up256(host_bytes(p));
            need_dev += up256(dev_bytes(p));
        }
        // Into host memory nothing follows the host slot but a copy: a few MiB keep the reads
        // large, where slots of 2 x 64 MiB were faulted in afresh by every load (a tenth of a
        // load of 100,000 small tensors into a caller's arrays, CPU machine).
        const std::uint64_t slot_cap = gpu_ ? 2 * piece_target : host_slot_bytes;
        hs_ = up256(std::max(d.staging_piece, std::min(need_host, slot_cap)));
        ds_ = up256(std::max(d.device_piece, std::min(need_dev, 2 * piece_target)));
        slots_ = 2;
        if (2 * (hs_ + ds_) > cap) slots_ = 1;
        if (slots_ == 1 && hs_ + ds_ > cap) {
            hs_ = up256(d.staging_piece);
            ds_ = up256(d.device_piece);
        }
        if (need_host + need_dev <= hs_ + ds_) slots_ = 1;  // everything fits in one slot
    }

    /// Whether piece b is read with piece a, as one request: both whole tensors copied as they
    /// are into host memory (small ones a caller gave destinations for), b's bytes right after
    /// a's in the same file.
    bool adjoins(const piece& a, const piece& b) const {
        const geometry& ga = geo_[a.t];
        const geometry& gb = geo_[b.t];
        auto plain = [&](const piece& p, const geometry& g) {
            return plans_[p.t].route == read_route::whole && !plans_[p.t].convert && !g.where.on_gpu() && g.rows == 1;
        };
        return plain(a, ga) && plain(b, gb) && ga.file == gb.file && ga.offset + ga.seg_bytes == gb.offset;
    }

    /// Batches: consecutive pieces that fit one slot, each piece at its offsets in the slot; a
    /// piece that adjoins the one before it (see adjoins) right after it, so both are one read.
    void batch_pieces() {
        std::uint64_t h = 0, dv = 0, end = 0;  // end: where the previous piece's bytes end
        for (std::size_t k = 0; k < pieces_.size(); ++k) {
            const std::uint64_t hb = host_bytes(pieces_[k]);
            const std::uint64_t pd = up256(dev_bytes(pieces_[k]));
            const bool joins = k > 0 && !batches_.empty() && adjoins(pieces_[k - 1], pieces_[k]) && end + hb <= hs_;
            if (!joins && (batches_.empty() || h + up256(hb) > hs_ || dv + pd > ds_)) {
                batches_.push_back({k, k});
                h = dv = 0;
            }
            pieces_[k].host = joins ? end : h;
            pieces_[k].dev = dv;
            end = pieces_[k].host + hb;
            h = up256(end);
            dv += pd;
            batches_.back().last = k + 1;
        }
        request_of_.resize(batches_.size());
    }

    unsigned char* host_slot(std::size_t b) const {
        return static_cast<unsigned char*>(host_arena_->data()) + (b % slots_) * hs_;
    }
    unsigned char* dev_slot(std::size_t b) const {
        return ds_ ? static_cast<unsigned char*>(dev_arena_->data()) + (b % slots_) * ds_ : nullptr;
    }

    /// Each piece is one request, in piece order: a span (one row) or its row segments; a
    /// piece placed right after the one it adjoins is read with it.
    range_batch submit(std::size_t b) {
        std::vector<gather_request> reqs;
        std::vector<std::size_t>& request_of = request_of_[b];  // per piece of the batch
        request_of.clear();
        unsigned char* base = host_slot(b);
        for (std::size_t k = batches_[b].first; k < batches_[b].last; ++k) {
            const piece& p = pieces_[k];
            const geometry& g = geo_[p.t];
            const std::uint64_t at = g.offset + p.r0 * g.row_bytes;
            if (k > batches_[b].first && adjoins(pieces_[k - 1], p) &&
                p.host == pieces_[k - 1].host + host_bytes(pieces_[k - 1])) {
                reqs.back().width += host_bytes(p);
                reqs.back().pitch = reqs.back().width;
            } else if (plans_[p.t].route == read_route::segments) {
                reqs.push_back({g.file, at, p.r1 - p.r0, g.row_bytes, g.seg_bytes, base + p.host});
            } else {
                reqs.push_back({g.file, at, 1, host_bytes(p), host_bytes(p), base + p.host});
            }
            request_of.push_back(reqs.size() - 1);
        }
        return reader_.submit_each(reqs);
    }

    /// Gathers and converts one piece from its slot into place.
    void place(std::size_t b, const piece& p) {
        const geometry& g = geo_[p.t];
        const tensor_plan& tp = plans_[p.t];
        std::uint64_t rows = p.r1 - p.r0;
        std::size_t pitch = tp.route == read_route::span ? g.row_bytes : g.seg_bytes;
        const unsigned char* src = host_slot(b) + p.host;
        unsigned char* dst = dst_of_(p.t) + p.r0 * g.out_seg_bytes;
        std::size_t from_item = size_of(g.from);
        if (!g.where.on_gpu()) {
            if (!tp.convert) {
                if (pitch == g.seg_bytes) std::memcpy(dst, src, rows * g.seg_bytes);
                else
                    for (std::uint64_t r = 0; r < rows; ++r) std::memcpy(dst + r * g.seg_bytes, src + r * pitch, g.seg_bytes);
            } else if (pitch == g.seg_bytes) {
                host_kernels::convert(src, g.from, dst, g.to, rows * g.seg_bytes / from_item);
            } else {
                for (std::uint64_t r = 0; r < rows; ++r)
                    host_kernels::convert(src + r * pitch, g.from, dst + r * g.out_seg_bytes, g.to,
                                          g.seg_bytes / from_item);
            }
            return;
        }
        int dev = g.where.device;
        if (!tp.convert) {
            kernels::copy_2d(dst, g.seg_bytes, src, pitch, g.seg_bytes, rows, dev, o_.stream);
        } else {
            unsigned char* tmp = dev_slot(b) + p.dev;
            kernels::copy_2d(tmp, g.seg_bytes, src, pitch, g.seg_bytes, rows, dev, o_.stream);
            kernels::convert(tmp, g.from, dst, g.to, rows * g.seg_bytes / from_item, dev, o_.stream);
        }
    }

    /// Waits for batch b's reads and places each piece that arrived whole.
    void finish(std::size_t b) {
        std::vector<std::exception_ptr> errs = inflight_[b].wait();
        for (std::size_t k = batches_[b].first; k < batches_[b].last; ++k) {
            const piece& p = pieces_[k];
            std::exception_ptr e = errs[request_of_[b][k - batches_[b].first]];
            if (e || done_.failed[p.t]) {
                if (e) done_.fail(p.t, e);
                continue;
            }
            try {
                place(b, p);
                --done_.left[p.t];
                done_.progress(host_bytes(p));
            } catch (...) {
                done_.fail(p.t, std::current_exception());
            }
        }
    }

    const std::vector<tensor_plan>& plans_;
    const std::vector<geometry>& geo_;
    const checkpoint_load_options& o_;
    range_reader& reader_;
    completion& done_;
    std::function<unsigned char*(std::size_t)> dst_of_;
    const bool gpu_;
    std::vector<piece> pieces_;
    std::vector<batch> batches_;
    std::vector<range_batch> inflight_;
    std::vector<std::vector<std::size_t>> request_of_;  ///< per batch: each piece's request
    std::uint64_t hs_ = 0, ds_ = 0;
    std::size_t slots_ = 2;
    const array* host_arena_ = nullptr;
    const array* dev_arena_ = nullptr;
};

}  // namespace

namespace {

double seconds_since(clock_type::time_point t0) { return std::chrono::duration<double>(clock_type::now() - t0).count(); }

/// A whole load's reads, one per shard, submitted by a thread of their own: a large request
/// holds its submitter until most of its chunks are queued on the lanes (48 ms for a shard of
/// 4.3 GB on an H100, bench/probes/submit_probe.py), time the loading thread spends on the plan
/// and the caller's wrapping instead. The caller's stop is bound to that thread (Ctrl-C reaches
/// these reads too). `first_read` is set to the seconds from t0 at which the first read is
/// issued; it must outlive the future.
std::future<std::vector<range_batch>> submit_aside(range_reader& reader, std::vector<std::vector<gather_request>> requests,
                                                   double& first_read, clock_type::time_point t0) {
    auto submit_all = [&reader, requests = std::move(requests), stop = detail::current_stop(), &first_read, t0] {
        detail::stop_binding bound(stop);
        std::vector<range_batch> inflight;
        inflight.reserve(requests.size());
        for (const auto& b : requests) {
            if (inflight.empty()) first_read = seconds_since(t0);
            inflight.push_back(reader.submit(b));
        }
        return inflight;
    };
    try {
        return std::async(std::launch::async, std::move(submit_all));
    } catch (const std::system_error&) {  // no thread to spare: submitted here
    }
    std::promise<std::vector<range_batch>> done;
    done.set_value(submit_all());
    return done.get_future();
}

/// A whole load's reads issued by open_and_load_checkpoint as soon as the shards' headers are
/// read (open.hpp), while the open still merges their tensors and checks them against the
/// index: a reader of the shards, the block and one read per shard. The load takes them over
/// where the open checkpoint places its tensors as the headers did (it always does: a shard's
/// tensors are the checkpoint's); otherwise, and where the open throws, they are waited for
/// and dropped.
class early_reads {
public:
    early_reads() = default;
    early_reads(const early_reads&) = delete;
    early_reads& operator=(const early_reads&) = delete;
    ~early_reads() { drain(); }

    /// Reads started before the open parses the index, from the files its folder's listing
    /// names (likely_shards): each file's bytes after its header, which the file's first 8
    /// bytes size. start() keeps them where the headers then name the same files, unchanged,
    /// with every tensor inside those bytes; otherwise they are waited for and dropped. A file
    /// that cannot be opened or read here is left to the open, which reports it.
    void guess(const std::vector<std::string>& paths, const checkpoint_load_options& o, clock_type::time_point t0) {
        if (paths.empty() || !whole_shards::whole_load(o)) return;
        std::vector<checkpoint_shard> shards(paths.size());
        std::vector<std::uint64_t> data_offsets(paths.size()), sizes(paths.size());
        try {
            for (std::size_t i = 0; i < paths.size(); ++i) {
                file f(paths[i], open_mode::read);
                const std::uint64_t size = f.size();
                unsigned char head[8];
                if (size < sizeof head || f.read(head, sizeof head, 0) != sizeof head) return;
                std::uint64_t n = 0;
                for (int b = 7; b >= 0; --b) n = (n << 8) | head[b];  // little-endian u64: the header's length
                if (n > size - sizeof head) return;
                shards[i].path = paths[i];
                shards[i].file_size = size;
                shards[i].version = f.version();
                data_offsets[i] = sizeof head + n;
                sizes[i] = size;
            }
            whole_shards w = whole_shards::of_data(data_offsets, sizes);
            if (w.total == 0) return;
            reader.emplace(shards, o.where);
            block = make_block(w.total, o);
            whole = std::move(w);
            direct = whole.batches(static_cast<unsigned char*>(block.data()));
            guessed = std::move(shards);
            submitting = submit_aside(*reader, direct.requests, first_read, t0);
            began = "listing";
        } catch (...) {
            drain();
            reset();
        }
    }

    void start(const std::vector<checkpoint_shard>& shards, const checkpoint_load_options& o, clock_type::time_point t0) {
        if (guess_holds(shards, o)) return;
        drain();  // a guess that missed, or an open that tried one way, then another
        reset();
        whole = whole_shards::of(shards, o);
        if (!whole.usable) return;
        reader.emplace(shards, o.where);
        block = make_block(std::max<std::uint64_t>(whole.total, 1), o);
        direct = whole.batches(static_cast<unsigned char*>(block.data()));
        submitting = submit_aside(*reader, direct.requests, first_read, t0);
        began = "headers";
    }

    bool started() const noexcept { return reader.has_value(); }

    /// Whether the guessed reads serve the shards the headers describe: the same files in the
    /// same order, unchanged since, each shard's tensors inside its bytes read.
    bool guess_holds(const std::vector<checkpoint_shard>& shards, const checkpoint_load_options& o) const {
        if (guessed.empty() || guessed.size() != shards.size()) return false;
        for (std::size_t i = 0; i < shards.size(); ++i)
            if (guessed[i].path != shards[i].path || guessed[i].file_size != shards[i].file_size ||
                guessed[i].version != shards[i].version || shards[i].header.data_offset != whole.regions[i].lo)
                return false;
        return whole.covers(whole_shards::of(shards, o));
    }

    /// Waits for every read issued and drops them.
    void drain() noexcept {
        if (!submitting.valid()) return;
        try {
            for (auto& b : submitting.get()) b.wait();
        } catch (...) {  // the submitter's error: nothing is left in flight
        }
    }

    // Destroyed from the last: the submitter and its reads first, then the block they land in
    // and the reader they use.
    whole_shards whole;
    std::optional<range_reader> reader;
    array block;
    direct_batches direct;
    std::vector<checkpoint_shard> guessed;  ///< the files guess() read, as it saw them
    const char* began = "";                 ///< "listing" or "headers": what started the reads
    double first_read = 0;  ///< seconds from the start of the open
    std::future<std::vector<range_batch>> submitting;

private:
    /// After drain(): nothing started.
    void reset() {
        submitting = {};
        direct = {};
        block = array();
        reader.reset();
        whole = {};
        guessed.clear();
        began = "";
    }
};

/// Frees a checkpoint of many tensors on a thread of its own: the names and shapes of 50,000
/// tensors (twice: the headers' and the merged list) took 4.4 ms to free on the CPU machine,
/// time a caller would wait for nothing. A small one, or one no thread is left for, is freed
/// here.
void free_aside(checkpoint&& c) {
    if (c.tensors.size() < 10000) return;
    try {
        std::thread([gone = std::move(c)] {}).detach();
    } catch (const std::system_error&) {  // the lambda, and the checkpoint with it, is freed here
    }
}

checkpoint_load load_with(const checkpoint& c, const checkpoint_load_options& o, early_reads* early) {
    auto t0 = clock_type::now();
    memory_budget& budget = memory_budget::global();
    const whole_shards whole = whole_shards::of(c, o);
    const bool ahead = early && early->started() && early->whole.covers(whole);
    if (early && !ahead) early->drain();
    // Where the early reads go on, their layout places the tensors.
    const whole_shards& layout = ahead ? early->whole : whole;
    std::optional<range_reader> own_reader;
    if (!ahead) own_reader.emplace(c.shards, o.where);
    range_reader& reader = ahead ? *early->reader : *own_reader;
    // Declared before the reads, which land in it and are waited for before it is freed.
    block_layout lay;
    direct_batches direct;
    std::vector<range_batch> direct_inflight;
    double first_read = 0;
    // Declared after what the reads use, so that leaving early waits for the submitter first.
    std::future<std::vector<range_batch>> submitting;
    if (ahead) {
        lay.block = early->block;
        direct = std::move(early->direct);
        submitting = std::move(early->submitting);
    } else if (whole.usable) {
        lay.block = make_block(std::max<std::uint64_t>(whole.total, 1), o);
        direct = whole.batches(static_cast<unsigned char*>(lay.block.data()));
        submitting = submit_aside(reader, direct.requests, first_read, t0);
    }

    detailed_plan d = make_plan(c, o, budget.cap());
    const auto& plans = d.plan.tensors;
    const auto& geo = d.tensors;
    const std::size_t n = plans.size();

    if (whole.usable) lay.at = layout.places(geo);
    else lay = lay_out_block(geo, o);
    auto dst_of = [&](std::size_t i) -> unsigned char* {
        return geo[i].into ? static_cast<unsigned char*>(geo[i].into->data())
                           : static_cast<unsigned char*>(lay.block.data()) + lay.at[i];
    };

    // The tensors as returned (unless the caller makes its own from their places): their
    // places are fixed from here on, so a caller's while_reading can wrap them while the bytes
    // arrive.
    checkpoint_load out;
    const bool caller_makes_tensors = o.places_while_reading && !o.while_reading;
    if (!caller_makes_tensors) {
        out.tensors.reserve(n);
        for (std::size_t i = 0; i < n; ++i) {
            const geometry& g = geo[i];
            const tensor_plan& p = plans[i];
            if (g.into)
                out.tensors.push_back({p.name, array(g.into->owner(), g.into->data(), p.type, p.shape, g.into->where())});
            else
                out.tensors.push_back({p.name, array(lay.block.owner(), dst_of(i), p.type, p.shape, o.where,
                                                     storage_order::c, byte_order::little)});
        }
    }

    completion done;
    done.left.assign(n, 0);
    done.failed.assign(n, 0);
    done.total_bytes = d.plan.bytes_read;
    done.report = &o.progress;
    if (whole.usable) layout.serve(direct, geo);
    else direct = batch_direct_reads(plans, geo, dst_of);
    for (const auto& ts : direct.tensors)
        for (std::size_t t : ts) ++done.left[t];
    staged_pieces staged(d, o, reader, done, dst_of);

    if (!whole.usable) {
        first_read = seconds_since(t0);
        direct_inflight.reserve(direct.requests.size());
        for (const auto& b : direct.requests) direct_inflight.push_back(reader.submit(b));
    }
    // The caller's work on the tensors' places overlaps these reads; its error waits until
    // every read has ended, since the reads land in memory the tensors own.
    std::exception_ptr caller_error;
    try {
        if (o.while_reading) o.while_reading(out.tensors, d.plan);
        if (o.places_while_reading) {
            std::vector<unsigned char*> places(n);
            for (std::size_t i = 0; i < n; ++i) places[i] = dst_of(i);
            o.places_while_reading(d.plan, places, lay.block);
        }
    } catch (...) {
        caller_error = std::current_exception();
    }
    if (submitting.valid()) direct_inflight = submitting.get();
    if (ahead) first_read = early->first_read;  // counted from the start of the open, set by its submitter
    out.stats.reads_began = ahead ? early->began : whole.usable ? "open" : "plan";
    const auto [hold_bytes, device_temp] = staged.run(d, budget);
    load_verifier verifier(c, d, dst_of, o);  // checkpoint/verify_load.cpp
    for (std::size_t b = 0; b < direct_inflight.size(); ++b) {
        std::vector<std::exception_ptr> errs = direct_inflight[b].wait([&](std::size_t) {
            for (std::size_t t : direct.tensors[b]) --done.left[t];
            done.progress(direct.bytes[b]);
        });
        if (errs[0])
            for (std::size_t t : direct.tensors[b]) done.fail(t, errs[0]);
        // Checked while the next batches are read.
        if (o.verify != verify_mode::never) verifier.landed(direct.tensors[b], done.left, done.failed);
    }
    // A shard rewritten while it was read explains a short read too: that error comes first.
    reader.check_unchanged(c.shards);
    if (done.first_error) {
        range_reader::throw_if_removed(done.first_error, c.shards);
        done.throw_first_error(c.source, plans);
    }
    if (caller_error) std::rethrow_exception(caller_error);
    if (o.verify != verify_mode::never) verifier.finish();

    out.stats.bytes_read = reader.bytes_requested();
    out.stats.bytes_out = d.plan.bytes_out;
    out.stats.tensors = n;
    std::vector<char> used(c.shards.size(), 0);
    for (const auto& g : geo) used[g.file] = 1;
    out.stats.files = static_cast<std::size_t>(std::count(used.begin(), used.end(), 1));
    out.stats.requests = reader.requests();
    out.stats.first_read_seconds = std::max(0.0, first_read);
    out.stats.peak_temp_bytes = hold_bytes;
    out.stats.device_temp_bytes = device_temp;
    out.stats.budget_peak_bytes = budget.peak();
    d.plan.requests = reader.requests();
    out.plan = std::move(d.plan);
    out.stats.seconds = seconds_since(t0);
    return out;
}

}  // namespace

checkpoint_load load_checkpoint(const checkpoint& c, const checkpoint_load_options& o) { return load_with(c, o, nullptr); }

checkpoint_load open_and_load_checkpoint(const std::vector<std::string>& sources, const checkpoint_load_options& o,
                                         const std::function<void(const checkpoint&)>& opened) {
    const auto t0 = clock_type::now();
    early_reads early;  // outlives the checkpoint and the load: its reads are waited for first
    if (sources.size() == 1) early.guess(checkpoints::likely_shards(sources[0]), o, t0);
    double headers = 0;
    auto on_read = [&](const std::vector<checkpoint_shard>& shards) {
        headers = seconds_since(t0);
        early.start(shards, o, t0);
    };
    checkpoint c = sources.size() == 1 ? checkpoints::open_checkpoint(sources[0], on_read)
                                       : checkpoints::open_checkpoint(sources, on_read);
    const double open_seconds = seconds_since(t0);
    if (opened) opened(c);
    checkpoint_load l = load_with(c, o, &early);
    l.stats.open_seconds = open_seconds;
    l.stats.headers_seconds = headers;
    free_aside(std::move(c));
    return l;
}

checkpoint_plan plan_checkpoint(const checkpoint& c, const checkpoint_load_options& o) {
    return checkpoints::make_plan(c, o, checkpoints::memory_budget::global().cap()).plan;
}

}  // namespace ferry
