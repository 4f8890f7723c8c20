// Bit-level conversions between float formats, shared by the CPU loops and the CUDA kernels so
// that a conversion gives the same bytes on either side. Rounding is to nearest, ties to even;
// NaNs stay NaN (quieted, sign and top payload bits kept); overflow gives infinity.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define FERRY_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define FERRY_HOST_DEVICE inline
#endif

namespace ferry::bits {

// The same bits as another type of the same size (std::bit_cast, callable on the device too).
template <class To, class From>
FERRY_HOST_DEVICE To same_bits(From from) {
    static_assert(sizeof(To) == sizeof(From));
    To to;
    std::memcpy(&to, &from, sizeof(To));
    return to;
}
FERRY_HOST_DEVICE std::uint32_t float_to_u32(float f) { return same_bits<std::uint32_t>(f); }
FERRY_HOST_DEVICE float u32_to_float(std::uint32_t u) { return same_bits<float>(u); }
FERRY_HOST_DEVICE std::uint64_t double_to_u64(double d) { return same_bits<std::uint64_t>(d); }
FERRY_HOST_DEVICE double u64_to_double(std::uint64_t u) { return same_bits<double>(u); }

/// binary32 -> binary16.
FERRY_HOST_DEVICE std::uint16_t f32_to_f16(std::uint32_t x) {
    std::uint32_t sign = (x >> 16) & 0x8000u;
    std::uint32_t exp = (x >> 23) & 0xffu;
    std::uint32_t mant = x & 0x7fffffu;
    if (exp == 0xffu)
        return static_cast<std::uint16_t>(sign | 0x7c00u | (mant ? 0x200u | (mant >> 13) : 0u));
    int e = static_cast<int>(exp) - 127 + 15;
    if (e >= 31) return static_cast<std::uint16_t>(sign | 0x7c00u);
    if (e <= 0) {
        if (e < -10) return static_cast<std::uint16_t>(sign);
        std::uint32_t m = mant | 0x800000u;
        int shift = 14 - e;
        std::uint32_t r = m >> shift;
        std::uint32_t rem = m & ((1u << shift) - 1u);
        std::uint32_t halfway = 1u << (shift - 1);
        if (rem > halfway || (rem == halfway && (r & 1u))) ++r;
        return static_cast<std::uint16_t>(sign | r);
    }
    std::uint32_t r = (static_cast<std::uint32_t>(e) << 10) | (mant >> 13);
    std::uint32_t rem = mant & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (r & 1u))) ++r;  // may carry into inf: correct
    return static_cast<std::uint16_t>(sign | r);
}

/// binary16 -> binary32 (exact).
FERRY_HOST_DEVICE std::uint32_t f16_to_f32(std::uint16_t h) {
    std::uint32_t sign = (static_cast<std::uint32_t>(h) & 0x8000u) << 16;
    std::uint32_t exp = (h >> 10) & 0x1fu;
    std::uint32_t mant = h & 0x3ffu;
    if (exp == 0x1fu) return sign | 0x7f800000u | (mant << 13);
    if (exp == 0) {
        if (mant == 0) return sign;
        std::uint32_t e = 113;
        while (!(mant & 0x400u)) {
            mant <<= 1;
            --e;
        }
        return sign | (e << 23) | ((mant & 0x3ffu) << 13);
    }
    return sign | ((exp + 112u) << 23) | (mant << 13);
}

/// binary32 -> bfloat16.
FERRY_HOST_DEVICE std::uint16_t f32_to_bf16(std::uint32_t x) {
    if ((x & 0x7f800000u) == 0x7f800000u && (x & 0x7fffffu))
        return static_cast<std::uint16_t>((x >> 16) | 0x40u);
    return static_cast<std::uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

/// bfloat16 -> binary32 (exact).
FERRY_HOST_DEVICE std::uint32_t bf16_to_f32(std::uint16_t b) { return static_cast<std::uint32_t>(b) << 16; }

/// binary64 -> binary32. Finite values use the hardware conversion (round to nearest even on
/// both CPU and GPU); NaNs are built by hand because their payload handling differs.
FERRY_HOST_DEVICE std::uint32_t f64_to_f32(std::uint64_t x) {
    if ((x & 0x7ff0000000000000ull) == 0x7ff0000000000000ull && (x & 0xfffffffffffffull))
        return static_cast<std::uint32_t>((x >> 32) & 0x80000000u) | 0x7fc00000u |
               static_cast<std::uint32_t>((x >> 29) & 0x3fffffu);
    return float_to_u32(static_cast<float>(u64_to_double(x)));
}

/// binary32 -> binary64 (exact).
FERRY_HOST_DEVICE std::uint64_t f32_to_f64(std::uint32_t x) {
    if ((x & 0x7f800000u) == 0x7f800000u && (x & 0x7fffffu))
        return (static_cast<std::uint64_t>(x & 0x80000000u) << 32) | 0x7ff8000000000000ull |
               (static_cast<std::uint64_t>(x & 0x3fffffu) << 29);
    return double_to_u64(static_cast<double>(u32_to_float(x)));
}

}  // namespace ferry::bits
