#include "cuda/cuda_owners.hpp"

#include "cuda/cuda_runtime.hpp"

namespace ferry::detail {

owned_stream owned_stream::create(const char* what) {
    owned_stream s;
    cuda_check(FERRY_CUDA(cudaStreamCreateWithFlags, &s.s_, cudaStreamNonBlocking), what);
    return s;
}

void owned_stream::reset() noexcept {
    if (!s_) return;
    cudaStreamSynchronize(s_);
    cudaStreamDestroy(std::exchange(s_, nullptr));
}

owned_event owned_event::create(const char* what) {
    owned_event e;
    cuda_check(FERRY_CUDA(cudaEventCreateWithFlags, &e.e_, cudaEventDisableTiming), what);
    return e;
}

void owned_event::reset() noexcept {
    if (e_) cudaEventDestroy(std::exchange(e_, nullptr));
}

owned_pinned owned_pinned::allocate(std::size_t bytes, const char* what) {
    owned_pinned o;
    o.p_ = pin_host_memory(bytes, what);
    return o;
}

void owned_pinned::reset() noexcept {
    if (!p_) return;
    unpin_host_memory(std::exchange(p_, nullptr));
}

}  // namespace ferry::detail
