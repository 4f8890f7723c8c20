#include "ferry/dtype.hpp"

#include <gtest/gtest.h>

#include "ferry/error.hpp"
#include "test_util.hpp"

namespace ferry {
namespace {

TEST(dtype, names_round_trip) {
    for (int i = 0; i < dtype_count; ++i) {
        auto t = static_cast<dtype>(i);
        auto back = dtype_from_name(to_string(t));
        ASSERT_TRUE(back) << to_string(t);
        EXPECT_EQ(*back, t);
    }
    EXPECT_FALSE(dtype_from_name("float"));
    EXPECT_FALSE(dtype_from_name(""));
}

TEST(dtype, sizes) {
    EXPECT_EQ(size_of(dtype::bool_), 1u);
    EXPECT_EQ(size_of(dtype::bfloat16), 2u);
    EXPECT_EQ(size_of(dtype::complex64), 8u);
    EXPECT_EQ(size_of(dtype::complex128), 16u);
    EXPECT_EQ(size_of(dtype::float8_e5m2), 1u);
    EXPECT_EQ(swap_unit_of(dtype::complex64), 4u);
    EXPECT_EQ(swap_unit_of(dtype::complex128), 8u);
    EXPECT_EQ(swap_unit_of(dtype::int64), 8u);
    EXPECT_EQ(swap_unit_of(dtype::uint8), 1u);
}

TEST(dtype, numpy_descr_parse) {
    EXPECT_EQ(parse_numpy_descr("<f4"), (typed_order{dtype::float32, byte_order::little}));
    EXPECT_EQ(parse_numpy_descr(">i8"), (typed_order{dtype::int64, byte_order::big}));
    EXPECT_EQ(parse_numpy_descr("|b1"), (typed_order{dtype::bool_, native_byte_order}));
    EXPECT_EQ(parse_numpy_descr(">u1"), (typed_order{dtype::uint8, native_byte_order}));
    EXPECT_EQ(parse_numpy_descr("<c8"), (typed_order{dtype::complex64, byte_order::little}));
    EXPECT_EQ(parse_numpy_descr(">c16"), (typed_order{dtype::complex128, byte_order::big}));
    EXPECT_EQ(parse_numpy_descr("=f2"), (typed_order{dtype::float16, native_byte_order}));
    EXPECT_EQ(parse_numpy_descr("f8"), (typed_order{dtype::float64, native_byte_order}));
    for (const char* bad : {"", "<", "<V2", "<f3", "<U4", "|O", "<f4 ", "<f123", "<i16", "float32"})
        EXPECT_FALSE(parse_numpy_descr(bad)) << bad;
}

TEST(dtype, numpy_descr_write) {
    EXPECT_EQ(numpy_descr(dtype::float32, byte_order::little), "<f4");
    EXPECT_EQ(numpy_descr(dtype::int16, byte_order::big), ">i2");
    EXPECT_EQ(numpy_descr(dtype::uint8, byte_order::big), "|u1");
    EXPECT_EQ(numpy_descr(dtype::bool_, byte_order::little), "|b1");
    EXPECT_EQ(numpy_descr(dtype::complex128, byte_order::little), "<c16");
    EXPECT_THROW(numpy_descr(dtype::bfloat16, byte_order::little), usage_error);
    EXPECT_THROW(numpy_descr(dtype::float8_e4m3fn, byte_order::little), usage_error);
    EXPECT_FALSE(has_numpy_descr(dtype::float8_e5m2));
    EXPECT_TRUE(has_numpy_descr(dtype::float16));
}

TEST(dtype, parse_user_text) {
    EXPECT_EQ(parse_dtype("float32"), (typed_order{dtype::float32, native_byte_order}));
    EXPECT_EQ(parse_dtype(">f4"), (typed_order{dtype::float32, byte_order::big}));
    EXPECT_EQ(parse_dtype("bfloat16").type, dtype::bfloat16);
    EXPECT_THROW(parse_dtype("f32"), usage_error);
}

TEST(dtype, safetensors_names) {
    const std::pair<const char*, dtype> table[] = {
        {"BOOL", dtype::bool_}, {"U8", dtype::uint8}, {"I8", dtype::int8},
        {"F8_E5M2", dtype::float8_e5m2}, {"F8_E4M3", dtype::float8_e4m3fn},
        {"I16", dtype::int16}, {"U16", dtype::uint16}, {"F16", dtype::float16},
        {"BF16", dtype::bfloat16}, {"I32", dtype::int32}, {"U32", dtype::uint32},
        {"F32", dtype::float32}, {"F64", dtype::float64}, {"I64", dtype::int64},
        {"U64", dtype::uint64}, {"C64", dtype::complex64}};
    for (auto [name, t] : table) {
        EXPECT_EQ(dtype_from_safetensors_name(name), t) << name;
        EXPECT_EQ(safetensors_name(t), std::string_view(name));
    }
    EXPECT_FALSE(safetensors_name(dtype::complex128));
    for (const char* bad : {"F8_E8M0", "F4", "F6_E2M3", "f32", ""})
        EXPECT_FALSE(dtype_from_safetensors_name(bad)) << bad;
}

}  // namespace
}  // namespace ferry
