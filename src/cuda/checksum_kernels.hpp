// CRC-32C of spans of device memory, computed where the bytes are: one kernel launch for any
// number of spans (tensors, or the 64 MiB chunks of large ones), so checking a checkpoint costs
// one pass over device memory instead of a copy to the host.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "ferry/memory.hpp"

namespace ferry::kernels {

/// A span of device memory on the device the call names.
struct crc_span {
    const void* data = nullptr;
    std::uint64_t bytes = 0;
};

/// One CRC-32C pass over spans, queued and not yet waited for: the kernel runs on `s` (after the
/// work already queued there, e.g. the reads that fill the spans) while the caller goes on,
/// reading or queueing further passes. Its scratch memory is stream-ordered where the device
/// has memory pools, so queueing never waits for the device; nothing here synchronizes until
/// wait(). Spans need no alignment and must stay valid until wait() or destruction. Throws
/// cuda_error.
class crc_pass {
public:
    crc_pass(const std::vector<crc_span>& spans, int device, stream_t s);
    crc_pass(crc_pass&& o) noexcept;
    crc_pass& operator=(crc_pass&&) = delete;
    crc_pass(const crc_pass&) = delete;
    crc_pass& operator=(const crc_pass&) = delete;
    /// Waits for the kernel (when wait() was not called) and frees the scratch.
    ~crc_pass();
    /// The CRC-32C (integrity::crc32c's value) of each span, in order. Once.
    std::vector<std::uint32_t> wait();

private:
    void release() noexcept;
    std::vector<std::uint64_t> span_bytes_;
    std::size_t pieces_ = 0;
    int device_ = 0;
    stream_t stream_ = nullptr;
    void* refs_ = nullptr;   // the pieces' addresses and sizes, on the device
    void* regs_ = nullptr;   // one register per piece
    bool pooled_ = false;    // scratch from cudaMallocAsync
    bool waited_ = false;
};

/// crc_pass(spans, device, s).wait(): one kernel on `s`, waited for.
std::vector<std::uint32_t> crc32c_spans(const std::vector<crc_span>& spans, int device, stream_t s);

}  // namespace ferry::kernels
