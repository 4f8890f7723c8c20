#include "io/scheduler.hpp"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>

#include "io/thread_pool.hpp"
#include "stop.hpp"

namespace ferry::detail {
namespace {

struct batch_state {
    std::atomic<std::size_t> remaining{0};
    std::atomic<std::size_t> bytes{0};
    std::mutex error_mutex;
    std::exception_ptr error;
    std::promise<std::size_t> done;

    void one_done(std::size_t n, std::exception_ptr e) {
        bytes += n;
        if (e) {
            std::lock_guard lock(error_mutex);
            if (!error) error = e;
        }
        if (remaining.fetch_sub(1) != 1) return;
        if (error) done.set_exception(error);
        else done.set_value(bytes.load());
    }
};

// Starts one range as a request of its own, planned and split like any; its outcome counts
// towards `st`, also when it cannot start.
void start_planned(const std::shared_ptr<batch_state>& st, direction dir, const std::shared_ptr<file_impl>& file,
                   void* memory, std::size_t length, std::uint64_t offset) {
    try {
        if (!file) throw usage_error("a transfer of the batch has no file");
        request r = file->prepare(dir, memory, length, offset, exactness::exact);
        file->start(r, nullptr, [st](std::size_t n, std::exception_ptr e) { st->one_done(n, e); });
    } catch (...) {
        st->one_done(0, std::current_exception());
    }
}

// Host rows are read in groups of about this many bytes, one group a task: small rows (row
// segments of a sliced tensor) would cost more in hand-offs than in reads one task each.
constexpr std::uint64_t host_group_bytes = 4 << 20;

// One task of a host gather: rows [r0, r1) of extent g.
struct host_rows {
    const gather* g;
    std::uint64_t r0, r1;
};

void read_host_rows(const host_rows& h) {
    const gather& g = *h.g;
    char* dst = static_cast<char*>(g.memory);
    if (!g.span) {
        // Each row its own read, straight into place; adjacent rows are one read.
        std::uint64_t run = g.pitch == g.width ? h.r1 - h.r0 : 1;
        for (std::uint64_t r = h.r0; r < h.r1; r += run) {
            std::uint64_t n = std::min(run, h.r1 - r);
            std::size_t len = static_cast<std::size_t>(n * g.width);
            g.file->read_now(dst + r * g.width, len, g.offset + r * g.pitch);
        }
        return;
    }
    // A span into a temporary, then each row out of it.
    std::size_t len = static_cast<std::size_t>((h.r1 - h.r0 - 1) * g.pitch + g.width);
    std::vector<char> tmp(len);
    g.file->read_now(tmp.data(), len, g.offset + h.r0 * g.pitch);
    for (std::uint64_t r = h.r0; r < h.r1; ++r)
        std::memcpy(dst + r * g.width, tmp.data() + (r - h.r0) * g.pitch, static_cast<std::size_t>(g.width));
}

std::future<std::size_t> submit_host_gathers(const std::vector<gather>& batch) {
    auto st = std::make_shared<batch_state>();
    std::future<std::size_t> f = st->done.get_future();
    std::vector<host_rows> tasks;
    for (const gather& g : batch) {
        if (!g.file) throw usage_error("a gather of the batch has no file");
        if (g.rows == 0 || g.width == 0) continue;
        std::uint64_t per_row = g.span ? g.pitch : g.width;
        std::uint64_t rows = std::max<std::uint64_t>(1, host_group_bytes / std::max<std::uint64_t>(1, per_row));
        if (g.rows == 1) {
            // One range: the file's own request splits it over the workers.
            tasks.push_back({&g, 0, 1});
            continue;
        }
        for (std::uint64_t r = 0; r < g.rows; r += rows) tasks.push_back({&g, r, std::min(g.rows, r + rows)});
    }
    st->remaining = tasks.size() + 1;
    // The batch (and so each extent) is the caller's until the future is ready: the tasks take
    // copies of what they point into.
    auto extents = std::make_shared<std::vector<gather>>(batch);
    thread_pool* pool = batch.empty() ? nullptr : &batch.front().file->workers();
    for (const host_rows& h : tasks) {
        host_rows mine{&(*extents)[static_cast<std::size_t>(h.g - batch.data())], h.r0, h.r1};
        const std::uint64_t bytes = (h.r1 - h.r0) * mine.g->width;
        if (mine.g->rows == 1) {  // a plain range: planned and split like any request
            start_planned(st, direction::read, mine.g->file, mine.g->memory, static_cast<std::size_t>(mine.g->width),
                          mine.g->offset);
            continue;
        }
        pool->submit([st, extents, mine, bytes, stop = current_stop()] {
            std::exception_ptr e;
            try {
                stop_binding bound(stop);
                throw_if_stopped(mine.g->file->shown());
                read_host_rows(mine);
            } catch (...) {
                e = std::current_exception();
            }
            st->one_done(e ? 0 : static_cast<std::size_t>(bytes), e);
        });
    }
    st->one_done(0, nullptr);
    return f;
}

// Whether the planner sends a large read of `f` into GPU memory to cuFile.
bool goes_to_cufile(file_impl& f) {
    // Otherwise the lanes carry the gather: their rule (with its residency probe, a mapping of
    // the file, for each of a zarr read's hundreds of chunk files) is not asked.
    return f.plan(memory_kind::device, std::size_t(1) << 30, direction::read, lane_use::never).chosen.how == mover::device_dma;
}

}  // namespace

std::future<std::size_t> submit_batch(direction dir, const std::vector<transfer>& batch) {
    auto st = std::make_shared<batch_state>();
    std::future<std::size_t> f = st->done.get_future();
    // One extra count held while starting, so the batch cannot end before every range started.
    st->remaining = batch.size() + 1;
    for (const transfer& t : batch) start_planned(st, dir, t.file, t.memory, t.length, t.offset);
    st->one_done(0, nullptr);
    return f;
}

std::future<std::size_t> submit_gathers(const std::vector<gather>& batch) {
    std::vector<gather> real;
    for (const gather& g : batch)
        if (g.rows > 0 && g.width > 0) real.push_back(g);
    if (real.empty()) {
        std::promise<std::size_t> p;
        p.set_value(0);
        return p.get_future();
    }
    // Every row inside its file, checked once per file before any byte moves.
    std::vector<std::pair<file_impl*, std::uint64_t>> sizes;
    for (const gather& g : real) {
        if (!g.file) throw usage_error("a gather of the batch has no file");
        auto it = std::find_if(sizes.begin(), sizes.end(), [&](const auto& s) { return s.first == g.file.get(); });
        if (it == sizes.end()) {
            sizes.push_back({g.file.get(), g.file->size()});
            it = sizes.end() - 1;
        }
        std::uint64_t end = g.offset + (g.rows - 1) * g.pitch + g.width;
        if (end > it->second) throw end_of_file_error({g.file->shown(), g.offset, end - g.offset}, it->second);
    }
    memory_kind kind = memory_kind_of(real.front().memory);
    if (kind == memory_kind::host || kind == memory_kind::pinned) return submit_host_gathers(real);
    const int device = device_of(real.front().memory);
    // cuFile's files (GPUDirect Storage, or FERRY_GDS=on): each row a request of its own,
    // through the planner, rather than the lanes.
    std::vector<file_impl*> asked;
    bool cufile = false;
    for (const gather& g : real) {
        if (std::find(asked.begin(), asked.end(), g.file.get()) != asked.end()) continue;
        asked.push_back(g.file.get());
        cufile = cufile || goes_to_cufile(*g.file);
    }
    // Requests of their own, through the planner: every row where cuFile takes a file, else the
    // plain ranges marked own_request. The rest stay one gather on the lanes; one future for all.
    std::vector<transfer> own;
    std::vector<gather> on_lanes;
    for (const gather& g : real) {
        if (!cufile && !(g.own_request && g.rows == 1)) {
            on_lanes.push_back(g);
            continue;
        }
        for (std::uint64_t r = 0; r < g.rows; ++r)
            own.push_back({g.file, g.offset + r * g.pitch, static_cast<std::size_t>(g.width),
                           static_cast<char*>(g.memory) + r * g.width});
    }
    if (own.empty()) return start_gather(on_lanes, device);
    if (on_lanes.empty()) return submit_batch(direction::read, own);
    auto st = std::make_shared<batch_state>();
    std::future<std::size_t> f = st->done.get_future();
    st->remaining = own.size() + 2;  // and the lanes' gather, and the count held while starting
    for (const transfer& t : own) start_planned(st, direction::read, t.file, t.memory, t.length, t.offset);
    try {
        start_gather(on_lanes, device, [st](std::size_t n, std::exception_ptr e) { st->one_done(n, e); });
    } catch (...) {
        st->one_done(0, std::current_exception());
    }
    st->one_done(0, nullptr);
    return f;
}

bool large_reads_staged(file_impl& f) {
    const route r = f.plan(memory_kind::device, std::size_t(1) << 30, direction::read).chosen;
    const local_alternative* a = find_alternative(r.source);
    return r.how == mover::staged || (a && a->role == alternative_role::registered_pages);
}

}  // namespace ferry::detail
