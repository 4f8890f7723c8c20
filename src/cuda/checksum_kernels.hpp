// CRC-32C of spans of device memory, computed where the bytes are: one kernel launch for any
// number of spans (tensors, or the 64 MiB chunks of large ones), so checking a checkpoint costs
// one pass over device memory instead of a copy to the host.
#pragma once

#include <cstdint>
#include <vector>

#include "ferry/memory.hpp"

namespace ferry::kernels {

/// A span of device memory on the device the call names.
struct crc_span {
    const void* data = nullptr;
    std::uint64_t bytes = 0;
};

/// The CRC-32C (integrity::crc32c's value) of each span, in order. Queues one kernel on `s`
/// (after the work already queued there, e.g. the reads that fill the spans), then waits for
/// it. Spans need no alignment. Throws cuda_error.
std::vector<std::uint32_t> crc32c_spans(const std::vector<crc_span>& spans, int device, stream_t s);

}  // namespace ferry::kernels
