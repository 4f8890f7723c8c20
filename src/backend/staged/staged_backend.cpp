#include "backend/staged/staged_backend.hpp"

#include <algorithm>
#include <cstring>

#include "backend/direct/direct_read.hpp"
#include "backend/host/host_backend.hpp"
#include "cuda/cuda_runtime.hpp"
#include "os/posix_io.hpp"

namespace ferry::detail {
namespace {

// Waits for every copy this slot queued on `q` and marks its buffers free.
void drain(staging_slot& slot, staging_slot::device_queue& q, const io_context& where) {
    cuda_check(FERRY_CUDA(cudaStreamSynchronize, q.stream), "cudaStreamSynchronize (staged)", where);
    std::fill(slot.pending.begin(), slot.pending.end(), nullptr);
}

}  // namespace

void staged_read(staging_slot& slot, std::size_t buffer_size, const staged_source& src, char* dst,
                 bool to_device, int device, std::size_t n, std::uint64_t offset, const io_context& where) {
    std::size_t chunk = src.align ? direct_payload(buffer_size, src.align) : buffer_size;
    staging_slot::device_queue* q = to_device ? &slot.on_device(device) : nullptr;
    if (to_device) set_device(device);
    try {
        for (std::size_t pos = 0; pos < n;) {
            std::size_t len = std::min(chunk, n - pos);
            std::size_t i = slot.next;
            slot.next = (slot.next + 1) % slot.buffers.size();
            slot.wait_free(i);
            char* buf = slot.buffers[i];
            const char* data = buf;
            io_context at{where.path, offset + pos, len};
            if (src.align) {
                data = direct_read(src.fd, src.align, buf, buffer_size, len, offset + pos, at);
            } else {
                host_read(src.fd, buf, len, offset + pos, at);
            }
            if (to_device) {
                cuda_check(FERRY_CUDA(cudaMemcpyAsync, dst + pos, data, len, cudaMemcpyHostToDevice, q->stream),
                           "cudaMemcpyAsync (staged read)", at);
                cuda_check(FERRY_CUDA(cudaEventRecord, q->events[i], q->stream), "cudaEventRecord (staged)", at);
                slot.pending[i] = q->events[i];
            } else {
                std::memcpy(dst + pos, data, len);
            }
            pos += len;
        }
        if (q) drain(slot, *q, where);
    } catch (...) {
        // Never leave a copy in flight into memory the caller may free after the error.
        if (q) {
            cudaStreamSynchronize(q->stream);
            std::fill(slot.pending.begin(), slot.pending.end(), nullptr);
        }
        throw;
    }
}

void staged_write(staging_slot& slot, std::size_t buffer_size, int fd, const char* src, int device,
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
        cuda_check(FERRY_CUDA(cudaMemcpyAsync, slot.buffers[i], src + issued, len, cudaMemcpyDeviceToHost, q.stream),
                   "cudaMemcpyAsync (staged write)", at);
        cuda_check(FERRY_CUDA(cudaEventRecord, q.events[i], q.stream), "cudaEventRecord (staged)", at);
        slot.pending[i] = q.events[i];
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
            host_write(fd, slot.buffers[c.buffer], c.len, offset + c.pos, {where.path, offset + c.pos, c.len});
        }
    } catch (...) {
        cudaStreamSynchronize(q.stream);
        std::fill(slot.pending.begin(), slot.pending.end(), nullptr);
        throw;
    }
}

}  // namespace ferry::detail
