// Owners of CUDA resources: a stream, an event, a pinned host allocation. Move-only; the
// destructor releases and ignores errors (it may run at process exit, with CUDA unloading).
// Creation goes through the fault-injection seam (FERRY_CUDA) and throws cuda_error.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <utility>

namespace ferry::detail {

class owned_stream {
public:
    owned_stream() = default;
    /// A non-blocking stream on the current device.
    static owned_stream create(const char* what);
    owned_stream(owned_stream&& o) noexcept : s_(std::exchange(o.s_, nullptr)) {}
    owned_stream& operator=(owned_stream&& o) noexcept {
        if (this != &o) {
            reset();
            s_ = std::exchange(o.s_, nullptr);
        }
        return *this;
    }
    owned_stream(const owned_stream&) = delete;
    owned_stream& operator=(const owned_stream&) = delete;
    ~owned_stream() { reset(); }
    cudaStream_t get() const noexcept { return s_; }
    /// Waits for the stream's work, then destroys it.
    void reset() noexcept;

private:
    cudaStream_t s_ = nullptr;
};

class owned_event {
public:
    owned_event() = default;
    /// An event without timing.
    static owned_event create(const char* what);
    owned_event(owned_event&& o) noexcept : e_(std::exchange(o.e_, nullptr)) {}
    owned_event& operator=(owned_event&& o) noexcept {
        if (this != &o) {
            reset();
            e_ = std::exchange(o.e_, nullptr);
        }
        return *this;
    }
    owned_event(const owned_event&) = delete;
    owned_event& operator=(const owned_event&) = delete;
    ~owned_event() { reset(); }
    cudaEvent_t get() const noexcept { return e_; }
    void reset() noexcept;

private:
    cudaEvent_t e_ = nullptr;
};

/// Portable pinned host memory (pin_host_memory), counted in the process's pinned allocations.
class owned_pinned {
public:
    owned_pinned() = default;
    static owned_pinned allocate(std::size_t bytes, const char* what);
    owned_pinned(owned_pinned&& o) noexcept : p_(std::exchange(o.p_, nullptr)) {}
    owned_pinned& operator=(owned_pinned&& o) noexcept {
        if (this != &o) {
            reset();
            p_ = std::exchange(o.p_, nullptr);
        }
        return *this;
    }
    owned_pinned(const owned_pinned&) = delete;
    owned_pinned& operator=(const owned_pinned&) = delete;
    ~owned_pinned() { reset(); }
    char* get() const noexcept { return p_; }
    void reset() noexcept;

private:
    char* p_ = nullptr;
};

}  // namespace ferry::detail
