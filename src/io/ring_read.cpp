// A large read into GPU memory that its caller waits for, through the staging ring
// (io/staging_ring.hpp), driven by the calling thread:
//
//   file workers:     [read c] [read c+1] ... [read c+B-1]      (B - 1 buffers read ahead)
//   calling thread:   wait read c -> queue copy c, record copied[c] -> wait copied[c-1] ->
//                     start read c+B-1 into the buffer of c-1 -> wait read c+1 -> ...
//   ring stream:      [wait the thread's stream] [copy c] [copy c+1] ...
//
// Each copy is queued the moment its buffer is read, so the copy engine always has the next
// copy while reads fill the rest of the ring; a buffer is read into again only after its copy
// finished. The ring's stream starts after the calling thread's per-thread stream, as the
// lanes' requests do, and the read returns once its last copy finished.
#include <chrono>
#include <exception>
#include <future>
#include <vector>

#include "cuda/cuda_runtime.hpp"
#include "io/file_impl.hpp"
#include "trace.hpp"

namespace ferry::detail {

std::size_t file_impl::read_on_ring(const request& r, staging_ring::device_ring& ring) {
    const auto began = std::chrono::steady_clock::now();
    trace_range range("ferry read ring");
    set_device(r.device);
    const std::size_t size = engine_->ring().buffer_size();
    const std::size_t slots = engine_->ring().count();
    const std::size_t chunks = (r.n + size - 1) / size;
    cudaStream_t s = ring.stream.get();
    std::vector<std::future<std::size_t>> reads(slots);  // chunk c's read in reads[c % slots]
    auto where = [&](std::size_t c) {
        const std::size_t pos = c * size;
        return io_context{shown_, r.offset + pos, std::min(size, r.n - pos)};
    };
    auto start_read = [&](std::size_t c) {
        const std::size_t pos = c * size;
        reads[c % slots] = start_file_side(r, pos, std::min(size, r.n - pos), ring.buffer(c % slots, size));
    };
    try {
        cuda_check(FERRY_CUDA(cudaEventRecord, ring.start.get(), cudaStreamPerThread), "cudaEventRecord (staging ring)",
                   {shown_, r.offset, r.n});
        cuda_check(FERRY_CUDA(cudaStreamWaitEvent, s, ring.start.get(), 0), "cudaStreamWaitEvent (staging ring)",
                   {shown_, r.offset, r.n});
        std::size_t started = 0;
        for (; started + 1 < slots && started < chunks; ++started) start_read(started);
        for (std::size_t c = 0; c < chunks; ++c) {
            const std::size_t len = reads[c % slots].get();  // the read's error, if any, ends the request here
            cuda_check(FERRY_CUDA(cudaMemcpyAsync, r.mem + c * size, ring.buffer(c % slots, size), len,
                                  cudaMemcpyDefault, s),
                       "cudaMemcpyAsync (staging ring to GPU)", where(c));
            cuda_check(FERRY_CUDA(cudaEventRecord, ring.copied[c % slots].get(), s), "cudaEventRecord (staging ring)",
                       where(c));
            if (started < chunks) {  // started == c + slots - 1: the buffer of chunk c - 1
                if (c > 0)
                    cuda_check(FERRY_CUDA(cudaEventSynchronize, ring.copied[(c - 1) % slots].get()),
                               "cudaEventSynchronize (staging ring)", where(c - 1));
                start_read(started++);
            }
        }
        cuda_check(FERRY_CUDA(cudaStreamSynchronize, s), "cudaStreamSynchronize (staging ring)", {shown_, r.offset, r.n});
    } catch (...) {
        // Nothing touches the caller's memory or a ring buffer once the error is out: the reads
        // started end, and so do the copies queued.
        for (auto& f : reads)
            if (f.valid()) f.wait();
        cudaStreamSynchronize(s);
        throw;
    }
    auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - began).count();
    count(direction::read, r.counted_as, r.route, r.n, static_cast<std::uint64_t>(ns), 1);
    return r.n;
}

}  // namespace ferry::detail
