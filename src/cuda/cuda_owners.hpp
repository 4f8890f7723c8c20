// Owners of CUDA resources: a stream, an event, a pinned host allocation. One template holds
// the ownership rules (move-only; the destructor releases and ignores errors, since it may run
// at process exit with CUDA unloading); each resource adds how it is made and released.
// Creation goes through the fault-injection seam (FERRY_CUDA) and throws cuda_error.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <utility>

namespace ferry::detail {

/// Owns one handle of type Handle (null: none) and gives it to Release once. Not thread-safe:
/// one owner is used by one thread at a time.
template <class Handle, void (*Release)(Handle) noexcept>
class cuda_owner {
public:
    cuda_owner() = default;
    explicit cuda_owner(Handle h) noexcept : h_(h) {}
    cuda_owner(cuda_owner&& o) noexcept : h_(std::exchange(o.h_, Handle{})) {}
    cuda_owner& operator=(cuda_owner&& o) noexcept {
        if (this != &o) {
            reset();
            h_ = std::exchange(o.h_, Handle{});
        }
        return *this;
    }
    cuda_owner(const cuda_owner&) = delete;
    cuda_owner& operator=(const cuda_owner&) = delete;
    ~cuda_owner() { reset(); }
    Handle get() const noexcept { return h_; }
    /// Releases the handle now (errors ignored); the owner is empty afterwards.
    void reset() noexcept {
        if (h_) Release(std::exchange(h_, Handle{}));
    }

private:
    Handle h_{};
};

/// Waits for the stream's work, then destroys it.
void release_stream(cudaStream_t s) noexcept;
void release_event(cudaEvent_t e) noexcept;
void release_pinned(char* p) noexcept;

class owned_stream : public cuda_owner<cudaStream_t, release_stream> {
public:
    using cuda_owner::cuda_owner;
    /// A non-blocking stream on the current device.
    static owned_stream create(const char* what);
};

class owned_event : public cuda_owner<cudaEvent_t, release_event> {
public:
    using cuda_owner::cuda_owner;
    /// An event without timing.
    static owned_event create(const char* what);
};

/// Portable pinned host memory (pin_host_memory), counted in the process's pinned allocations.
class owned_pinned : public cuda_owner<char*, release_pinned> {
public:
    using cuda_owner::cuda_owner;
    static owned_pinned allocate(std::size_t bytes, const char* what);
};

}  // namespace ferry::detail
