// Movers: how bytes travel between a source and memory, over any source.
//   host:       the source reads into or writes from host memory (through the worker's staging
//               buffers when the source needs alignment, as O_DIRECT does);
//   staged:     source <-> pinned staging buffers <-> GPU memory, pipelined (staged_mover.cpp);
//   device_dma: the source moves bytes to and from GPU memory itself (cuFile);
//   lanes:      a large read into GPU memory through the engine's stream lanes: few, large
//               copies, each from a pinned buffer that many workers fill (io/stream_ordered.cpp).
// Each call of the functions below moves one task's piece of a request on the calling worker;
// a request through the lanes is laid out whole on the lanes' streams instead.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "backend/source.hpp"
#include "ferry/types.hpp"
#include "io/staging_pool.hpp"

namespace ferry::detail {

enum class mover { host, staged, device_dma, lanes };

/// "host", "staged", "device-dma", "lanes".
std::string_view to_string(mover m);

/// One task's piece of a request: `n` bytes at `offset` of the source, and the memory at
/// `base + pos` (device DMA needs the request's base and the position inside it).
struct piece {
    direction dir = direction::read;
    char* base = nullptr;
    std::size_t pos = 0;
    std::size_t n = 0;
    std::uint64_t offset = 0;
    int device = 0;  ///< the device of GPU memory
    char* mem() const noexcept { return base + pos; }
};

/// Host memory. A source with an alignment reads through `bounce`'s buffers (which it then needs).
void move_host(source& src, const piece& p, staging_slot* bounce, std::size_t buffer_size, const io_context& where);
/// GPU (device or managed) memory through `slot`'s pinned buffers.
void move_staged(source& src, const piece& p, staging_slot& slot, std::size_t buffer_size, const io_context& where);
/// GPU memory, moved by the source itself (traits().device_dma).
void move_device_dma(source& src, const piece& p, const io_context& where);

}  // namespace ferry::detail
