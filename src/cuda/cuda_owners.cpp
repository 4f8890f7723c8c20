#include "cuda/cuda_owners.hpp"

#include "cuda/cuda_runtime.hpp"

namespace ferry::detail {

void release_stream(cudaStream_t s) noexcept {
    cudaStreamSynchronize(s);
    cudaStreamDestroy(s);
}

void release_event(cudaEvent_t e) noexcept { cudaEventDestroy(e); }

void release_pinned(char* p) noexcept { unpin_host_memory(p); }

owned_stream owned_stream::create(const char* what) {
    cudaStream_t s = nullptr;
    cuda_check(FERRY_CUDA(cudaStreamCreateWithFlags, &s, cudaStreamNonBlocking), what);
    return owned_stream(s);
}

owned_event owned_event::create(const char* what) {
    cudaEvent_t e = nullptr;
    cuda_check(FERRY_CUDA(cudaEventCreateWithFlags, &e, cudaEventDisableTiming), what);
    return owned_event(e);
}

owned_pinned owned_pinned::allocate(std::size_t bytes, const char* what) {
    return owned_pinned(pin_host_memory(bytes, what));
}

}  // namespace ferry::detail
