// The staged mover and the pipeline under it (staged_pipeline.hpp).
#include <algorithm>
#include <cstring>
#include <vector>

#include "cuda/cuda_runtime.hpp"
#include "io/movers/mover.hpp"
#include "io/movers/staged_pipeline.hpp"

namespace ferry::detail {
namespace {

// Waits for every copy this slot queued on `q` and marks its buffers free.
void drain(staging_slot& slot, staging_slot::device_queue& q, const io_context& where) {
    cuda_check(FERRY_CUDA(cudaStreamSynchronize, q.stream.get()), "cudaStreamSynchronize (staged)", where);
    std::fill(slot.pending.begin(), slot.pending.end(), nullptr);
}

// The bytes of a streaming source (a remote response body) as they arrive: copied into the
// worker's pinned buffers in turn, each full buffer sent to the GPU at once while the same
// response keeps arriving into the next one. One request per piece instead of one per buffer:
// with 2 MiB buffers and 8 MiB ranges, the chunked loop below made four ranged GETs of 2 MiB
// per range, each waiting for its own round trip and leaving its connection idle meanwhile,
// and none of them overlapped the network with the copy to the GPU.
class device_sink : public byte_sink {
public:
    device_sink(staging_slot& slot, staging_slot::device_queue& q, std::size_t buffer_size, char* dst,
                std::uint64_t offset, const io_context& where)
        : slot_(slot), q_(q), buffer_size_(buffer_size), dst_(dst), offset_(offset), where_(where) {}

    void consume(const char* data, std::size_t n) override {
        while (n > 0) {
            if (!buf_) take();
            std::size_t k = std::min(n, buffer_size_ - fill_);
            std::memcpy(buf_ + fill_, data, k);
            fill_ += k;
            data += k;
            n -= k;
            if (fill_ == buffer_size_) flush();
        }
    }
    /// Sends the last, partial buffer.
    void flush() {
        if (!buf_ || fill_ == 0) return;
        io_context at{where_.path, offset_ + pos_, fill_};
        cuda_check(FERRY_CUDA(cudaMemcpyAsync, dst_ + pos_, buf_, fill_, cudaMemcpyHostToDevice, q_.stream.get()),
                   "cudaMemcpyAsync (staged read)", at);
        cuda_check(FERRY_CUDA(cudaEventRecord, q_.events[index_].get(), q_.stream.get()), "cudaEventRecord (staged)", at);
        slot_.pending[index_] = q_.events[index_].get();
        pos_ += fill_;
        buf_ = nullptr;
        fill_ = 0;
    }

private:
    void take() {
        index_ = slot_.next;
        slot_.next = (slot_.next + 1) % slot_.buffers.size();
        slot_.wait_free(index_);
        buf_ = slot_.buffers[index_];
        fill_ = 0;
    }

    staging_slot& slot_;
    staging_slot::device_queue& q_;
    const std::size_t buffer_size_;
    char* const dst_;
    const std::uint64_t offset_;
    const io_context& where_;
    std::size_t pos_ = 0;   // bytes queued for the GPU
    std::size_t fill_ = 0;  // bytes in the current buffer
    std::size_t index_ = 0;
    char* buf_ = nullptr;
};

}  // namespace

void stage_read(source& src, staging_slot& slot, std::size_t buffer_size, char* dst, std::optional<int> device,
                std::size_t n, std::uint64_t offset, const io_context& where) {
    const std::size_t chunk = src.payload(buffer_size);
    staging_slot::device_queue* q = device ? &slot.on_device(*device) : nullptr;
    if (device) set_device(*device);
    try {
        if (q && src.traits().streams) {
            device_sink sink(slot, *q, buffer_size, dst, offset, where);
            src.read_stream(n, offset, sink, where);
            sink.flush();
            drain(slot, *q, where);
            return;
        }
        for (std::size_t pos = 0; pos < n;) {
            std::size_t len = std::min(chunk, n - pos);
            std::size_t i = slot.next;
            slot.next = (slot.next + 1) % slot.buffers.size();
            slot.wait_free(i);
            char* buf = slot.buffers[i];
            io_context at{where.path, offset + pos, len};
            const char* data = src.read_into(buf, buffer_size, len, offset + pos, at);
            if (q) {
                cuda_check(FERRY_CUDA(cudaMemcpyAsync, dst + pos, data, len, cudaMemcpyHostToDevice, q->stream.get()),
                           "cudaMemcpyAsync (staged read)", at);
                cuda_check(FERRY_CUDA(cudaEventRecord, q->events[i].get(), q->stream.get()), "cudaEventRecord (staged)", at);
                slot.pending[i] = q->events[i].get();
            } else {
                std::memcpy(dst + pos, data, len);
            }
            pos += len;
        }
        if (q) drain(slot, *q, where);
    } catch (...) {
        // Never leave a copy in flight into memory the caller may free after the error.
        if (q) {
            cudaStreamSynchronize(q->stream.get());
            std::fill(slot.pending.begin(), slot.pending.end(), nullptr);
        }
        throw;
    }
}

void stage_write(source& dst, staging_slot& slot, std::size_t buffer_size, const char* from, int device,
                 std::size_t n, std::uint64_t offset, const io_context& where) {
    staging_slot::device_queue& q = slot.on_device(device);
    set_device(device);
    const std::size_t nbuf = slot.buffers.size();
    // Copies run ahead of the writes by up to nbuf - 1 chunks.
    struct queued {
        std::size_t buffer, pos, len;
    };
    std::vector<queued> ring;
    ring.reserve(nbuf);
    std::size_t issued = 0;  // bytes whose copy to a buffer was queued
    auto issue = [&] {
        std::size_t len = std::min(buffer_size, n - issued);
        std::size_t i = slot.next;
        slot.next = (slot.next + 1) % nbuf;
        slot.wait_free(i);
        io_context at{where.path, offset + issued, len};
        cuda_check(FERRY_CUDA(cudaMemcpyAsync, slot.buffers[i], from + issued, len, cudaMemcpyDeviceToHost, q.stream.get()),
                   "cudaMemcpyAsync (staged write)", at);
        cuda_check(FERRY_CUDA(cudaEventRecord, q.events[i].get(), q.stream.get()), "cudaEventRecord (staged)", at);
        slot.pending[i] = q.events[i].get();
        ring.push_back({i, issued, len});
        issued += len;
    };
    try {
        std::size_t head = 0;  // index into ring of the next chunk to write
        while (issued < n && ring.size() - head < nbuf - 1) issue();
        while (head < ring.size()) {
            queued c = ring[head++];
            slot.wait_free(c.buffer);  // its copy from the GPU has landed
            if (issued < n) issue();   // keep the GPU busy while this chunk is written
            dst.write(slot.buffers[c.buffer], c.len, offset + c.pos, {where.path, offset + c.pos, c.len});
        }
    } catch (...) {
        cudaStreamSynchronize(q.stream.get());
        std::fill(slot.pending.begin(), slot.pending.end(), nullptr);
        throw;
    }
}

void move_staged(source& src, const piece& p, staging_slot& slot, std::size_t buffer_size, const io_context& where) {
    if (p.dir == direction::write) stage_write(src, slot, buffer_size, p.mem(), p.device, p.n, p.offset, where);
    else stage_read(src, slot, buffer_size, p.mem(), p.device, p.n, p.offset, where);
}

}  // namespace ferry::detail
