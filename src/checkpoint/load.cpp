// Executing a checkpoint plan. All reads that land in place (whole tensors and dim-0 slices,
// host row segments) are submitted first as one batch over every shard, coalesced where both
// the file ranges and the destinations touch. Tensors that need a temporary (span + gather,
// GPU row segments, dtype conversion) then flow through two slots of temporaries held under
// the process-wide budget: the reads of one slot overlap the gather and conversion of the
// other, and the stream is synchronized once per slot reuse, never per tensor.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <exception>
#include <mutex>
#include <utility>

#include "array/host_kernels.hpp"
#include "checkpoint/memory_budget.hpp"
#include "checkpoint/plan.hpp"
#include "checkpoint/range_reader.hpp"
#include "cuda/deserialize_kernels.hpp"
#include "cuda/strided_copy.hpp"
#include "ferry/checkpoint.hpp"
#include "ferry/error.hpp"

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
    if (b.nbytes() < bytes || b.data() == nullptr)
        throw usage_error("load_checkpoint: the allocator returned " + std::to_string(b.nbytes()) + " bytes, " +
                          std::to_string(bytes) + " asked");
    if (w.kind != o.where.kind || (o.where.on_gpu() && w.device != o.where.device))
        throw usage_error("load_checkpoint: the allocator returned " + to_string(w) + " memory, " +
                          to_string(o.where) + " asked");
    return b;
}

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

checkpoint_load load_checkpoint(const checkpoint& c, const checkpoint_load_options& o) {
    auto t0 = clock_type::now();
    memory_budget& budget = memory_budget::global();
    detailed_plan d = make_plan(c, o, budget.cap());
    const auto& plans = d.plan.tensors;
    auto& geo = d.tensors;
    const std::size_t n = plans.size();

    // The fresh block: tensors read in place keep file order, so a run of adjacent tensors of
    // one shard is one range in the block and one read.
    std::vector<std::uint64_t> at(n, 0);
    std::vector<std::size_t> order;
    for (std::size_t i = 0; i < n; ++i)
        if (!geo[i].into) order.push_back(i);
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
        bool sa = geo[a].staged, sb = geo[b].staged;
        if (sa != sb) return sb;
        return std::tie(geo[a].file, geo[a].offset) < std::tie(geo[b].file, geo[b].offset);
    });
    std::uint64_t total = 0;
    std::size_t prev = SIZE_MAX;
    for (std::size_t i : order) {
        const geometry& g = geo[i];
        bool in_place_run = !g.staged && g.rows == 1 && prev != SIZE_MAX && geo[prev].file == g.file &&
                            geo[prev].offset + geo[prev].seg_bytes == g.offset;
        at[i] = in_place_run ? total : align_like(total, g.staged ? 0 : g.offset);
        total = at[i] + g.rows * g.out_seg_bytes;
        prev = (!g.staged && g.rows == 1) ? i : SIZE_MAX;
    }
    array block;
    if (!order.empty()) block = make_block(std::max<std::uint64_t>(total, 1), o);
    auto dst_of = [&](std::size_t i) -> unsigned char* {
        return geo[i].into ? static_cast<unsigned char*>(geo[i].into->data())
                           : static_cast<unsigned char*>(block.data()) + at[i];
    };

    // The tensors as returned: their places are fixed from here on, so a caller's
    // while_reading can wrap them while the bytes arrive.
    checkpoint_load out;
    out.tensors.reserve(n);
    for (std::size_t i = 0; i < n; ++i) {
        const geometry& g = geo[i];
        const tensor_plan& p = plans[i];
        if (g.into)
            out.tensors.push_back({p.name, array(g.into->owner(), g.into->data(), p.type, p.shape, g.into->where())});
        else
            out.tensors.push_back({p.name, array(block.owner(), dst_of(i), p.type, p.shape, o.where,
                                                 storage_order::c, byte_order::little)});
    }

    range_reader reader(c.shards, o.where.on_gpu());

    // Completion bookkeeping: a tensor is complete when none of its requests or pieces is left.
    std::vector<std::uint64_t> left(n, 0);
    std::vector<char> failed(n, 0);
    std::exception_ptr first_error;
    auto fail = [&](std::size_t t, const std::exception_ptr& e) {
        failed[t] = 1;
        if (!first_error) first_error = e;
    };
    std::uint64_t done_bytes = 0;
    auto progress = [&](std::uint64_t b) {
        done_bytes += b;
        if (o.progress) o.progress(done_bytes, d.plan.bytes_read);
    };

    // In-place reads (whole tensors, slices, row segments and spans of tensors that need no
    // conversion): gathers of the I/O scheduler, plain ranges merged where file ranges and
    // destinations are both contiguous. Cut into batches of one shard and about batch_bytes,
    // submitted at once and awaited in order, so that progress moves and an I/O error names
    // the tensors of its batch only (the lanes carry one batch right behind the other).
    struct direct_req {
        gather_request g;
        std::size_t t;
    };
    std::vector<direct_req> direct;
    for (std::size_t i = 0; i < n; ++i) {
        const geometry& g = geo[i];
        if (g.staged || g.seg_bytes == 0) continue;
        unsigned char* dst = dst_of(i);
        if (g.rows == 1) direct.push_back({{g.file, g.offset, 1, g.seg_bytes, g.seg_bytes, dst, false}, i});
        else
            direct.push_back({{g.file, g.offset, g.rows, g.row_bytes, g.seg_bytes, dst, plans[i].route == read_route::span}, i});
    }
    std::sort(direct.begin(), direct.end(), [](const auto& a, const auto& b) {
        return std::tie(a.g.file, a.g.offset) < std::tie(b.g.file, b.g.offset);
    });
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
    std::vector<std::vector<gather_request>> direct_batches;
    std::vector<std::vector<std::size_t>> batch_tensors;
    std::vector<std::uint64_t> batch_read;
    {
        std::uint64_t in_batch = batch_bytes;
        for (std::size_t k = 0; k < merged.size(); ++k) {
            if (in_batch >= batch_bytes || (k > 0 && merged[k].file != merged[k - 1].file)) {
                direct_batches.emplace_back();
                batch_tensors.emplace_back();
                batch_read.push_back(0);
                in_batch = 0;
            }
            direct_batches.back().push_back(merged[k]);
            for (std::size_t t : merged_tensors[k]) batch_tensors.back().push_back(t);
            batch_read.back() += merged[k].bytes_read();
            in_batch += merged[k].bytes_read();
        }
    }
    for (const auto& ts : batch_tensors)
        for (std::size_t t : ts) ++left[t];

    // Pieces through temporaries.
    std::vector<piece> pieces;
    for (std::size_t i = 0; i < n; ++i) {
        const geometry& g = geo[i];
        if (!g.staged || g.seg_bytes == 0) continue;
        for (std::uint64_t r0 = 0; r0 < g.rows; r0 += g.rows_per_piece) {
            pieces.push_back({i, r0, std::min(g.rows, r0 + g.rows_per_piece), 0, 0});
            ++left[i];
        }
    }

    double first_read = -1;
    auto mark_first = [&] {
        if (first_read < 0) first_read = std::chrono::duration<double>(clock_type::now() - t0).count();
    };
    mark_first();
    std::vector<range_batch> direct_inflight;
    direct_inflight.reserve(direct_batches.size());
    for (const auto& b : direct_batches) direct_inflight.push_back(reader.submit(b));
    // The caller's work on the tensors' places overlaps these reads; its error waits until
    // every read has ended, since the reads land in memory the tensors own.
    std::exception_ptr caller_error;
    if (o.while_reading) {
        try {
            o.while_reading(out.tensors, d.plan);
        } catch (...) {
            caller_error = std::current_exception();
        }
    }

    std::uint64_t hold_bytes = 0;
    std::uint64_t device_temp = 0;
    bool gpu = o.where.on_gpu();
    if (!pieces.empty()) {
        std::uint64_t need_host = 0, need_dev = 0;
        auto host_bytes = [&](const piece& p) {
            const geometry& g = geo[p.t];
            std::uint64_t rows = p.r1 - p.r0;
            return plans[p.t].route == read_route::span ? (rows - 1) * g.row_bytes + g.seg_bytes : rows * g.seg_bytes;
        };
        auto dev_bytes = [&](const piece& p) {
            const geometry& g = geo[p.t];
            return g.where.on_gpu() && plans[p.t].convert ? (p.r1 - p.r0) * g.seg_bytes : 0;
        };
        for (const auto& p : pieces) {
            need_host += (host_bytes(p) + 255) / 256 * 256;
            need_dev += (dev_bytes(p) + 255) / 256 * 256;
        }
        std::uint64_t cap = budget.cap();
        auto up = [](std::uint64_t x) { return (x + 255) / 256 * 256; };
        std::uint64_t hs = up(std::max(d.staging_piece, std::min(need_host, 2 * piece_target)));
        std::uint64_t ds = up(std::max(d.device_piece, std::min(need_dev, 2 * piece_target)));
        std::size_t slots = 2;
        if (2 * (hs + ds) > cap) slots = 1;
        if (slots == 1 && hs + ds > cap) {
            hs = up(d.staging_piece);
            ds = up(d.device_piece);
        }
        if (need_host + need_dev <= hs + ds) slots = 1;  // everything fits in one slot
        budget_hold hold(budget, slots * (hs + ds));  // waits while other loads hold the budget
        hold_bytes = hold.bytes();
        staging_owner staging{take_staging(slots * hs, gpu), gpu};
        const array& host_arena = staging.a;
        array dev_arena;
        if (ds > 0) dev_arena = array(dtype::uint8, {static_cast<std::int64_t>(slots * ds)}, o.where);
        device_temp = ds > 0 ? slots * ds : 0;

        // Batches: consecutive pieces that fit one slot.
        struct batch {
            std::size_t first = 0, last = 0;
        };
        std::vector<batch> batches;
        {
            std::uint64_t h = 0, dv = 0;
            for (std::size_t k = 0; k < pieces.size(); ++k) {
                std::uint64_t ph = (host_bytes(pieces[k]) + 255) / 256 * 256;
                std::uint64_t pd = (dev_bytes(pieces[k]) + 255) / 256 * 256;
                if (batches.empty() || h + ph > hs || dv + pd > ds) {
                    batches.push_back({k, k});
                    h = dv = 0;
                }
                pieces[k].host = h;
                pieces[k].dev = dv;
                h += ph;
                dv += pd;
                batches.back().last = k + 1;
            }
        }
        auto host_slot = [&](std::size_t b) {
            return static_cast<unsigned char*>(host_arena.data()) + (b % slots) * hs;
        };
        auto dev_slot = [&](std::size_t b) {
            return ds ? static_cast<unsigned char*>(dev_arena.data()) + (b % slots) * ds : nullptr;
        };
        // Each piece is one request, in piece order: a span (one row) or its row segments.
        auto submit = [&](std::size_t b) {
            std::vector<gather_request> reqs;
            unsigned char* base = host_slot(b);
            for (std::size_t k = batches[b].first; k < batches[b].last; ++k) {
                const piece& p = pieces[k];
                const geometry& g = geo[p.t];
                const std::uint64_t at = g.offset + p.r0 * g.row_bytes;
                if (plans[p.t].route == read_route::segments)
                    reqs.push_back({g.file, at, p.r1 - p.r0, g.row_bytes, g.seg_bytes, base + p.host});
                else
                    reqs.push_back({g.file, at, 1, host_bytes(p), host_bytes(p), base + p.host});
            }
            return reader.submit_each(reqs);
        };
        // Gather and convert one piece from its slot into place.
        auto place = [&](std::size_t b, const piece& p) {
            const geometry& g = geo[p.t];
            const tensor_plan& tp = plans[p.t];
            std::uint64_t rows = p.r1 - p.r0;
            std::size_t pitch = tp.route == read_route::span ? g.row_bytes : g.seg_bytes;
            const unsigned char* src = host_slot(b) + p.host;
            unsigned char* dst = dst_of(p.t) + p.r0 * g.out_seg_bytes;
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
                kernels::copy_2d(dst, g.seg_bytes, src, pitch, g.seg_bytes, rows, dev, o.stream);
            } else {
                unsigned char* tmp = dev_slot(b) + p.dev;
                kernels::copy_2d(tmp, g.seg_bytes, src, pitch, g.seg_bytes, rows, dev, o.stream);
                kernels::convert(tmp, g.from, dst, g.to, rows * g.seg_bytes / from_item, dev, o.stream);
            }
        };

        std::vector<range_batch> inflight(batches.size());
        auto finish = [&](std::size_t b) {
            std::vector<std::exception_ptr> errs = inflight[b].wait();
            for (std::size_t k = batches[b].first; k < batches[b].last; ++k) {
                const piece& p = pieces[k];
                std::exception_ptr e = errs[k - batches[b].first];
                if (e || failed[p.t]) {
                    if (e) fail(p.t, e);
                    continue;
                }
                try {
                    place(b, p);
                    --left[p.t];
                    progress(host_bytes(p));
                } catch (...) {
                    fail(p.t, std::current_exception());
                }
            }
        };
        for (std::size_t b = 0; b < batches.size(); ++b) {
            // One slot: the previous batch leaves it before this one reads into it. Two: the
            // previous batch is placed while this one reads.
            if (slots == 1 && b >= 1) finish(b - 1);
            // The slot of batch b - slots is free once the work queued from it has run.
            if (b >= slots && gpu) kernels::synchronize(o.stream, o.where.device);
            inflight[b] = submit(b);
            if (slots == 2 && b >= 1) finish(b - 1);
        }
        finish(batches.size() - 1);
        if (gpu) kernels::synchronize(o.stream, o.where.device);
    }

    for (std::size_t b = 0; b < direct_inflight.size(); ++b) {
        std::vector<std::exception_ptr> errs = direct_inflight[b].wait([&](std::size_t) {
            for (std::size_t t : batch_tensors[b]) --left[t];
            progress(batch_read[b]);
        });
        if (errs[0])
            for (std::size_t t : batch_tensors[b]) fail(t, errs[0]);
    }

    if (first_error) {
        std::vector<std::string> complete, incomplete;
        for (std::size_t i = 0; i < n; ++i)
            (failed[i] || left[i] ? incomplete : complete).push_back(plans[i].name);
        std::string what = c.source + ": I/O error after " + std::to_string(complete.size()) + " of " +
                           std::to_string(n) + " tensors completed (first incomplete: '" +
                           (incomplete.empty() ? std::string() : incomplete.front()) + "'): " +
                           describe(first_error);
        throw checkpoint_io_error(std::move(what), std::move(complete), std::move(incomplete));
    }
    if (caller_error) std::rethrow_exception(caller_error);

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
    out.stats.seconds = std::chrono::duration<double>(clock_type::now() - t0).count();
    return out;
}

checkpoint_plan plan_checkpoint(const checkpoint& c, const checkpoint_load_options& o) {
    return checkpoints::make_plan(c, o, checkpoints::memory_budget::global().cap()).plan;
}

}  // namespace ferry
