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

}  // namespace

void stage_read(source& src, staging_slot& slot, std::size_t buffer_size, char* dst, std::optional<int> device,
                std::size_t n, std::uint64_t offset, const io_context& where) {
    const std::size_t chunk = src.payload(buffer_size);
    staging_slot::device_queue* q = device ? &slot.on_device(*device) : nullptr;
    if (device) set_device(*device);
    try {
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
