// Stream-ordered requests (file::read_async / write_async with a stream).
//
// CUDA's rule for host functions is that they make no CUDA call and wait on no CUDA work that
// the stream does not already order before them; a driver may serialize them with other work.
// So a request is laid out on streams at the call, all of it ordered in ways CUDA can see:
//
//   caller's stream:  ... earlier work, [record start] ....... [wait lanes' done] [complete] ...
//   lane k:           [wait start] [host fn chunk i] [copy chunk i] [host fn chunk i+N] ... [record done]
//
// The chunks of a request go to the N lanes in turn; each lane has two pinned buffers that its
// chunks use alternately. The file side of a chunk (pread into, or pwrite from, its buffer) runs
// on the engine's file workers, which never wait on CUDA; host functions only start file sides
// and wait for them.
//
// Reads run ahead: the host function of chunk i waits for the read of chunk i and starts the
// read of chunk i+N (the next chunk on its lane, into the other buffer, whose last copy the lane
// has finished by then), so N reads are in flight while the lanes copy. Writes run behind: the
// host function of chunk i starts its write and waits for the write of chunk i-N, whose buffer
// the lane's next copy fills; a lane's last chunk of the request waits for its own.
//
// A request to or from host memory is one file side and a completion on the caller's stream.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <mutex>
#include <vector>

#include "cuda/cuda_runtime.hpp"
#include "io/file_impl.hpp"

namespace ferry::detail {

namespace {

/// The file side of one chunk, once started.
struct file_job {
    std::atomic<bool> started{false};
    std::future<std::size_t> done;
};

struct chunk {
    std::size_t pos, len;
    char* buffer;  ///< the lane buffer, or the caller's host memory
};

}  // namespace

/// One stream-ordered request, shared by the host functions that carry it out.
struct stream_request {
    std::shared_ptr<file_impl> file;
    request r;
    io_path path = io_path::host;  ///< what the stats record
    int route = -1;                ///< and their slot of (source, mover)
    std::size_t lanes = 1;         ///< chunk i + lanes is the next chunk on chunk i's lane
    std::vector<chunk> chunks;
    std::unique_ptr<file_job[]> jobs;
    std::promise<std::size_t> done;
    std::atomic<bool> cancelled{false};  ///< queueing failed part-way: start no more file sides
    std::mutex error_mutex;
    std::exception_ptr error;
    std::chrono::steady_clock::time_point began = std::chrono::steady_clock::now();

    ~stream_request() {
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

    /// Starts the file side of chunk i unless it was started or the request failed.
    void start(std::size_t i) {
        if (i >= chunks.size() || cancelled || failed()) return;
        if (jobs[i].started.exchange(true)) return;
        try {
            jobs[i].done = file->start_file_side(r, chunks[i].pos, chunks[i].len, chunks[i].buffer);
        } catch (...) {
            fail(std::current_exception());
        }
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
            start(i);  // the first chunk on its lane; later ones were started ahead
            start(i + lanes);
            wait(i);
        } else {
            start(i);
            if (i >= lanes) wait(i - lanes);        // frees the buffer the lane fills next
            if (i + lanes >= chunks.size()) wait(i);  // the lane's last chunk of this request
        }
    }

    void complete() {
        std::exception_ptr e;
        {
            std::lock_guard lock(error_mutex);
            e = error;
        }
        if (e) {
            done.set_exception(e);
            return;
        }
        auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - began).count();
        file->count(r.dir, path, route, r.n, static_cast<std::uint64_t>(ns), 1);
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

void CUDART_CB run_completion(void* p) {
    cuda_host_function_scope scope;
    std::unique_ptr<std::shared_ptr<stream_request>> q(static_cast<std::shared_ptr<stream_request>*>(p));
    try {
        (*q)->complete();  // queued last: a request whose queueing failed never gets here
    } catch (...) {
        try {
            (*q)->done.set_exception(std::current_exception());
        } catch (...) {  // already satisfied: the future has its outcome
        }
    }
}

void queue_chunk(cudaStream_t s, const std::shared_ptr<stream_request>& q, std::size_t index) {
    auto call = std::make_unique<chunk_call>(chunk_call{q, index});
    cuda_check(FERRY_CUDA(cudaLaunchHostFunc, s, run_chunk, call.get()), "cudaLaunchHostFunc",
               {q->file->path(), q->r.offset + q->chunks[index].pos, q->chunks[index].len});
    call.release();
}

void queue_completion(cudaStream_t s, const std::shared_ptr<stream_request>& q) {
    auto call = std::make_unique<std::shared_ptr<stream_request>>(q);
    cuda_check(FERRY_CUDA(cudaLaunchHostFunc, s, run_completion, call.get()), "cudaLaunchHostFunc",
               {q->file->path(), q->r.offset, q->r.n});
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

std::future<std::size_t> file_impl::start_on_stream(const request& r, stream_t s) {
    if (!cuda_available())
        throw cuda_error(cudaErrorNoDevice, "stream-ordered I/O needs CUDA: " + cuda_unavailable_reason(), {shown_});
    const bool on_gpu = r.kind == memory_kind::device || r.kind == memory_kind::managed;
    if (on_gpu && config_.gds == gds_mode::on)
        throw usage_error("stream-ordered requests go through ferry's pinned stream lanes, not cuFile, and "
                          "FERRY_GDS=on allows cuFile only; read or write without a stream, or use "
                          "FERRY_GDS=auto: " + shown_);
    auto q = std::make_shared<stream_request>();
    q->file = shared_from_this();
    q->r = r;
    q->path = on_gpu ? io_path::staged : io_path::host;
    q->route = route_slot(source_->kind(), to_string(on_gpu ? mover::staged : mover::host));
    std::future<std::size_t> f = q->done.get_future();
    auto cs = reinterpret_cast<cudaStream_t>(s);
    if (r.n == 0) {
        q->done.set_value(0);
        return f;
    }
    if (!on_gpu) {
        q->chunks.push_back({0, r.n, r.mem});
        q->jobs = std::make_unique<file_job[]>(1);
        try {
            queue_chunk(cs, q, 0);
            queue_completion(cs, q);
        } catch (...) {
            drain(*q, {cs});  // a file side already under way ends before the error is out
            throw;
        }
        return f;
    }

    set_device(r.device);
    stream_lanes& lanes = engine_->lanes();
    std::lock_guard lock(lanes.enqueue_mutex());
    stream_lanes::device_lanes& d = lanes.on_device(r.device);
    const std::size_t size = lanes.buffer_size();
    const std::size_t count = (r.n + size - 1) / size;
    const std::size_t used = std::min(count, d.lanes.size());
    const std::size_t first = d.next;
    d.next = (first + count) % d.lanes.size();
    auto lane = [&](std::size_t i) -> stream_lane& { return d.lanes[(first + i) % d.lanes.size()]; };
    q->lanes = d.lanes.size();
    q->chunks.reserve(count);
    for (std::size_t i = 0; i < count; ++i) {
        stream_lane& l = lane(i);
        q->chunks.push_back({i * size, std::min(size, r.n - i * size), l.buffers[l.uses++ % 2].get()});
    }
    q->jobs = std::make_unique<file_job[]>(count);
    std::vector<cudaStream_t> streams;
    for (std::size_t i = 0; i < used; ++i) streams.push_back(lane(i).stream.get());
    try {
        cuda_check(FERRY_CUDA(cudaEventRecord, d.start.get(), cs), "cudaEventRecord (stream-ordered request)", {shown_, r.offset, r.n});
        for (cudaStream_t ls : streams)
            cuda_check(FERRY_CUDA(cudaStreamWaitEvent, ls, d.start.get(), 0), "cudaStreamWaitEvent", {shown_, r.offset, r.n});
        for (std::size_t i = 0; i < count; ++i) {
            stream_lane& l = lane(i);
            const chunk& c = q->chunks[i];
            const io_context where{shown_, r.offset + c.pos, c.len};
            if (!r.is_write()) {
                queue_chunk(l.stream.get(), q, i);
                cuda_check(FERRY_CUDA(cudaMemcpyAsync, r.mem + c.pos, c.buffer, c.len, cudaMemcpyDefault, l.stream.get()),
                           "cudaMemcpyAsync (stream lane to GPU)", where);
            } else {
                cuda_check(FERRY_CUDA(cudaMemcpyAsync, c.buffer, r.mem + c.pos, c.len, cudaMemcpyDefault, l.stream.get()),
                           "cudaMemcpyAsync (GPU to stream lane)", where);
                queue_chunk(l.stream.get(), q, i);
            }
        }
        for (std::size_t i = 0; i < used; ++i) {
            cuda_check(FERRY_CUDA(cudaEventRecord, lane(i).done.get(), lane(i).stream.get()), "cudaEventRecord (stream lane)", {shown_, r.offset, r.n});
            cuda_check(FERRY_CUDA(cudaStreamWaitEvent, cs, lane(i).done.get(), 0), "cudaStreamWaitEvent", {shown_, r.offset, r.n});
        }
        queue_completion(cs, q);
    } catch (...) {
        drain(*q, streams);
        throw;
    }
    return f;
}

}  // namespace ferry::detail
