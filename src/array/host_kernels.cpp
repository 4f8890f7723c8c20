#include "array/host_kernels.hpp"

#include <cstring>
#include <string>

#include "cuda/float_bits.hpp"
#include "ferry/error.hpp"

namespace ferry::host_kernels {
namespace {

template <class T, class F>
void map(const void* src, void* dst, std::size_t count, F f) {
    const auto* in = static_cast<const unsigned char*>(src);
    auto* out = static_cast<unsigned char*>(dst);
    for (std::size_t i = 0; i < count; ++i) {
        T x;
        std::memcpy(&x, in + i * sizeof(T), sizeof(T));
        x = f(x);
        std::memcpy(out + i * sizeof(T), &x, sizeof(T));
    }
}

template <class In, class Out, class F>
void convert_with(const void* src, void* dst, std::size_t count, F f) {
    const auto* in = static_cast<const unsigned char*>(src);
    auto* out = static_cast<unsigned char*>(dst);
    for (std::size_t i = 0; i < count; ++i) {
        In x;
        std::memcpy(&x, in + i * sizeof(In), sizeof(In));
        Out y = f(x);
        std::memcpy(out + i * sizeof(Out), &y, sizeof(Out));
    }
}

struct u128 {
    std::uint64_t lo, hi;
};

}  // namespace

void byte_swap(void* data, std::size_t count, std::size_t unit) {
    byte_swap_copy(data, data, count, unit);
}

void byte_swap_copy(const void* src, void* dst, std::size_t count, std::size_t unit) {
    switch (unit) {
    case 1:
        if (src != dst && count) std::memmove(dst, src, count);
        return;
    case 2: return map<std::uint16_t>(src, dst, count, [](std::uint16_t x) { return __builtin_bswap16(x); });
    case 4: return map<std::uint32_t>(src, dst, count, [](std::uint32_t x) { return __builtin_bswap32(x); });
    case 8: return map<std::uint64_t>(src, dst, count, [](std::uint64_t x) { return __builtin_bswap64(x); });
    case 16:
        return map<u128>(src, dst, count, [](u128 x) {
            return u128{__builtin_bswap64(x.hi), __builtin_bswap64(x.lo)};
        });
    default:
        throw usage_error("byte swap: unsupported unit of " + std::to_string(unit) + " bytes");
    }
}

void convert(const void* src, dtype from, void* dst, dtype to, std::size_t count) {
    using enum dtype;
    if (from == to) {
        if (count) std::memmove(dst, src, count * size_of(from));
        return;
    }
    if (from == float16 && to == float32)
        return convert_with<std::uint16_t, std::uint32_t>(src, dst, count, bits::f16_to_f32);
    if (from == bfloat16 && to == float32)
        return convert_with<std::uint16_t, std::uint32_t>(src, dst, count, bits::bf16_to_f32);
    if (from == float64 && to == float32)
        return convert_with<std::uint64_t, std::uint32_t>(src, dst, count, bits::f64_to_f32);
    if (from == float32 && to == float16)
        return convert_with<std::uint32_t, std::uint16_t>(src, dst, count, bits::f32_to_f16);
    if (from == float32 && to == bfloat16)
        return convert_with<std::uint32_t, std::uint16_t>(src, dst, count, bits::f32_to_bf16);
    if (from == float32 && to == float64)
        return convert_with<std::uint32_t, std::uint64_t>(src, dst, count, bits::f32_to_f64);
    throw usage_error("cannot convert " + std::string(to_string(from)) + " to " +
                      std::string(to_string(to)));
}

namespace {

// Size is a constant so each element copy compiles to one load and one store.
template <std::size_t Size>
void fortran_to_c_sized(const unsigned char* in, unsigned char* out, std::size_t count,
                        const std::vector<std::int64_t>& shape) {
    const std::size_t nd = shape.size();
    // Walk the output in C order with an odometer over the indices, keeping the Fortran
    // offset of the current index up to date instead of recomputing it.
    std::vector<std::size_t> idx(nd, 0), fstride(nd);
    std::size_t s = 1;
    for (std::size_t k = 0; k < nd; ++k) {
        fstride[k] = s;
        s *= static_cast<std::size_t>(shape[k]);
    }
    std::size_t offset = 0;
    const auto last = static_cast<std::size_t>(shape[nd - 1]);
    const std::size_t last_stride = fstride[nd - 1];
    for (std::size_t o = 0; o < count; o += last) {
        for (std::size_t j = 0; j < last; ++j)
            std::memcpy(out + (o + j) * Size, in + (offset + j * last_stride) * Size, Size);
        for (std::size_t k = nd - 1; k-- > 0;) {
            if (++idx[k] < static_cast<std::size_t>(shape[k])) {
                offset += fstride[k];
                break;
            }
            offset -= (idx[k] - 1) * fstride[k];
            idx[k] = 0;
        }
    }
}

}  // namespace

void fortran_to_c(const void* src, void* dst, std::size_t itemsize,
                  const std::vector<std::int64_t>& shape) {
    std::size_t count = 1;
    for (std::int64_t n : shape) count *= static_cast<std::size_t>(n);
    if (count == 0) return;
    const auto* in = static_cast<const unsigned char*>(src);
    auto* out = static_cast<unsigned char*>(dst);
    if (shape.size() <= 1) {
        std::memcpy(out, in, count * itemsize);
        return;
    }
    switch (itemsize) {
    case 1: return fortran_to_c_sized<1>(in, out, count, shape);
    case 2: return fortran_to_c_sized<2>(in, out, count, shape);
    case 4: return fortran_to_c_sized<4>(in, out, count, shape);
    case 8: return fortran_to_c_sized<8>(in, out, count, shape);
    case 16: return fortran_to_c_sized<16>(in, out, count, shape);
    default:
        throw usage_error("Fortran to C order: unsupported item size " + std::to_string(itemsize));
    }
}

}  // namespace ferry::host_kernels
