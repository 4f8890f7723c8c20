// ferry::read_whole_files_to_device: many small files into GPU memory. The files are read as
// read_whole_files reads them (whole, into shared blocks, headers parsed there), but each block
// is pinned memory, and the thread that filled it copies it to its place in device memory at
// once and makes its arrays native and C-ordered there (a byte swap in place, a transpose
// through scratch memory), so the copies and fixes run while other threads read. Per block
// that is one copy and one event; no Python and no lock between the readers but the arena's.
#include "ferry/many.hpp"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "cuda/cuda_runtime.hpp"
#include "cuda/deserialize_kernels.hpp"
#include "formats/whole_files_stage.hpp"

namespace ferry {

// Named, not anonymous: the formats folder compiles as one unit.
namespace whole_file_device {

constexpr std::size_t pinned_step = 4u << 20;
constexpr std::size_t pinned_kept = 32;  // blocks kept between calls, per device: 128 MiB
constexpr std::uint64_t place_align = 256;

/// Pinned blocks of one device, kept from call to call: a block is taken again once the event
/// recorded after its last copy is done, so a load pins what is in flight, not what it loads.
class pinned_ring {
public:
    static pinned_ring& of(int device) {
        static std::mutex m;
        static auto* rings = new std::vector<std::unique_ptr<pinned_ring>>();  // never destroyed
        std::lock_guard lock(m);
        for (auto& r : *rings)
            if (r->device_ == device) return *r;
        rings->push_back(std::unique_ptr<pinned_ring>(new pinned_ring(device)));
        return *rings->back();
    }

    /// Pinned memory for a block of `n` bytes, until every handle of the array is gone;
    /// `reused` says whether it was taken again.
    array take(std::uint64_t n, bool& reused) {
        std::lock_guard lock(m_);
        slot* s = nullptr;
        for (auto& c : slots_)
            if (!c->out && c->size >= n && (!c->recorded || cudaEventQuery(c->copied) == cudaSuccess)) {
                s = c.get();
                break;
            }
        if (!s) {
            auto fresh = std::make_unique<slot>();
            fresh->size = std::max<std::size_t>((n + pinned_step - 1) / pinned_step * pinned_step, pinned_step);
            detail::set_device(device_);
            detail::cuda_check(FERRY_CUDA(cudaEventCreateWithFlags, &fresh->copied, cudaEventDisableTiming),
                               "cudaEventCreate");
            try {
                fresh->p = detail::pin_host_memory(fresh->size, "load_many's pinned blocks");
            } catch (...) {
                cudaEventDestroy(fresh->copied);
                throw;
            }
            slots_.push_back(std::move(fresh));
            s = slots_.back().get();
            reused = false;
        } else {
            reused = true;
        }
        s->out = true;
        s->recorded = false;
        std::shared_ptr<const void> owner(s->p, [this, s](const void*) {
            std::lock_guard back(m_);
            s->out = false;
        });
        return array(std::move(owner), s->p, dtype::uint8, {static_cast<std::int64_t>(s->size)}, placement::pinned());
    }

    /// Records, on `stream`, the end of the copy just queued from the block at `p`.
    void copied(const void* p, stream_t stream) {
        std::lock_guard lock(m_);
        for (auto& c : slots_)
            if (c->p == p) {
                detail::cuda_check(
                    FERRY_CUDA(cudaEventRecord, c->copied, reinterpret_cast<cudaStream_t>(stream)), "cudaEventRecord");
                c->recorded = true;
                return;
            }
    }

    /// After a call (its stream synchronized): idle blocks past the kept number, and those
    /// made for one large file, are freed.
    void trim() {
        std::lock_guard lock(m_);
        for (auto it = slots_.begin(); it != slots_.end();) {
            slot& c = **it;
            const bool spare = slots_.size() > pinned_kept || c.size > pinned_step;
            if (spare && !c.out && (!c.recorded || cudaEventQuery(c.copied) == cudaSuccess)) {
                detail::unpin_host_memory(c.p);
                cudaEventDestroy(c.copied);
                it = slots_.erase(it);
            } else {
                ++it;
            }
        }
    }

private:
    struct slot {
        char* p = nullptr;
        std::size_t size = 0;
        cudaEvent_t copied = nullptr;
        bool out = false;       ///< an array over it is alive
        bool recorded = false;  ///< `copied` marks its last copy
    };

    explicit pinned_ring(int device) : device_(device) {}

    int device_;
    std::mutex m_;
    std::vector<std::unique_ptr<slot>> slots_;
};

/// Device memory handed out in places for blocks, from arenas of the caller's pool.
class arena {
public:
    explicit arena(const whole_files_device_options& o) : o_(o) {}

    array place(std::uint64_t n) {
        std::lock_guard lock(m_);
        const std::uint64_t need = (std::max<std::uint64_t>(n, 1) + place_align - 1) / place_align * place_align;
        if (!mem_ || at_ + need > mem_->nbytes()) {
            const std::uint64_t bytes = std::max(o_.arena_bytes, need);
            array got = o_.allocate ? o_.allocate(bytes)
                                    : array(dtype::uint8, {static_cast<std::int64_t>(bytes)}, placement::cuda(o_.device));
            if (got.nbytes() < bytes) throw usage_error("load_many: a device allocation came back short");
            if (got.where().kind != memory_kind::device || got.where().device != o_.device)
                throw usage_error("load_many: a device allocation is not on cuda:" + std::to_string(o_.device));
            mem_ = std::move(got);
            at_ = (place_align - reinterpret_cast<std::uintptr_t>(mem_->data()) % place_align) % place_align;
            if (at_ + need > mem_->nbytes()) {
                mem_.reset();
                throw usage_error("load_many: a device allocation came back short");
            }
        }
        array out(mem_->owner(), static_cast<unsigned char*>(mem_->data()) + at_, dtype::uint8,
                  {static_cast<std::int64_t>(n)}, placement::cuda(o_.device));
        at_ += need;
        return out;
    }

private:
    const whole_files_device_options& o_;
    std::mutex m_;
    std::optional<array> mem_;
    std::uint64_t at_ = 0;
};

bool transposed(const whole_file_array& a) {
    if (a.layout != storage_order::fortran) return false;
    int big = 0;
    for (auto d : a.shape) big += d > 1;
    return big > 1;  // C and Fortran order coincide otherwise
}

/// Makes one array of a block's device copy native and C-ordered where it lies, on `s`.
void make_native_c(unsigned char* block, whole_file_array& a, int device, stream_t s) {
    const std::size_t item = size_of(a.type.type);
    if (a.nbytes != 0) {
        void* at = block + a.offset;
        if (item > 1 && a.type.order != native_byte_order) {
            const std::size_t unit = swap_unit_of(a.type.type);
            kernels::byte_swap(at, a.nbytes / unit, unit, device, s);
        }
        if (transposed(a)) {
            // Through scratch memory in the stream's pool, ordered on the stream: no device sync.
            void* scratch = nullptr;
            auto cs = reinterpret_cast<cudaStream_t>(s);
            detail::cuda_check(FERRY_CUDA(cudaMallocAsync, &scratch, a.nbytes, cs), "cudaMallocAsync");
            try {
                kernels::fortran_to_c(at, scratch, item, a.shape, device, s);
                kernels::copy(at, scratch, a.nbytes, device, s);
            } catch (...) {
                cudaFreeAsync(scratch, cs);
                throw;
            }
            detail::cuda_check(FERRY_CUDA(cudaFreeAsync, scratch, cs), "cudaFreeAsync");
        }
    }
    a.type.order = native_byte_order;
    a.layout = storage_order::c;
}

}  // namespace whole_file_device

whole_files read_whole_files_to_device(const std::vector<std::string>& paths, const whole_files_options& options,
                                       const whole_files_device_options& device) {
    using namespace whole_file_device;
    if (!detail::cuda_available())
        throw cuda_error(cudaErrorNoDevice, "load_many into GPU memory: " + cuda_unavailable_reason());
    std::optional<ferry::stream> own;
    stream_t s = nullptr;
    if (device.stream) {
        s = *device.stream;
    } else {
        own.emplace(device.device);
        s = own->get();
    }
    pinned_ring& ring = pinned_ring::of(device.device);
    arena places(device);
    whole_files_options o = options;
    std::atomic<std::uint64_t> made{0}, reused{0};
    o.allocate = [&](std::uint64_t bytes) {
        bool again = false;
        array block = ring.take(bytes, again);
        ++(again ? reused : made);
        return block;
    };
    o.on_block = nullptr;
    std::mutex handed;
    auto stage = [&](const array& block, std::uint64_t used, const std::vector<std::size_t>& files,
                     std::vector<whole_file>& all) {
        array place = places.place(used);
        detail::set_device(device.device);
        detail::cuda_check(FERRY_CUDA(cudaMemcpyAsync, place.data(), block.data(), used, cudaMemcpyHostToDevice,
                                      reinterpret_cast<cudaStream_t>(s)),
                           "cudaMemcpyAsync");
        ring.copied(block.data(), s);
        auto* at = static_cast<unsigned char*>(place.data());
        for (std::size_t i : files)
            for (auto& a : all[i].arrays) make_native_c(at, a, device.device, s);
        if (device.on_block) {
            std::lock_guard lock(handed);
            device.on_block(place, files, all);
        }
        return place;
    };
    // Every path out waits for the copies queued: their pinned blocks and places stay in use
    // until then.
    struct drain {
        stream_t s;
        int device;
        ~drain() {
            detail::set_device(device);
            cudaStreamSynchronize(reinterpret_cast<cudaStream_t>(s));
        }
    };
    whole_files out;
    {
        drain waits{s, device.device};
        out = whole_file_reading::read_whole_files_staged(paths, o, stage);
    }
    kernels::synchronize(s, device.device);
    ring.trim();
    out.pinned_made = made;
    out.pinned_reused = reused;
    return out;
}

}  // namespace ferry
