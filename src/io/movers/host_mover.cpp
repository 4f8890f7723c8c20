// The host mover: parallel reads and writes straight between a source and host memory.
#include "io/movers/mover.hpp"
#include "io/movers/staged_pipeline.hpp"

namespace ferry::detail {

std::string_view to_string(mover m) {
    switch (m) {
        case mover::host: return "host";
        case mover::staged: return "staged";
        case mover::device_dma: return "device-dma";
        case mover::lanes: return "lanes";
    }
    return "?";
}

void move_host(source& src, const piece& p, staging_slot* bounce, std::size_t buffer_size, const io_context& where) {
    if (p.dir == direction::write) {
        src.write(p.mem(), p.n, p.offset, where);
        return;
    }
    // An aligned source (O_DIRECT) reads into the worker's aligned buffers and the bytes are
    // copied out: the caller's memory has no alignment.
    if (src.traits().align && bounce)
        stage_read(src, *bounce, buffer_size, p.mem(), std::nullopt, p.n, p.offset, where);
    else src.read(p.mem(), p.n, p.offset, where);
}

}  // namespace ferry::detail
