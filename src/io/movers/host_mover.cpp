// The host mover: parallel reads and writes straight between a source and host memory.
#include "io/movers/mover.hpp"

#include <algorithm>

#include "io/movers/staged_pipeline.hpp"
#include "stop.hpp"

namespace ferry::detail {

namespace {

// A write to a local file goes in pieces of at most this, with a stop check between them, so a
// stopped save (Ctrl-C) ends after the piece in flight rather than the whole task (up to 32
// MiB: 0.09-0.11 s on the 2-core development machine, about 12 ms for 4 MiB). The extra
// pwrite calls cost nothing measurable against the copy into the page cache. A remote source's
// requests keep their size (an upload part is one request).
constexpr std::size_t stoppable_write = 4 << 20;

}  // namespace

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
        if (src.traits().remote) {
            src.write(p.mem(), p.n, p.offset, where);
            return;
        }
        for (std::size_t at = 0; at < p.n;) {
            if (at > 0) throw_if_stopped(where.path);
            const std::size_t len = std::min(stoppable_write, p.n - at);
            src.write(p.mem() + at, len, p.offset + at, where);
            at += len;
        }
        return;
    }
    // An aligned source (O_DIRECT) reads into the worker's aligned buffers and the bytes are
    // copied out: the caller's memory has no alignment.
    if (src.traits().align && bounce)
        stage_read(src, *bounce, buffer_size, p.mem(), std::nullopt, p.n, p.offset, where);
    else src.read(p.mem(), p.n, p.offset, where);
}

}  // namespace ferry::detail
