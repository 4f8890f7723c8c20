#include "array/host_kernels.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "cuda/float_bits.hpp"
#include "ferry/convert.hpp"
#include "ferry/error.hpp"
#include "test_util.hpp"

namespace ferry {
namespace {

TEST(host_kernels, byte_swap_units) {
    std::vector<std::uint8_t> v = test::pattern(64);
    for (std::size_t unit : {2u, 4u, 8u, 16u}) {
        std::vector<std::uint8_t> w = v;
        host_kernels::byte_swap(w.data(), w.size() / unit, unit);
        for (std::size_t i = 0; i < w.size(); ++i) {
            std::size_t g = i / unit, k = i % unit;
            ASSERT_EQ(w[i], v[g * unit + unit - 1 - k]) << unit;
        }
    }
    EXPECT_THROW(host_kernels::byte_swap(v.data(), 1, 3), usage_error);
}

TEST(float_bits, half) {
    using namespace bits;
    EXPECT_EQ(f32_to_f16(float_to_u32(1.0f)), 0x3c00);
    EXPECT_EQ(f32_to_f16(float_to_u32(-2.0f)), 0xc000);
    EXPECT_EQ(f32_to_f16(float_to_u32(65504.0f)), 0x7bff);
    EXPECT_EQ(f32_to_f16(float_to_u32(65520.0f)), 0x7c00);  // rounds up to infinity
    EXPECT_EQ(f32_to_f16(float_to_u32(65519.0f)), 0x7bff);
    EXPECT_EQ(f32_to_f16(float_to_u32(std::ldexp(1.0f, -24))), 0x0001);  // smallest subnormal
    EXPECT_EQ(f32_to_f16(float_to_u32(std::ldexp(1.0f, -25))), 0x0000);  // tie to even: 0
    EXPECT_EQ(f32_to_f16(float_to_u32(std::ldexp(3.0f, -25))), 0x0002);  // tie to even: 2
    EXPECT_EQ(f32_to_f16(float_to_u32(std::ldexp(1.0f, -14))), 0x0400);  // smallest normal
    EXPECT_EQ(f32_to_f16(float_to_u32(1.0f + std::ldexp(1.0f, -11))), 0x3c00);  // tie, even
    EXPECT_EQ(f32_to_f16(float_to_u32(1.0f + 3 * std::ldexp(1.0f, -11))), 0x3c02);
    EXPECT_EQ(f32_to_f16(float_to_u32(std::numeric_limits<float>::infinity())), 0x7c00);
    std::uint16_t nan = f32_to_f16(float_to_u32(std::numeric_limits<float>::quiet_NaN()));
    EXPECT_EQ(nan & 0x7c00, 0x7c00);
    EXPECT_NE(nan & 0x3ff, 0);
    // Every half converts to float and back unchanged (NaNs stay NaN).
    for (std::uint32_t h = 0; h < 0x10000; ++h) {
        std::uint32_t f = f16_to_f32(static_cast<std::uint16_t>(h));
        std::uint16_t back = f32_to_f16(f);
        if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff)) {
            EXPECT_TRUE(std::isnan(u32_to_float(f)));
            EXPECT_EQ(back & 0x7c00, 0x7c00);
        } else {
            ASSERT_EQ(back, h) << std::hex << h;
        }
    }
    EXPECT_EQ(u32_to_float(f16_to_f32(0x0001)), std::ldexp(1.0f, -24));
    EXPECT_EQ(u32_to_float(f16_to_f32(0x3555)), 0.333251953125f);
}

TEST(float_bits, bfloat16) {
    using namespace bits;
    EXPECT_EQ(f32_to_bf16(float_to_u32(1.0f)), 0x3f80);
    EXPECT_EQ(f32_to_bf16(0x3f808000u), 0x3f80);  // tie to even
    EXPECT_EQ(f32_to_bf16(0x3f818000u), 0x3f82);
    EXPECT_EQ(f32_to_bf16(0x3f808001u), 0x3f81);
    EXPECT_EQ(f32_to_bf16(0x7f7fffffu), 0x7f80);  // max float rounds to infinity
    EXPECT_EQ(f32_to_bf16(0x7f800001u) & 0x7fc0, 0x7fc0);  // signalling NaN stays NaN, quiet
    EXPECT_EQ(bf16_to_f32(0x4049), 0x40490000u);
}

TEST(float_bits, double) {
    using namespace bits;
    EXPECT_EQ(f64_to_f32(double_to_u64(0.1)), float_to_u32(0.1f));
    EXPECT_EQ(f32_to_f64(float_to_u32(0.1f)), double_to_u64(static_cast<double>(0.1f)));
    EXPECT_EQ(f64_to_f32(double_to_u64(1e300)), 0x7f800000u);
    EXPECT_EQ(f64_to_f32(0xfff8000000000001ull) & 0xffc00000u, 0xffc00000u);
    EXPECT_TRUE(std::isnan(u64_to_double(f32_to_f64(0x7fc00001u))));
}

TEST(host_kernels, convert_pairs) {
    std::vector<float> f = {0.0f, -1.5f, 3.14159f, 65504.0f, 1e-7f};
    std::vector<std::uint16_t> h(f.size());
    host_kernels::convert(f.data(), dtype::float32, h.data(), dtype::float16, f.size());
    EXPECT_EQ(h[1], 0xbe00);
    std::vector<float> back(f.size());
    host_kernels::convert(h.data(), dtype::float16, back.data(), dtype::float32, f.size());
    EXPECT_EQ(back[3], 65504.0f);
    EXPECT_NEAR(back[2], 3.14159f, 1e-3);
    std::vector<double> d(f.size());
    host_kernels::convert(f.data(), dtype::float32, d.data(), dtype::float64, f.size());
    EXPECT_EQ(d[2], static_cast<double>(3.14159f));
    EXPECT_THROW(host_kernels::convert(f.data(), dtype::float32, d.data(), dtype::int32, 1), usage_error);
}

TEST(host_kernels, fortran_to_c_matches_index_math) {
    const std::vector<std::int64_t> shapes[] = {{3, 5}, {2, 3, 4}, {1, 4, 1, 3}, {5}, {2, 1}};
    for (const auto& shape : shapes) {
        std::size_t n = 1;
        for (auto d : shape) n *= static_cast<std::size_t>(d);
        std::vector<std::uint32_t> f(n), c(n);
        for (std::size_t i = 0; i < n; ++i) f[i] = static_cast<std::uint32_t>(i);
        host_kernels::fortran_to_c(f.data(), c.data(), 4, shape);
        // C index (i0..ik) at linear o; its Fortran offset sum(i_k * prod(shape[<k])).
        for (std::size_t o = 0; o < n; ++o) {
            std::size_t rest = o, off = 0, stride = 1;
            std::vector<std::size_t> idx(shape.size());
            for (std::size_t k = shape.size(); k-- > 0;) {
                idx[k] = rest % shape[k];
                rest /= shape[k];
            }
            for (std::size_t k = 0; k < shape.size(); ++k) {
                off += idx[k] * stride;
                stride *= shape[k];
            }
            ASSERT_EQ(c[o], f[off]) << o;
        }
    }
}

TEST(convert, astype_and_layout_on_host) {
    array f(dtype::float32, {2, 3}, placement::host(), storage_order::fortran);
    auto* p = static_cast<float*>(f.data());
    for (int i = 0; i < 6; ++i) p[i] = static_cast<float>(i) + 0.5f;  // F order: p[r + 2c]
    array c = to_c_order(f);
    EXPECT_EQ(c.layout(), storage_order::c);
    auto* q = static_cast<float*>(c.data());
    EXPECT_EQ(q[1], p[2]);  // (0,1)
    EXPECT_EQ(q[3], p[1]);  // (1,0)
    array h = astype(c, dtype::float16);
    EXPECT_EQ(h.type(), dtype::float16);
    EXPECT_EQ(static_cast<std::uint16_t*>(h.data())[0], 0x3800);  // 0.5
    EXPECT_THROW(astype(c, dtype::int8), usage_error);
    EXPECT_TRUE(can_astype(dtype::bfloat16, dtype::float32));
    EXPECT_FALSE(can_astype(dtype::float16, dtype::float64));
    array big(dtype::int32, {2}, placement::host(), storage_order::c,
              native_byte_order == byte_order::little ? byte_order::big : byte_order::little);
    static_cast<std::uint32_t*>(big.data())[0] = 0x01020304u;
    array n = to_native(big);
    EXPECT_EQ(static_cast<std::uint32_t*>(n.data())[0], 0x04030201u);
    EXPECT_TRUE(n.is_native());
}

}  // namespace
}  // namespace ferry
