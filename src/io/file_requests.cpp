// A request's life: validated and planned (prepare), split into tasks on the workers (start),
// each task moved by its route's mover (run_task), counted when the last task ends.
#include <algorithm>
#include <chrono>

#include "cuda/cuda_runtime.hpp"
#include "io/file_impl.hpp"
#include "log.hpp"
#include "stop.hpp"
#include "trace.hpp"

namespace ferry::detail {
namespace {

using clock = std::chrono::steady_clock;

// Requests smaller than this run on the calling thread: a hand-off costs more than it saves.
constexpr std::size_t inline_limit = 256 << 10;
// Tasks are not made smaller than this when a request is spread over the workers.
constexpr std::size_t min_task = 1 << 20;

const char* range_name(io_path p, direction dir) {
    const bool w = dir == direction::write;
    switch (p) {
        case io_path::gds: return w ? "ferry write gds" : "ferry read gds";
        case io_path::cufile_compat: return w ? "ferry write cufile-compat" : "ferry read cufile-compat";
        case io_path::staged: return w ? "ferry write staged" : "ferry read staged";
        case io_path::staged_direct: return "ferry read staged+direct";
        case io_path::host: return w ? "ferry write host" : "ferry read host";
        case io_path::direct: return "ferry read direct";
        default: return "ferry request";
    }
}

}  // namespace

/// A request in flight.
struct request_state {
    std::shared_ptr<file_impl> file;
    request r;
    std::atomic<std::size_t> remaining{0};
    std::promise<std::size_t> done;
    file_impl::completion then;
    std::mutex error_mutex;
    std::exception_ptr error;
    clock::time_point start = clock::now();

    void task_done(std::exception_ptr e) {
        if (e) {
            std::lock_guard lock(error_mutex);
            if (!error) error = e;
        }
        if (remaining.fetch_sub(1) != 1) return;
        // Let go of the file before the caller wakes: the other tasks' closures, which the pool
        // destroys a moment later, still hold this state, and the file object (its descriptors
        // are closed by the handle either way) would otherwise outlive the caller's last handle.
        std::shared_ptr<file_impl> f = std::move(file);
        auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(clock::now() - start).count();
        if (!error && !r.file_side) f->count(r.dir, r.counted_as, r.route, 0, static_cast<std::uint64_t>(ns), 1);
        {
            std::lock_guard lock(f->inflight_mutex_);
            --f->inflight_;
        }
        f->inflight_cv_.notify_all();
        f.reset();
        if (then) then(error ? 0 : r.n, error);
        if (error) done.set_exception(error);
        else done.set_value(r.n);
    }
};

void file_impl::count(direction dir, io_path p, int route, std::uint64_t bytes, std::uint64_t ns,
                      std::uint64_t requests) {
    counters_.add(dir, p, route, bytes, ns, requests);
    process_counter().add(dir, p, route, bytes, ns, requests);
}

request file_impl::prepare(direction dir, const void* mem, std::size_t n, std::uint64_t offset, exactness e) {
    check_open();
    const bool is_write = dir == direction::write;
    if (is_write && mode_ == open_mode::read) throw usage_error("file is open for reading only: " + shown_);
    if (!is_write && (mode_ == open_mode::write || mode_ == open_mode::append_write))
        throw usage_error("file is open for writing only: " + shown_);
    if (n > 0 && !mem) throw usage_error("null buffer for a request of " + std::to_string(n) + " bytes: " + shown_);
    request r;
    r.dir = dir;
    r.mem = static_cast<char*>(const_cast<void*>(mem));
    r.offset = offset;
    r.n = n;
    r.src = source_.get();
    if (!is_write) {
        std::uint64_t sz = size();
        if (offset > sz || n > sz - offset) {
            if (e == exactness::exact) throw end_of_file_error({shown_, offset, n}, sz);
            r.n = offset >= sz ? 0 : static_cast<std::size_t>(sz - offset);
        }
    }
    if (r.n == 0) return r;
    r.kind = memory_kind_of(mem);
    if (r.kind == memory_kind::device || r.kind == memory_kind::managed) r.device = device_of(mem);
    plan_result p = plan(r.kind, r.n, dir);
    r.src = route_source(p.chosen);
    r.how = p.chosen.how;
    r.counted_as = p.chosen.counted_as;
    r.route = route_slot(r.src->kind(), to_string(r.how));
    log_plan_once(p, dir);
    if (log_enabled(log_level::debug, config_))
        log(log_level::debug, config_,
            shown_ + ": " + (is_write ? "write " : "read ") + std::to_string(r.n) + " bytes at " +
                std::to_string(offset) + " (" + to_string(r.kind) + " memory) via " +
                std::string(to_string(r.counted_as)));
    return r;
}

void file_impl::move(source& src, mover how, const piece& p, const io_context& where) {
    switch (how) {
        case mover::host: {
            if (src.traits().align == 0 || p.dir == direction::write) {
                move_host(src, p, nullptr, 0, where);
                return;
            }
            staging_pool& pool = engine_->staging();
            move_host(src, p, &pool.slot(thread_pool::worker_index()), pool.buffer_size(), where);
            return;
        }
        case mover::staged:
        case mover::lanes: {  // a lanes request split into tasks (a file side never is): staged
            staging_pool& pool = engine_->staging();
            move_staged(src, p, pool.slot(thread_pool::worker_index()), pool.buffer_size(), where);
            return;
        }
        case mover::device_dma: move_device_dma(src, p, where); return;
    }
}

void file_impl::run_task(const request& r, std::size_t pos, std::size_t len) {
    trace_range range(range_name(r.counted_as, r.dir));
    io_context where{shown_, r.offset + pos, len};
    piece p{r.dir, r.mem, pos, len, r.offset + pos, r.device};
    source* src = r.src;
    io_path used = r.counted_as;
    int route = r.route;
    // An aligned alternative (O_DIRECT) that the file system may refuse at read time.
    const local_alternative* alt = find_alternative(src->kind());
    const bool direct = alt && alt->traits.aligned;
    auto buffered = [&] {
        src = source_.get();
        used = r.how == mover::staged ? io_path::staged : io_path::host;
        route = route_slot(src->kind(), to_string(r.how));
    };
    if (direct && direct_disabled_) buffered();
    try {
        move(*src, r.how, p, where);
    } catch (const system_error& e) {
        // Some file systems accept O_DIRECT at open and refuse it at read time.
        if (!direct || e.code() != EINVAL) throw;
        disable_direct("the file system refused an O_DIRECT read (EINVAL)");
        buffered();
        move(*src, r.how, p, where);
    }
    if (!r.file_side) count(r.dir, used, route, len, 0, 0);
}

void file_impl::read_now(char* dst, std::size_t n, std::uint64_t offset) {
    check_open();
    if (mode_ == open_mode::write || mode_ == open_mode::append_write)
        throw usage_error("file is open for writing only: " + location_);
    if (n == 0) return;
    auto t0 = clock::now();
    source_->read(dst, n, offset, {location_, offset, n});
    auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(clock::now() - t0).count();
    count(direction::read, io_path::host, host_route_, n, static_cast<std::uint64_t>(ns), 1);
}

void file_impl::enter_file_side() {
    std::lock_guard lock(inflight_mutex_);
    if (closed_) throw usage_error("file was closed before its stream reached the request: " + location_);
    ++inflight_;
}

void file_impl::leave_file_side() noexcept {
    {
        std::lock_guard lock(inflight_mutex_);
        --inflight_;
    }
    inflight_cv_.notify_all();
}

std::future<std::size_t> file_impl::start(const request& r, thread_pool* workers, completion then) {
    if (r.how == mover::lanes && !workers && r.n > 0) return start_on_lanes(r, std::move(then));
    auto st = std::make_shared<request_state>();
    st->file = shared_from_this();
    st->r = r;
    st->then = std::move(then);
    std::future<std::size_t> f = st->done.get_future();
    if (r.n == 0) {
        if (st->then) st->then(0, nullptr);
        st->done.set_value(0);
        return f;
    }
    trace_range range(range_name(r.counted_as, r.dir));
    thread_pool& pool = workers ? *workers : engine_->pool();
    // The split honours what the source serves best: its request size and its concurrency.
    const source_traits t = r.src->traits();
    std::size_t parallel = t.concurrency ? std::min(pool.size(), t.concurrency) : pool.size();
    std::size_t largest = std::max(min_task, t.request_size ? t.request_size : config_.task_size);
    std::size_t task = std::clamp<std::size_t>((r.n + parallel - 1) / parallel, min_task, largest);
    std::size_t tasks = (r.n + task - 1) / task;
    {
        // A file side checks for close() under the same lock as it counts itself in flight, so
        // close() either waits for it or it never touches the descriptors.
        std::lock_guard lock(inflight_mutex_);
        if (r.file_side && closed_)
            throw usage_error("file was closed before its stream reached the request: " + shown_);
        ++inflight_;
    }
    st->remaining = tasks;
    bool run_here = r.n <= inline_limit && r.counted_as == io_path::host;
    for (std::size_t t = 0; t < tasks; ++t) {
        std::size_t pos = t * task;
        std::size_t len = std::min(task, r.n - pos);
        // A task runs under the stop flag of the thread that made the request, and does not
        // start once it asks: an interrupted read ends after the tasks already moving bytes.
        auto body = [st, pos, len, stop = current_stop()] {
            std::exception_ptr e;
            try {
                stop_binding bound(stop);
                throw_if_stopped(st->file->shown_);
                st->file->run_task(st->r, pos, len);
            } catch (...) {
                e = std::current_exception();
            }
            st->task_done(e);
        };
        if (run_here) body();
        else pool.submit(std::move(body));
    }
    return f;
}

}  // namespace ferry::detail
