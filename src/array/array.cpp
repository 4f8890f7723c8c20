#include "ferry/array.hpp"

#include <sys/mman.h>

#include <cstdlib>
#include <limits>
#include <new>
#include <utility>

#include "ferry/error.hpp"

namespace ferry {
namespace {

// Host storage is 64-byte aligned so vectorised CPU loops and O_DIRECT-friendly copies never
// meet a misaligned start.
constexpr std::size_t host_alignment = 64;

// Host allocations from this size on are mapped with transparent huge pages asked for (where
// the system sets them to "madvise", as the CPU machine does): the block of a checkpoint of
// 100,000 small tensors (100 MB) took 25,000 page faults on first touch in 4 KiB pages, 50 in
// 2 MiB ones. Smaller ones stay with the allocator.
constexpr std::size_t huge_from = 4 << 20;

std::shared_ptr<const void> map_huge(std::size_t bytes) {
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return nullptr;
    ::madvise(p, bytes, MADV_HUGEPAGE);  // a hint: refused, the pages are small, not wrong
    return std::shared_ptr<const void>(p, [bytes](const void* q) { ::munmap(const_cast<void*>(q), bytes); });
}

std::shared_ptr<const void> allocate(std::size_t n, const placement& where) {
    // Zero-byte arrays still get a distinct, valid pointer: consumers of DLPack and of data()
    // may not expect null.
    std::size_t bytes = n == 0 ? 1 : n;
    switch (where.kind) {
    case memory_kind::host: {
        if (bytes >= huge_from)
            if (auto m = map_huge(bytes)) return m;
        void* p = ::operator new(bytes, std::align_val_t{host_alignment});
        return std::shared_ptr<const void>(
            p, [](const void* q) { ::operator delete(const_cast<void*>(q), std::align_val_t{host_alignment}); });
    }
    case memory_kind::pinned: {
        auto b = std::make_shared<pinned_buffer>(bytes);
        return std::shared_ptr<const void>(b, b->data());
    }
    case memory_kind::device: {
        auto b = std::make_shared<device_buffer>(bytes, where.device);
        return std::shared_ptr<const void>(b, b->data());
    }
    case memory_kind::managed:
        break;
    }
    throw usage_error("ferry does not allocate managed memory; use host, pinned or cuda:N");
}

dlpack::DLDevice to_dl_device(const placement& p) {
    switch (p.kind) {
    case memory_kind::host: return {dlpack::kDLCPU, 0};
    case memory_kind::pinned: return {dlpack::kDLCUDAHost, 0};
    case memory_kind::device: return {dlpack::kDLCUDA, p.device};
    case memory_kind::managed: return {dlpack::kDLCUDAManaged, p.device};
    }
    return {dlpack::kDLCPU, 0};
}

dlpack::DLDataType to_dl_dtype(dtype t) {
    auto bits = static_cast<std::uint8_t>(size_of(t) * 8);
    switch (t) {
    case dtype::bool_: return {dlpack::kDLBool, 8, 1};
    case dtype::int8:
    case dtype::int16:
    case dtype::int32:
    case dtype::int64: return {dlpack::kDLInt, bits, 1};
    case dtype::uint8:
    case dtype::uint16:
    case dtype::uint32:
    case dtype::uint64: return {dlpack::kDLUInt, bits, 1};
    case dtype::float16:
    case dtype::float32:
    case dtype::float64: return {dlpack::kDLFloat, bits, 1};
    case dtype::bfloat16: return {dlpack::kDLBfloat, 16, 1};
    case dtype::complex64:
    case dtype::complex128: return {dlpack::kDLComplex, bits, 1};
    case dtype::float8_e4m3fn: return {dlpack::kDLFloat8_e4m3fn, 8, 1};
    case dtype::float8_e5m2: return {dlpack::kDLFloat8_e5m2, 8, 1};
    }
    return {dlpack::kDLUInt, 8, 1};
}

// What a DLPack export owns: the storage (shared) and the shape/stride arrays DLTensor points
// into. `Managed` is the DLPack struct, placed first so the deleter can find the context.
template <class Managed>
struct dlpack_export {
    Managed managed{};
    std::shared_ptr<const void> owner;
    std::vector<std::int64_t> shape;
    std::vector<std::int64_t> strides;
};

template <class Managed>
dlpack_export<Managed>* make_export(const array& a) {
    if (!a.is_native())
        throw usage_error("DLPack cannot describe a " + std::string(to_string(a.endian())) +
                          "-endian array; convert it to native byte order first");
    auto* e = new dlpack_export<Managed>;
    e->owner = a.owner();
    e->shape = a.shape();
    e->strides = a.strides();
    dlpack::DLTensor& t = e->managed.dl_tensor;
    t.data = a.data();
    t.device = to_dl_device(a.where());
    t.ndim = static_cast<std::int32_t>(a.ndim());
    t.dtype = to_dl_dtype(a.type());
    t.shape = e->shape.empty() ? nullptr : e->shape.data();
    t.strides = e->strides.empty() ? nullptr : e->strides.data();
    t.byte_offset = 0;
    e->managed.manager_ctx = e;
    e->managed.deleter = [](Managed* self) {
        if (self) delete static_cast<dlpack_export<Managed>*>(self->manager_ctx);
    };
    return e;
}

}  // namespace

std::string to_string(const placement& p) {
    switch (p.kind) {
    case memory_kind::host: return "host";
    case memory_kind::pinned: return "pinned";
    case memory_kind::device: return "cuda:" + std::to_string(p.device);
    case memory_kind::managed: return "managed:" + std::to_string(p.device);
    }
    return "host";
}

placement parse_placement(std::string_view text) {
    if (text == "host" || text == "cpu") return placement::host();
    if (text == "pinned") return placement::pinned();
    if (text == "cuda" || text == "gpu") return placement::cuda(0);
    if (text.substr(0, 5) == "cuda:" && text.size() > 5 && text.size() <= 9) {
        int n = 0;
        for (char c : text.substr(5)) {
            if (c < '0' || c > '9') n = -1;
            if (n >= 0) n = n * 10 + (c - '0');
        }
        if (n >= 0) return placement::cuda(n);
    }
    throw usage_error("device: expected host (or cpu), pinned, cuda (or gpu) or cuda:N, got '" + std::string(text) +
                      "'");
}

std::string_view to_string(storage_order o) noexcept { return o == storage_order::c ? "C" : "F"; }

std::size_t element_count(const std::vector<std::int64_t>& shape, std::size_t itemsize) {
    std::size_t n = 1;
    bool zero = false;
    for (std::int64_t d : shape) {
        if (d < 0)
            throw usage_error("shape " + shape_to_string(shape) + ": negative dimension");
        if (d == 0) zero = true;
    }
    // A zero dimension makes the count 0 however large the others are; still check the others
    // fit so a shape like (0, 2**63) cannot produce an overflowing stride later.
    std::size_t limit = std::numeric_limits<std::size_t>::max() / (itemsize == 0 ? 1 : itemsize);
    for (std::int64_t d : shape) {
        auto u = static_cast<std::size_t>(d);
        if (u != 0 && n > limit / u)
            throw usage_error("shape " + shape_to_string(shape) + ": size overflows");
        if (u != 0) n *= u;
    }
    return zero ? 0 : n;
}

std::string shape_to_string(const std::vector<std::int64_t>& shape) {
    std::string s = "(";
    for (std::size_t i = 0; i < shape.size(); ++i) {
        if (i) s += ", ";
        s += std::to_string(shape[i]);
    }
    if (shape.size() == 1) s += ",";
    return s + ")";
}

array::array() = default;

array::array(dtype type, std::vector<std::int64_t> shape, placement where, storage_order layout,
             byte_order order)
    : type_(type), order_(order), layout_(layout), shape_(std::move(shape)), where_(where) {
    size_ = element_count(shape_, size_of(type_));
    owner_ = allocate(nbytes(), where_);
    data_ = const_cast<void*>(owner_.get());
}

array::array(std::shared_ptr<const void> owner, void* data, dtype type,
             std::vector<std::int64_t> shape, placement where, storage_order layout,
             byte_order order)
    : owner_(std::move(owner)), data_(data), type_(type), order_(order), layout_(layout),
      shape_(std::move(shape)), where_(where) {
    size_ = element_count(shape_, size_of(type_));
}

bool array::is_native() const noexcept {
    return order_ == native_byte_order || swap_unit_of(type_) == 1;
}

bool array::is_c_and_fortran() const noexcept {
    int big = 0;
    for (std::int64_t d : shape_)
        if (d > 1) ++big;
    return big <= 1 || size_ == 0;
}

std::vector<std::int64_t> array::strides() const {
    std::vector<std::int64_t> s(shape_.size());
    std::int64_t step = 1;
    if (layout_ == storage_order::c) {
        for (std::size_t i = shape_.size(); i-- > 0;) {
            s[i] = step;
            step *= shape_[i] == 0 ? 1 : shape_[i];
        }
    } else {
        for (std::size_t i = 0; i < shape_.size(); ++i) {
            s[i] = step;
            step *= shape_[i] == 0 ? 1 : shape_[i];
        }
    }
    return s;
}

array array::with_endian(ferry::byte_order order) const {
    array a = *this;
    a.order_ = order;
    return a;
}

array array::as_read_only() const {
    array a = *this;
    a.read_only_ = true;
    return a;
}

array array::reshaped(std::vector<std::int64_t> shape) const {
    if (layout_ != storage_order::c && !is_c_and_fortran())
        throw usage_error("reshape needs a C-order array");
    if (element_count(shape, itemsize()) != size_)
        throw usage_error("cannot reshape " + std::to_string(size_) + " elements to shape " +
                          shape_to_string(shape));
    array a = *this;
    a.shape_ = std::move(shape);
    a.layout_ = storage_order::c;
    return a;
}

array array::copy_to(placement where) const {
    array a(type_, shape_, where, layout_, order_);
    if (nbytes() > 0) copy_memory(a.data(), data_, nbytes());
    return a;
}

dlpack::DLManagedTensor* array::to_dlpack() const {
    return &make_export<dlpack::DLManagedTensor>(*this)->managed;
}

dlpack::DLManagedTensorVersioned* array::to_dlpack_versioned() const {
    auto* e = make_export<dlpack::DLManagedTensorVersioned>(*this);
    e->managed.version = {dlpack::major_version, dlpack::minor_version};
    e->managed.flags = read_only_ ? dlpack::flag_read_only : 0;
    return &e->managed;
}

}  // namespace ferry
