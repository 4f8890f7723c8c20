#include "ferry/array.hpp"

#include <gtest/gtest.h>

#include <cstring>

#include "ferry/convert.hpp"
#include "ferry/error.hpp"
#include "test_util.hpp"

namespace ferry {
namespace {

TEST(array, default_is_empty) {
    array a;
    EXPECT_EQ(a.size(), 0u);
    EXPECT_EQ(a.nbytes(), 0u);
    EXPECT_EQ(a.shape(), (std::vector<std::int64_t>{0}));
}

TEST(array, shape_and_strides) {
    array c(dtype::float32, {2, 3, 4});
    EXPECT_EQ(c.size(), 24u);
    EXPECT_EQ(c.nbytes(), 96u);
    EXPECT_EQ(c.strides(), (std::vector<std::int64_t>{12, 4, 1}));
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(c.data()) % 64, 0u);
    array f(dtype::float32, {2, 3, 4}, placement::host(), storage_order::fortran);
    EXPECT_EQ(f.strides(), (std::vector<std::int64_t>{1, 2, 6}));
    array s(dtype::int8, {});
    EXPECT_EQ(s.size(), 1u);
    EXPECT_TRUE(s.strides().empty());
    array e(dtype::int8, {3, 0});
    EXPECT_EQ(e.size(), 0u);
    EXPECT_NE(e.data(), nullptr);
}

TEST(array, rejects_bad_shapes) {
    EXPECT_THROW(array(dtype::float32, {-1}), usage_error);
    EXPECT_THROW(array(dtype::float64, {1LL << 40, 1LL << 40}), usage_error);
}

TEST(array, copies_share_storage_clone_does_not) {
    array a(dtype::uint8, {4});
    std::memset(a.data(), 7, 4);
    array b = a;
    EXPECT_EQ(a.data(), b.data());
    array c = a.clone();
    EXPECT_NE(a.data(), c.data());
    EXPECT_EQ(std::memcmp(a.data(), c.data(), 4), 0);
}

TEST(array, read_only_mark_follows_views_not_copies) {
    array a(dtype::int32, {6});
    EXPECT_FALSE(a.read_only());
    array r = a.as_read_only();
    EXPECT_TRUE(r.read_only());
    EXPECT_EQ(r.data(), a.data());
    EXPECT_FALSE(a.read_only());  // the original handle is unchanged
    EXPECT_TRUE(array(r).read_only());
    EXPECT_TRUE(r.reshaped({2, 3}).read_only());
    EXPECT_TRUE(r.with_endian(byte_order::big).read_only());
    EXPECT_FALSE(r.clone().read_only());
    EXPECT_FALSE(r.copy_to(placement::host()).read_only());
}

TEST(array, reshape) {
    array a(dtype::int32, {6});
    EXPECT_EQ(a.reshaped({2, 3}).shape(), (std::vector<std::int64_t>{2, 3}));
    EXPECT_THROW(a.reshaped({4}), usage_error);
}

TEST(placement, parse) {
    EXPECT_EQ(parse_placement("host"), placement::host());
    EXPECT_EQ(parse_placement("cuda"), placement::cuda(0));
    EXPECT_EQ(parse_placement("cuda:3"), placement::cuda(3));
    EXPECT_EQ(parse_placement("pinned"), placement::pinned());
    EXPECT_THROW(parse_placement("cuda:x"), usage_error);
    EXPECT_THROW(parse_placement("tpu"), usage_error);
    EXPECT_EQ(to_string(placement::cuda(2)), "cuda:2");
}

TEST(dlpack, export_keeps_storage_alive) {
    dlpack::DLManagedTensor* t = nullptr;
    void* data = nullptr;
    {
        array a(dtype::float32, {2, 3}, placement::host(), storage_order::fortran);
        data = a.data();
        std::memset(a.data(), 0, a.nbytes());
        t = a.to_dlpack();
    }
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(t->dl_tensor.data, data);
    EXPECT_EQ(t->dl_tensor.device.device_type, dlpack::kDLCPU);
    EXPECT_EQ(t->dl_tensor.ndim, 2);
    EXPECT_EQ(t->dl_tensor.dtype.code, dlpack::kDLFloat);
    EXPECT_EQ(t->dl_tensor.dtype.bits, 32);
    EXPECT_EQ(t->dl_tensor.dtype.lanes, 1);
    EXPECT_EQ(t->dl_tensor.shape[0], 2);
    EXPECT_EQ(t->dl_tensor.shape[1], 3);
    EXPECT_EQ(t->dl_tensor.strides[0], 1);
    EXPECT_EQ(t->dl_tensor.strides[1], 2);
    static_cast<float*>(t->dl_tensor.data)[5] = 1.0f;  // still valid memory
    t->deleter(t);
}

TEST(dlpack, versioned_and_dtypes) {
    array a(dtype::bfloat16, {});
    auto* t = a.to_dlpack_versioned();
    EXPECT_EQ(t->version.major, 1u);
    EXPECT_EQ(t->version.minor, 1u);
    EXPECT_EQ(t->flags, 0u);
    EXPECT_EQ(t->dl_tensor.ndim, 0);
    EXPECT_EQ(t->dl_tensor.dtype.code, dlpack::kDLBfloat);
    EXPECT_EQ(t->dl_tensor.dtype.bits, 16);
    t->deleter(t);
    auto* ro = a.as_read_only().to_dlpack_versioned();
    EXPECT_EQ(ro->flags, dlpack::flag_read_only);
    ro->deleter(ro);
    array b(dtype::float8_e4m3fn, {1});
    auto* u = b.to_dlpack();
    EXPECT_EQ(u->dl_tensor.dtype.code, 10);
    u->deleter(u);
    array c(dtype::complex128, {1});
    auto* v = c.to_dlpack();
    EXPECT_EQ(v->dl_tensor.dtype.code, dlpack::kDLComplex);
    EXPECT_EQ(v->dl_tensor.dtype.bits, 128);
    v->deleter(v);
}

TEST(dlpack, refuses_foreign_byte_order) {
    byte_order other = native_byte_order == byte_order::little ? byte_order::big : byte_order::little;
    array a(dtype::int32, {2}, placement::host(), storage_order::c, other);
    EXPECT_THROW(a.to_dlpack(), usage_error);
    array n = to_native(a);
    auto* t = n.to_dlpack();
    t->deleter(t);
}

TEST(dlpack, device_export) {
    FERRY_REQUIRE_GPU();
    array a(dtype::int16, {5}, placement::cuda(0));
    auto* t = a.to_dlpack();
    EXPECT_EQ(t->dl_tensor.device.device_type, dlpack::kDLCUDA);
    EXPECT_EQ(t->dl_tensor.device.device_id, 0);
    t->deleter(t);
}

}  // namespace
}  // namespace ferry
