// Stream-ordered requests (file::read_async / write_async with a stream).
//
// CUDA's rule for host functions is that they make no CUDA call and wait on no CUDA work that
// the stream does not already order before them; a driver may serialize them with other work.
// So a request is laid out on streams at the call, all of it ordered in ways CUDA can see:
//
//   caller's stream:  ... earlier work, [record start] ....... [wait lanes' done] [complete] ...
//   lane k:           [wait start] [host fn chunk i] [copy chunk i] [host fn chunk i+N] ... [record done]
//
// Requests without a stream of the caller's (large reads the planner routes to the lanes, and
// gathers) start after the calling thread's per-thread stream but end on the lanes themselves:
// each lane's last item is a host function, and the last of those completes the request. So the
// next request of the thread queues on the lanes right behind this one, instead of waiting
// behind its completion on the caller's stream with every lane drained (a checkpoint or a zarr
// read is many such requests in a row).
//
// The chunks of a request go to the N lanes in turn; each lane has two pinned buffers that its
// chunks use alternately. The file side of a chunk (pread into, or pwrite from, its buffer) runs
// on the engine's file workers, which never wait on CUDA; host functions only start file sides
// and wait for them.
//
// Reads run ahead: the host function of chunk i waits for the read of chunk i and starts the
// read of chunk i+N (the next chunk on its lane, into the other buffer, whose last copy the lane
// has finished by then), so N reads are in flight while the lanes copy. Across requests the
// lane hands on (stream_lanes.hpp, lane_handoff): the host function of a request's last chunk
// on a lane starts the read of the next request's first chunk there, and a request queued on
// idle lanes starts its first N reads at once. Only for requests without a stream of the
// caller's, and only while no stream-ordered write is in flight. Writes run behind: the
// host function of chunk i starts its write and waits for the write of chunk i-N, whose buffer
// the lane's next copy fills; a lane's last chunk of the request waits for its own.
//
// A request to or from host memory is one file side and a completion on the caller's stream.
//
// A request answers to the stop flag of the thread that made it (ferry::stop_scope): host
// functions run on CUDA's thread, which has none, so the request carries it. Once it asks, no
// further chunk's file side starts (each start checks, and every read of a gather chunk's
// groups too); the chunks already moving bytes end, the request fails with interrupted_error,
// and the lanes' copies of chunks never read move stale bytes, which an error allows.
//
// Reads are gathers: a list of extents (rows of one or more files, each row landing packed in
// GPU memory) cut into lane-buffer-sized chunks. A chunk's file side is a list of reads into its
// buffer, spread over the file workers; its copies are one cudaMemcpyAsync per run of adjacent
// destination bytes (a plain range: one copy per chunk), or one cudaMemcpy2DAsync for a span
// whose rows are picked out while they cross to the GPU. A plain stream-ordered read is the
// gather of one extent; the checkpoint loader hands whole tensors, slices and row segments of
// every shard as one gather (io/scheduler.hpp).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <mutex>
#include <vector>

#include "cuda/cuda_runtime.hpp"
#include "ferry/error.hpp"
#include "io/file_impl.hpp"
#include "io/lane_chunks.hpp"
#include "stop.hpp"

namespace ferry::detail {

namespace {

/// Stream-ordered writes not yet let go of, in the whole process. A read's file side starts
/// ahead of its host function only while there are none: a write queued before it on a stream
/// may change the bytes it reads.
std::atomic<std::size_t> writes_in_flight{0};

/// The file side of one chunk, once started.
struct file_job {
    std::atomic<bool> started{false};
    std::future<std::size_t> done;
};

}  // namespace

/// One stream-ordered request, shared by the host functions that carry it out.
struct stream_request {
    std::shared_ptr<file_impl> file;
    request r;
    io_path path = io_path::host;  ///< what the stats record
    int route = -1;                ///< and their slot of (source, mover)
    std::size_t lanes = 1;         ///< chunk i + lanes is the next chunk on chunk i's lane
    std::vector<lane_chunk> chunks;
    std::unique_ptr<file_job[]> jobs;
    /// Per chunk on the lanes: its lane's hand-off and its use of the lane's buffers (empty for
    /// a request that is not on the lanes).
    struct lane_use {
        lane_handoff* handoff;
        std::size_t use;
    };
    std::vector<lane_use> uses;
    std::promise<std::size_t> done;
    file_impl::completion then;  ///< hears the outcome just before the future does
    /// A gather: the files it reads (kept open until it ends), the bytes of each and their
    /// route slot, counted once at the end; empty for a request of one file.
    struct counted_file {
        std::shared_ptr<file_impl> file;
        std::uint64_t bytes;
        int route;
    };
    std::vector<counted_file> counted;
    std::atomic<bool> cancelled{false};  ///< queueing failed part-way: start no more file sides
    /// The stop flag of the thread that made the request (null: none), checked before each
    /// chunk's file side starts and handed to the file workers that run it.
    stop_flag stop = current_stop();
    /// Unordered requests: the lanes whose closing host function has not run yet.
    std::atomic<std::size_t> lanes_left{0};
    std::mutex error_mutex;
    std::exception_ptr error;
    std::chrono::steady_clock::time_point began = std::chrono::steady_clock::now();

    ~stream_request() {
        if (r.is_write()) writes_in_flight.fetch_sub(1);  // counted when made (start_streamed)
        // Letting go of the file can close it and free CUDA resources, which a host function
        // may not do: the file workers take it then.
        if (!in_cuda_host_function() || !file) return;
        try {
            thread_pool& workers = file->engine_->file_workers();
            workers.submit([f = std::move(file)]() mutable { f.reset(); });
        } catch (...) {
        }
    }

    void fail(std::exception_ptr e) {
        std::lock_guard lock(error_mutex);
        if (!error) error = e;
    }
    bool failed() {
        std::lock_guard lock(error_mutex);
        return error != nullptr;
    }

    /// Starts the file side of chunk i unless it was started, the request failed or its stop
    /// flag asks to stop (then the request fails with interrupted_error).
    void start(std::size_t i) {
        if (i >= chunks.size() || cancelled || failed()) return;
        if (jobs[i].started.exchange(true)) return;
        try {
            stop_binding bound(stop);  // the file side's tasks take the flag from this thread
            throw_if_stopped(file->shown_);
            if (chunks[i].reads.empty()) jobs[i].done = file->start_file_side(r, chunks[i].pos, chunks[i].len, chunks[i].buffer);
            else jobs[i].done = start_reads(chunks[i]);
        } catch (...) {
            fail(std::current_exception());
        }
    }

    /// A gather chunk's file side: its reads in groups of about equal bytes on the file workers
    /// (large reads split), so that every worker helps fill one buffer. Each file of the chunk
    /// counts the side as in flight (close() waits for it, and a closed file refuses it).
    std::future<std::size_t> start_reads(const lane_chunk& c) {
        thread_pool& workers = file->engine_->file_workers();
        const std::size_t target = std::max<std::size_t>(1 << 20, c.len / workers.size());
        std::vector<std::vector<lane_read>> groups(1);
        std::size_t in_group = 0;
        std::vector<file_impl*> files;
        for (lane_read rd : c.reads) {
            if (std::find(files.begin(), files.end(), rd.file) == files.end()) files.push_back(rd.file);
            while (rd.rows > 1) {  // strided rows: split between rows, never inside one
                if (in_group >= target) {
                    groups.emplace_back();
                    in_group = 0;
                }
                std::size_t n = std::min(rd.rows, std::max<std::size_t>(1, (target - in_group) / rd.len));
                groups.back().push_back({rd.file, rd.offset, rd.len, rd.at, n, rd.pitch});
                in_group += n * rd.len;
                rd.offset += n * rd.pitch;
                rd.at += n * rd.len;
                rd.rows -= n;
                if (rd.rows == 0) rd.len = 0;
            }
            while (rd.len > 0) {
                if (in_group >= target) {
                    groups.emplace_back();
                    in_group = 0;
                }
                std::size_t len = std::min(rd.len, target - in_group);
                groups.back().push_back({rd.file, rd.offset, len, rd.at});
                in_group += len;
                rd.offset += len;
                rd.at += len;
                rd.len -= len;
            }
        }
        for (std::size_t k = 0; k < files.size(); ++k) {
            try {
                files[k]->enter_file_side();
            } catch (...) {
                for (std::size_t j = 0; j < k; ++j) files[j]->leave_file_side();
                throw;
            }
        }
        struct side {
            std::atomic<std::size_t> left;
            std::mutex m;
            std::exception_ptr error;
            std::promise<std::size_t> done;
            std::size_t bytes;
            std::vector<file_impl*> files;
        };
        auto st = std::make_shared<side>();
        st->left = groups.size();
        st->bytes = c.len;
        st->files = std::move(files);
        std::future<std::size_t> f = st->done.get_future();
        for (auto& g : groups) {
            workers.submit([st, g = std::move(g), buffer = c.buffer, flag = stop] {
                std::exception_ptr e;
                try {
                    stop_binding bound(flag);
                    io_context where;  // one copy of each file's name, not one per read
                    const file_impl* named = nullptr;
                    for (const lane_read& rd : g) {
                        if (rd.file != named) where.path = rd.file->shown_, named = rd.file;
                        throw_if_stopped(where.path);
                        for (std::size_t k = 0; k < rd.rows; ++k) {
                            where.offset = rd.offset + k * rd.pitch;
                            where.length = rd.len;
                            rd.file->source_->read(buffer + rd.at + k * rd.len, rd.len, where.offset, where);
                        }
                    }
                } catch (...) {
                    e = std::current_exception();
                }
                if (e) {
                    std::lock_guard lock(st->m);
                    if (!st->error) st->error = e;
                }
                if (st->left.fetch_sub(1) != 1) return;
                for (file_impl* fi : st->files) fi->leave_file_side();
                if (st->error) st->done.set_exception(st->error);
                else st->done.set_value(st->bytes);
            });
        }
        return f;
    }

    /// Waits for the file side of chunk i if it was started (only the file workers, never CUDA).
    void wait(std::size_t i) {
        if (i >= chunks.size() || !jobs[i].done.valid()) return;
        try {
            jobs[i].done.get();
        } catch (...) {
            fail(std::current_exception());
        }
    }

    /// The host function of chunk i, in its lane's order.
    void on_lane(std::size_t i) {
        if (!r.is_write()) {
            start(i);  // where it was not started ahead
            start(i + lanes);
            hand_on(i);
            wait(i);
        } else {
            start(i);
            if (i >= lanes) wait(i - lanes);        // frees the buffer the lane fills next
            if (i + lanes >= chunks.size()) wait(i);  // the lane's last chunk of this request
            hand_on(i);
        }
    }

    /// Chunk i's host function has reached the point where the lane's buffer of its next use
    /// is free: records that, and starts the read chunk of another request waiting for it.
    void hand_on(std::size_t i) {
        if (i >= uses.size()) return;
        lane_handoff& h = *uses[i].handoff;
        const std::size_t use = uses[i].use;
        std::shared_ptr<stream_request> next;
        std::size_t k = 0;
        {
            std::lock_guard lock(h.m);
            h.ran = std::max(h.ran, use + 1);
            if (h.next_use == use + 1) {
                next = h.next.lock();
                k = h.next_chunk;
                h.next.reset();
            }
        }
        if (next && writes_in_flight.load() == 0) next->start(k);
    }

    /// A read request's first chunk on a lane (chunk i): started now where the host function
    /// of the lane's previous use has run, else handed to it.
    void start_ahead(std::size_t i, const std::shared_ptr<stream_request>& self) {
        lane_handoff& h = *uses[i].handoff;
        bool now;
        {
            std::lock_guard lock(h.m);
            now = h.ran >= uses[i].use;
            if (!now) {
                h.next = self;
                h.next_chunk = i;
                h.next_use = uses[i].use;
            }
        }
        if (now && writes_in_flight.load() == 0) start(i);
    }

    /// Lays the chunks of `q` (cut already for a gather, else cut here) out on the lanes of
    /// `device` after the work queued on `cs`. Ordered: the completion on `cs`, after every
    /// lane; unordered: on the lanes, by the last of them to finish (nothing queued on `cs`).
    static void lay_out(const std::shared_ptr<stream_request>& q, cudaStream_t cs, int device, bool ordered);

    void complete() {
        std::exception_ptr e;
        {
            std::lock_guard lock(error_mutex);
            e = error;
        }
        if (e) {
            if (then) then(0, e);
            done.set_exception(e);
            return;
        }
        auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - began).count();
        if (counted.empty()) file->count(r.dir, path, route, r.n, static_cast<std::uint64_t>(ns), 1);
        for (const counted_file& c : counted) c.file->count(r.dir, path, c.route, c.bytes, static_cast<std::uint64_t>(ns), 1);
        if (then) then(r.n, nullptr);
        done.set_value(r.n);
    }
};

namespace {

struct chunk_call {
    std::shared_ptr<stream_request> q;
    std::size_t index;
};

// Host functions run on CUDA's own thread: an exception escaping one would end the process,
// so each delivers it to the request's future instead.
void CUDART_CB run_chunk(void* p) {
    cuda_host_function_scope scope;
    std::unique_ptr<chunk_call> c(static_cast<chunk_call*>(p));
    try {
        c->q->on_lane(c->index);
    } catch (...) {
        c->q->fail(std::current_exception());
    }
}

// Completes the request from a host function: an error that escaped complete() still reaches
// the future.
void finish(stream_request& q) {
    try {
        q.complete();
    } catch (...) {
        try {
            q.done.set_exception(std::current_exception());
        } catch (...) {  // already satisfied: the future has its outcome
        }
    }
}

// The completion of an ordered request, queued last on the caller's stream: a request whose
// queueing failed never gets here.
void CUDART_CB run_completion(void* p) {
    cuda_host_function_scope scope;
    std::unique_ptr<std::shared_ptr<stream_request>> q(static_cast<std::shared_ptr<stream_request>*>(p));
    finish(**q);
}

// The closing item of an unordered request on one lane: the last lane to get here completes it.
void CUDART_CB run_lane_end(void* p) {
    cuda_host_function_scope scope;
    std::unique_ptr<std::shared_ptr<stream_request>> q(static_cast<std::shared_ptr<stream_request>*>(p));
    if ((*q)->lanes_left.fetch_sub(1) == 1) finish(**q);
}

// Queues `fn` (run_completion or run_lane_end) on `s` with a reference to the request.
void queue_request_call(cudaStream_t s, const std::shared_ptr<stream_request>& q, cudaHostFn_t fn) {
    auto call = std::make_unique<std::shared_ptr<stream_request>>(q);
    cuda_check(FERRY_CUDA(cudaLaunchHostFunc, s, fn, call.get()), "cudaLaunchHostFunc",
               {q->file->shown(), q->r.offset, q->r.n});
    call.release();
}

void queue_chunk(cudaStream_t s, const std::shared_ptr<stream_request>& q, std::size_t index) {
    auto call = std::make_unique<chunk_call>(chunk_call{q, index});
    cuda_check(FERRY_CUDA(cudaLaunchHostFunc, s, run_chunk, call.get()), "cudaLaunchHostFunc",
               {q->file->shown(), q->r.offset + q->chunks[index].pos, q->chunks[index].len});
    call.release();
}

/// After queueing failed part-way: what was queued starts nothing new now, but host functions
/// already running may have started file sides and copies still run. Wait for all of it, so
/// that nothing touches the caller's memory or a lane buffer after the error is out.
void drain(stream_request& q, const std::vector<cudaStream_t>& streams) {
    q.cancelled = true;
    for (cudaStream_t s : streams) cudaStreamSynchronize(s);
    for (std::size_t i = 0; i < q.chunks.size(); ++i) q.wait(i);
}

}  // namespace

std::future<std::size_t> file_impl::start_file_side(const request& r, std::size_t pos, std::size_t len, char* host) {
    request part;
    part.dir = r.dir;
    part.mem = host;
    part.n = len;
    part.offset = r.offset + pos;
    part.kind = memory_kind::pinned;
    part.src = source_.get();
    part.how = mover::host;
    part.counted_as = io_path::host;
    part.file_side = true;
    return start(part, &engine_->file_workers());
}

std::future<std::size_t> file_impl::start_on_lanes(const request& r, completion then) {
    // After the work of the calling thread's per-thread stream (which orders itself after the
    // legacy default stream), completed on the lanes: the caller waits on the future.
    return start_streamed(r, reinterpret_cast<stream_t>(cudaStreamPerThread), std::move(then), false);
}

std::future<std::size_t> file_impl::start_on_stream(const request& r, stream_t s, completion then) {
    return start_streamed(r, s, std::move(then), true);
}

std::future<std::size_t> file_impl::start_streamed(const request& r, stream_t s, completion then, bool ordered) {
    if (!cuda_available())
        throw cuda_error(cudaErrorNoDevice, "stream-ordered I/O needs CUDA: " + cuda_unavailable_reason(), {shown_});
    const bool on_gpu = r.kind == memory_kind::device || r.kind == memory_kind::managed;
    if (on_gpu && config_.gds == gds_mode::on)
        throw usage_error("stream-ordered requests go through ferry's pinned stream lanes, not cuFile, and "
                          "FERRY_GDS=on allows cuFile only; read or write without a stream, or use "
                          "FERRY_GDS=auto: " + shown_);
    auto q = std::make_shared<stream_request>();
    q->r = r;
    if (r.is_write()) writes_in_flight.fetch_add(1);  // until q goes
    q->file = shared_from_this();
    q->path = on_gpu ? io_path::staged : io_path::host;
    q->route = route_slot(source_->kind(), to_string(on_gpu ? mover::lanes : mover::host));
    q->then = std::move(then);
    std::future<std::size_t> f = q->done.get_future();
    auto cs = reinterpret_cast<cudaStream_t>(s);
    if (r.n == 0) {
        if (q->then) q->then(0, nullptr);
        q->done.set_value(0);
        return f;
    }
    if (!on_gpu) {
        q->chunks.push_back({0, r.n, r.mem});
        q->jobs = std::make_unique<file_job[]>(1);
        try {
            queue_chunk(cs, q, 0);
            queue_request_call(cs, q, run_completion);
        } catch (...) {
            drain(*q, {cs});  // a file side already under way ends before the error is out
            throw;
        }
        return f;
    }

    stream_request::lay_out(q, cs, r.device, ordered);
    return f;
}

void stream_request::lay_out(const std::shared_ptr<stream_request>& q, cudaStream_t cs, int device, bool ordered) {
    const request& r = q->r;
    const std::string& location = q->file->shown_;  // redacted
    set_device(device);
    stream_lanes& lanes = q->file->engine_->lanes();
    std::lock_guard lock(lanes.enqueue_mutex());
    stream_lanes::device_lanes& d = lanes.on_device(device);
    const std::size_t size = lanes.buffer_size();
    if (q->chunks.empty()) {  // a plain range: chunks of the lanes' buffer size
        for (std::size_t pos = 0; pos < r.n; pos += size) q->chunks.push_back({pos, std::min(size, r.n - pos), nullptr, {}, {}});
    }
    const std::size_t count = q->chunks.size();
    const std::size_t used = std::min(count, d.lanes.size());
    const std::size_t first = d.next;
    d.next = (first + count) % d.lanes.size();
    auto lane = [&](std::size_t i) -> stream_lane& { return d.lanes[(first + i) % d.lanes.size()]; };
    q->lanes = d.lanes.size();
    q->uses.reserve(count);
    for (std::size_t i = 0; i < count; ++i) {
        stream_lane& l = lane(i);
        q->uses.push_back({l.handoff.get(), l.uses});
        q->chunks[i].buffer = l.buffers[l.uses++ % 2].get();
    }
    q->jobs = std::make_unique<file_job[]>(count);
    // A read's first chunk on each lane reads ahead of its host function where it can. Not a
    // write (its file side needs the bytes its copy brings), nor a request ordered on a stream
    // of the caller's, whose file side may not begin before that stream arrives (a host
    // function of the caller's may hold it, or the file may be closed by then).
    if (!r.is_write() && !ordered)
        for (std::size_t i = 0; i < used; ++i) q->start_ahead(i, q);
    std::vector<cudaStream_t> streams;
    for (std::size_t i = 0; i < used; ++i) streams.push_back(lane(i).stream.get());
    try {
        cuda_check(FERRY_CUDA(cudaEventRecord, d.start.get(), cs), "cudaEventRecord (stream-ordered request)", {location, r.offset, r.n});
        for (cudaStream_t ls : streams)
            cuda_check(FERRY_CUDA(cudaStreamWaitEvent, ls, d.start.get(), 0), "cudaStreamWaitEvent", {location, r.offset, r.n});
        for (std::size_t i = 0; i < count; ++i) {
            stream_lane& l = lane(i);
            const lane_chunk& c = q->chunks[i];
            const io_context where{location, r.offset + c.pos, c.len};
            if (r.is_write()) {
                cuda_check(FERRY_CUDA(cudaMemcpyAsync, c.buffer, r.mem + c.pos, c.len, cudaMemcpyDefault, l.stream.get()),
                           "cudaMemcpyAsync (GPU to stream lane)", where);
                queue_chunk(l.stream.get(), q, i);
                continue;
            }
            queue_chunk(l.stream.get(), q, i);
            if (c.copies.empty()) {
                cuda_check(FERRY_CUDA(cudaMemcpyAsync, r.mem + c.pos, c.buffer, c.len, cudaMemcpyDefault, l.stream.get()),
                           "cudaMemcpyAsync (stream lane to GPU)", where);
                continue;
            }
            for (const lane_copy& k : c.copies) {
                if (k.rows == 1)
                    cuda_check(FERRY_CUDA(cudaMemcpyAsync, k.dst, c.buffer + k.at, k.width, cudaMemcpyDefault, l.stream.get()),
                               "cudaMemcpyAsync (stream lane to GPU)", where);
                else  // a span: its rows picked out on the way (destination rows packed)
                    cuda_check(FERRY_CUDA(cudaMemcpy2DAsync, k.dst, k.width, c.buffer + k.at, k.pitch, k.width, k.rows,
                                          cudaMemcpyDefault, l.stream.get()),
                               "cudaMemcpy2DAsync (stream lane to GPU)", where);
            }
        }
        if (!ordered) {
            q->lanes_left = used;
            for (std::size_t i = 0; i < used; ++i) queue_request_call(lane(i).stream.get(), q, run_lane_end);
            return;
        }
        for (std::size_t i = 0; i < used; ++i) {
            cuda_check(FERRY_CUDA(cudaEventRecord, lane(i).done.get(), lane(i).stream.get()), "cudaEventRecord (stream lane)", {location, r.offset, r.n});
            cuda_check(FERRY_CUDA(cudaStreamWaitEvent, cs, lane(i).done.get(), 0), "cudaStreamWaitEvent", {location, r.offset, r.n});
        }
        queue_request_call(cs, q, run_completion);
    } catch (...) {
        drain(*q, streams);
        throw;
    }
}

std::future<std::size_t> start_gather(const std::vector<gather>& extents, int device, file_impl::completion then) {
    if (extents.empty() || !extents.front().file) throw usage_error("internal: a gather without extents");
    if (!cuda_available())
        throw cuda_error(cudaErrorNoDevice, "a gather into GPU memory needs CUDA: " + cuda_unavailable_reason(),
                         {extents.front().file->shown_});
    auto q = std::make_shared<stream_request>();
    q->file = extents.front().file;  // its engine's lanes carry the gather
    q->r.dir = direction::read;
    q->r.kind = memory_kind::device;
    q->r.device = device;
    q->path = io_path::staged;
    q->then = std::move(then);
    for (const gather& g : extents) {
        if (!g.file) throw usage_error("internal: a gather extent without a file");
        std::uint64_t bytes = g.rows * g.width;
        q->r.n += static_cast<std::size_t>(bytes);
        auto it = std::find_if(q->counted.begin(), q->counted.end(), [&](const auto& c) { return c.file == g.file; });
        if (it == q->counted.end()) {
            q->counted.push_back({g.file, 0, route_slot(g.file->source_->kind(), to_string(mover::lanes))});
            it = q->counted.end() - 1;
        }
        it->bytes += bytes;
    }
    std::future<std::size_t> f = q->done.get_future();
    if (q->r.n == 0) {
        if (q->then) q->then(0, nullptr);
        q->done.set_value(0);
        return f;
    }
    q->chunks = cut_into_chunks(extents, q->file->engine_->lanes().buffer_size());
    stream_request::lay_out(q, cudaStreamPerThread, device, false);
    return f;
}

}  // namespace ferry::detail
