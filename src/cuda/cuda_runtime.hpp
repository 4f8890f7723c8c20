// The boundary between ferry and the CUDA runtime (linked statically): availability, error
// conversion and the few helpers the engine needs. Code outside src/ never sees cudart.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <string>

#include "ferry/error.hpp"
#include "ferry/memory.hpp"

namespace ferry::detail {

/// True when a driver and at least one device are usable. Cached; never throws.
bool cuda_available();

/// The fault-injection seam for CUDA (see os/fault_hook.hpp): every runtime call that can
/// fail, and every kernel launch, asks it first under the call's name. Returns the error an
/// injected fault stands for (cudaErrorMemoryAllocation for ENOMEM, else cudaErrorUnknown), or
/// cudaSuccess. Releases (cudaFree, cudaFreeHost, the destroy calls) and the pointer-kind query
/// are not asked: a failure there is not something a caller could recover from.
/// On a thread inside a CUDA host function every call fails with cudaErrorNotPermitted: CUDA
/// forbids them there, and one could deadlock.
cudaError_t cuda_fault(const char* call);

/// Marks the calling thread as running a CUDA host function (see cuda_fault) while it lives.
class cuda_host_function_scope {
public:
    cuda_host_function_scope();
    ~cuda_host_function_scope();
    cuda_host_function_scope(const cuda_host_function_scope&) = delete;
    cuda_host_function_scope& operator=(const cuda_host_function_scope&) = delete;
};
bool in_cuda_host_function() noexcept;

template <class Call>
cudaError_t cuda_call(const char* name, Call&& call) {
    if (cudaError_t e = cuda_fault(name); e != cudaSuccess) return e;
    return call();
}

/// `FERRY_CUDA(cudaMemcpyAsync, dst, src, n, kind, s)`: the call, behind the seam.
#define FERRY_CUDA(fn, ...) ::ferry::detail::cuda_call(#fn, [&] { return fn(__VA_ARGS__); })

/// Device and pinned allocations alive in this process (device_buffer, pinned_buffer and the
/// staging buffers), for the tests that check nothing leaks after a failure.
struct live_allocations {
    long device = 0;
    long pinned = 0;
};
live_allocations live_cuda_allocations();
void count_pinned_allocation(int delta);

/// Throws cuda_error (with cudaGetErrorString) unless `e` is cudaSuccess.
void cuda_check(cudaError_t e, const char* what, const io_context& where = {});

/// Device of a device or managed pointer (cudaPointerGetAttributes).
int device_of(const void* p);

/// Makes `device` current on this thread (cheap when it already is).
void set_device(int device);

/// Portable page-locked host memory of at least `bytes`, counted in the live pinned
/// allocations: large ones mapped with transparent huge pages, touched by several threads at
/// once and registered with CUDA (several times faster to make than cudaHostAlloc on the H200
/// machine), small ones, or where registration is refused, from cudaHostAlloc. Throws
/// cuda_error. Release with unpin_host_memory.
char* pin_host_memory(std::size_t bytes, const char* what);
void unpin_host_memory(char* p) noexcept;

/// The oldest NVIDIA Linux driver (its major number, e.g. 580) that runs a build for CUDA
/// `cuda_major`, or 0 where ferry has no build for that CUDA major version.
int minimum_driver(int cuda_major);

/// The reason given when the driver (cudaDriverGetVersion's `driver`, e.g. 12080 for 12.8) is
/// older than the CUDA this build was compiled with: the wheel this build is (ferry-cu13), the
/// driver it needs, and the wheel that would run on the driver installed.
std::string driver_too_old_reason(int driver);

}  // namespace ferry::detail
