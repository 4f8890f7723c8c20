// CRC-32C: the published check values, the fast path against the table at every length and
// alignment around its block size, and the combination of pieces.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "integrity/crc32c.hpp"
#include "test_util.hpp"

namespace ferry::integrity {
namespace {

TEST(crc32c, check_values) {
    EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);  // the catalogue's check value
    // RFC 3720 (iSCSI), appendix B.4.
    std::vector<unsigned char> v(32, 0);
    EXPECT_EQ(crc32c(v.data(), v.size()), 0x8A9136AAu);
    std::fill(v.begin(), v.end(), 0xFF);
    EXPECT_EQ(crc32c(v.data(), v.size()), 0x62A8AB43u);
    for (int i = 0; i < 32; ++i) v[i] = static_cast<unsigned char>(i);
    EXPECT_EQ(crc32c(v.data(), v.size()), 0x46DD794Eu);
    EXPECT_EQ(crc32c(nullptr, 0), 0u);
}

TEST(crc32c, fast_path_matches_table_at_every_length_and_alignment) {
    auto data = test::pattern(3 * 8192 * 2 + 64);
    const std::size_t block = 3 * 8192;
    for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{8}, std::size_t{9}, block - 1,
                          block, block + 1, block + 13, 2 * block - 8, 2 * block})
        for (std::size_t at = 0; at < 16; ++at) {
            ASSERT_EQ(crc32c(data.data() + at, n), crc32c_portable(data.data() + at, n)) << n << " at " << at;
            ASSERT_EQ(crc32c(data.data() + at, n, 0x12345678u), crc32c_portable(data.data() + at, n, 0x12345678u));
        }
}

TEST(crc32c, pieces_combine_and_continue) {
    std::mt19937_64 rng(7);
    auto data = test::pattern(200'000, 0, 3);
    for (int round = 0; round < 50; ++round) {
        std::size_t n = rng() % data.size();
        std::size_t cut = n ? rng() % n : 0;
        const std::uint32_t whole = crc32c(data.data(), n);
        const std::uint32_t a = crc32c(data.data(), cut), b = crc32c(data.data() + cut, n - cut);
        EXPECT_EQ(crc32c_combine(a, b, n - cut), whole);
        EXPECT_EQ(crc32c(data.data() + cut, n - cut, a), whole);
    }
}

TEST(crc32c, every_single_bit_flip_changes_it) {
    auto data = test::pattern(4096);
    const std::uint32_t good = crc32c(data.data(), data.size());
    for (std::size_t bit = 0; bit < data.size() * 8; ++bit) {
        data[bit / 8] ^= static_cast<unsigned char>(1u << (bit % 8));
        ASSERT_NE(crc32c(data.data(), data.size()), good) << bit;
        data[bit / 8] ^= static_cast<unsigned char>(1u << (bit % 8));
    }
}

TEST(crc32c, hex) {
    char h[8];
    crc32c_hex(0xE3069283u, h);
    EXPECT_EQ(std::string(h, 8), "e3069283");
}

}  // namespace
}  // namespace ferry::integrity
