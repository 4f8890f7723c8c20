// 2-D copies through the CUDA runtime (see strided_copy.hpp).
#include "cuda/strided_copy.hpp"

#include "cuda/cuda_runtime.hpp"

namespace ferry::kernels {

void copy_2d(void* dst, std::size_t dpitch, const void* src, std::size_t spitch, std::size_t width,
             std::size_t height, int device, stream_t s) {
    if (width == 0 || height == 0) return;
    detail::set_device(device);
    if (dpitch == width && spitch == width) {
        // Packed rows are one span: a 2-D copy of narrow rows runs row by row in the DMA engine.
        detail::cuda_check(FERRY_CUDA(cudaMemcpyAsync, dst, src, width * height, cudaMemcpyDefault, s),
                           "cudaMemcpyAsync");
        return;
    }
    detail::cuda_check(FERRY_CUDA(cudaMemcpy2DAsync, dst, dpitch, src, spitch, width, height,
                                  cudaMemcpyDefault, s),
                       "cudaMemcpy2DAsync");
}

}  // namespace ferry::kernels
