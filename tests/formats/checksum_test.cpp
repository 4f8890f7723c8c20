#include "ferry/checksum.hpp"

#include <gtest/gtest.h>

#include <cstring>

#include "ferry/convert.hpp"
#include "test_util.hpp"

namespace ferry {
namespace {

TEST(checksum, format_and_known_value) {
    // XXH64 of no bytes with seed 0.
    EXPECT_EQ(checksum(array(dtype::float32, {0})), "xxh64:ef46db3751d8e999");
    std::string c = checksum(array(dtype::uint8, {3}));
    EXPECT_EQ(c.size(), 22u);
    EXPECT_EQ(c.substr(0, 6), "xxh64:");
}

TEST(checksum, byte_order_and_layout_do_not_matter) {
    array c(dtype::complex64, {3, 4});
    auto bytes = test::pattern(c.nbytes());
    std::memcpy(c.data(), bytes.data(), c.nbytes());
    std::string expect = checksum(c);
    // The big-endian twin: same values, bytes of each half swapped.
    array big(dtype::complex64, {3, 4}, placement::host(), storage_order::c, byte_order::big);
    auto* src = static_cast<std::uint8_t*>(c.data());
    auto* dst = static_cast<std::uint8_t*>(big.data());
    for (std::size_t i = 0; i < c.nbytes(); i += 4)
        for (int k = 0; k < 4; ++k) dst[i + k] = src[i + 3 - k];
    EXPECT_EQ(checksum(big), expect);
    // The Fortran twin.
    array f(dtype::complex64, {3, 4}, placement::host(), storage_order::fortran);
    auto* fp = static_cast<std::uint64_t*>(f.data());
    auto* cp = static_cast<std::uint64_t*>(c.data());
    for (int r = 0; r < 3; ++r)
        for (int k = 0; k < 4; ++k) fp[r + 3 * k] = cp[r * 4 + k];
    EXPECT_EQ(checksum(f), expect);
}

TEST(checksum, device_matches_host) {
    FERRY_REQUIRE_GPU();
    array h(dtype::float64, {5000, 999}, placement::host(), storage_order::fortran, byte_order::big);
    auto bytes = test::pattern(h.nbytes());
    std::memcpy(h.data(), bytes.data(), h.nbytes());
    EXPECT_EQ(checksum(h.copy_to(placement::cuda(0))), checksum(h));
}

}  // namespace
}  // namespace ferry
