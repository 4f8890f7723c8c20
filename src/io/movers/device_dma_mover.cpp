// The device DMA mover: the source itself moves bytes to and from GPU memory (cuFile).
#include "cuda/cuda_runtime.hpp"
#include "io/movers/mover.hpp"

namespace ferry::detail {

void move_device_dma(source& src, const piece& p, const io_context& where) {
    set_device(p.device);
    if (p.dir == direction::write) src.write_device(p.base, p.pos, p.n, p.offset, where);
    else src.read_device(p.base, p.pos, p.n, p.offset, where);
}

}  // namespace ferry::detail
