// Stream-ordered requests (file::read_async / write_async with a stream).
//
// CUDA's rule for host functions is that they make no CUDA call and wait on no CUDA work that
// the stream does not already order before them; a driver may serialize them with other work.
// So a request is laid out on streams at the call, all of it ordered in ways CUDA can see:
//
//   caller's stream:  ... earlier work, [record start] ........ [wait lanes' done] [complete] ...
//   lane k:           [wait start] [file side of chunk i] [copy chunk i] ... [record done]
//
// For a read the file side (a host function) fills the lane's pinned buffer and the copy moves
// it to the GPU; for a write the copy comes first and the file side writes the buffer out. The
// file side runs on the engine's file workers, which never wait on CUDA. A request to or from
// host memory is only a file side and a completion on the caller's stream.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <mutex>

#include "cuda/cuda_runtime.hpp"
#include "io/file_impl.hpp"

namespace ferry::detail {

/// One stream-ordered request, shared by the host functions that carry it out.
struct stream_request {
    std::shared_ptr<file_impl> file;
    request r;
    io_path path = io_path::host;  ///< what the stats record
    std::promise<std::size_t> done;
    std::atomic<bool> cancelled{false};  ///< queueing failed part-way: chunks already queued do nothing
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
        file->count(r.is_write, path, r.n, static_cast<std::uint64_t>(ns), 1);
        done.set_value(r.n);
    }
};

namespace {

struct chunk_call {
    std::shared_ptr<stream_request> q;
    std::size_t pos, len;
    char* host;
};

void CUDART_CB run_chunk(void* p) {
    cuda_host_function_scope scope;
    std::unique_ptr<chunk_call> c(static_cast<chunk_call*>(p));
    stream_request& q = *c->q;
    if (q.cancelled || q.failed()) return;
    try {
        q.file->run_file_side(q.r, c->pos, c->len, c->host);
    } catch (...) {
        q.fail(std::current_exception());
    }
}

void CUDART_CB run_completion(void* p) {
    cuda_host_function_scope scope;
    std::unique_ptr<std::shared_ptr<stream_request>> q(static_cast<std::shared_ptr<stream_request>*>(p));
    if ((*q)->cancelled) return;
    (*q)->complete();
}

void queue_chunk(cudaStream_t s, const std::shared_ptr<stream_request>& q, std::size_t pos, std::size_t len, char* host) {
    auto call = std::make_unique<chunk_call>(chunk_call{q, pos, len, host});
    cuda_check(FERRY_CUDA(cudaLaunchHostFunc, s, run_chunk, call.get()), "cudaLaunchHostFunc",
               {q->file->path(), q->r.offset + pos, len});
    call.release();
}

void queue_completion(cudaStream_t s, const std::shared_ptr<stream_request>& q) {
    auto call = std::make_unique<std::shared_ptr<stream_request>>(q);
    cuda_check(FERRY_CUDA(cudaLaunchHostFunc, s, run_completion, call.get()), "cudaLaunchHostFunc",
               {q->file->path(), q->r.offset, q->r.n});
    call.release();
}

}  // namespace

void file_impl::run_file_side(const request& r, std::size_t pos, std::size_t len, char* host) {
    {
        std::lock_guard lock(inflight_mutex_);
        if (closed_) throw usage_error("file was closed before its stream reached the request: " + path_);
        ++inflight_;
    }
    struct leave {
        file_impl* f;
        ~leave() {
            {
                std::lock_guard lock(f->inflight_mutex_);
                --f->inflight_;
            }
            f->inflight_cv_.notify_all();
        }
    } guard{this};
    request part;
    part.is_write = r.is_write;
    part.mem = host;
    part.n = len;
    part.offset = r.offset + pos;
    part.kind = memory_kind::pinned;
    part.path = io_path::host;
    part.counted = false;
    start(part, &engine_->file_workers()).get();
}

std::future<std::size_t> file_impl::start_on_stream(const request& r, stream_t s) {
    if (!cuda_available())
        throw cuda_error(cudaErrorNoDevice, "stream-ordered I/O needs CUDA: " + cuda_unavailable_reason(), {path_});
    const bool on_gpu = r.kind == memory_kind::device || r.kind == memory_kind::managed;
    if (on_gpu && config_.gds == gds_mode::on)
        throw usage_error("stream-ordered requests go through ferry's pinned stream lanes, not cuFile, and "
                          "FERRY_GDS=on allows cuFile only; read or write without a stream, or use "
                          "FERRY_GDS=auto: " + path_);
    auto q = std::make_shared<stream_request>();
    q->file = shared_from_this();
    q->r = r;
    q->path = on_gpu ? io_path::staged : io_path::host;
    std::future<std::size_t> f = q->done.get_future();
    auto cs = reinterpret_cast<cudaStream_t>(s);
    if (r.n == 0) {
        q->done.set_value(0);
        return f;
    }
    if (!on_gpu) {
        try {
            queue_chunk(cs, q, 0, r.n, r.mem);
            queue_completion(cs, q);
        } catch (...) {
            q->cancelled = true;
            cudaStreamSynchronize(cs);  // a file side already under way ends before the error is out
            throw;
        }
        return f;
    }

    set_device(r.device);
    stream_lanes& lanes = engine_->lanes();
    std::lock_guard lock(lanes.enqueue_mutex());
    stream_lanes::device_lanes& d = lanes.on_device(r.device);
    const std::size_t size = lanes.buffer_size();
    const std::size_t chunks = (r.n + size - 1) / size;
    const std::size_t used = std::min(chunks, d.lanes.size());
    const std::size_t first = d.next;
    d.next = (first + chunks) % d.lanes.size();
    auto lane = [&](std::size_t i) -> stream_lane& { return d.lanes[(first + i) % d.lanes.size()]; };
    try {
        cuda_check(FERRY_CUDA(cudaEventRecord, d.start, cs), "cudaEventRecord (stream-ordered request)", {path_, r.offset, r.n});
        for (std::size_t i = 0; i < used; ++i)
            cuda_check(FERRY_CUDA(cudaStreamWaitEvent, lane(i).stream, d.start, 0), "cudaStreamWaitEvent", {path_, r.offset, r.n});
        for (std::size_t c = 0; c < chunks; ++c) {
            stream_lane& l = lane(c);
            const std::size_t pos = c * size;
            const std::size_t len = std::min(size, r.n - pos);
            const io_context where{path_, r.offset + pos, len};
            if (!r.is_write) {
                queue_chunk(l.stream, q, pos, len, l.buffer);
                cuda_check(FERRY_CUDA(cudaMemcpyAsync, r.mem + pos, l.buffer, len, cudaMemcpyDefault, l.stream),
                           "cudaMemcpyAsync (stream lane to GPU)", where);
            } else {
                cuda_check(FERRY_CUDA(cudaMemcpyAsync, l.buffer, r.mem + pos, len, cudaMemcpyDefault, l.stream),
                           "cudaMemcpyAsync (GPU to stream lane)", where);
                queue_chunk(l.stream, q, pos, len, l.buffer);
            }
        }
        for (std::size_t i = 0; i < used; ++i) {
            cuda_check(FERRY_CUDA(cudaEventRecord, lane(i).done, lane(i).stream), "cudaEventRecord (stream lane)", {path_, r.offset, r.n});
            cuda_check(FERRY_CUDA(cudaStreamWaitEvent, cs, lane(i).done, 0), "cudaStreamWaitEvent", {path_, r.offset, r.n});
        }
        queue_completion(cs, q);
    } catch (...) {
        // What was queued does nothing now, but its copies still run: let them finish, so that
        // nothing lands in the caller's memory after the error was reported.
        q->cancelled = true;
        for (std::size_t i = 0; i < used; ++i) cudaStreamSynchronize(lane(i).stream);
        throw;
    }
    return f;
}

}  // namespace ferry::detail
