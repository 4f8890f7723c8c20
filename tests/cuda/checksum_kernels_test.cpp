// The GPU CRC-32C kernel against the CPU's, over spans of every size class (empty, a few bytes,
// a piece boundary, several pieces) at unaligned addresses, in one launch.
#include <gtest/gtest.h>

#include <vector>

#include "cuda/checksum_kernels.hpp"
#include "cuda/deserialize_kernels.hpp"
#include "ferry/array.hpp"
#include "ferry/integrity.hpp"
#include "integrity/crc32c.hpp"
#include "test_util.hpp"

namespace ferry {
namespace {

// A copy of `host` in GPU memory of device 0, landed.
device_buffer on_device(const std::vector<unsigned char>& host) {
    device_buffer dev(host.size(), 0);
    kernels::copy(dev.data(), host.data(), host.size(), 0, nullptr);
    kernels::synchronize(nullptr, 0);
    return dev;
}

TEST(checksum_kernels, spans_match_the_cpu) {
    FERRY_REQUIRE_GPU();
    const std::size_t total = (5u << 20) + 4096;
    auto host = test::pattern(total, 0, 9);
    device_buffer dev = on_device(host);
    std::vector<kernels::crc_span> spans;
    std::vector<std::uint32_t> want;
    auto add = [&](std::size_t at, std::size_t n) {
        spans.push_back({static_cast<const unsigned char*>(dev.data()) + at, n});
        want.push_back(integrity::crc32c(host.data() + at, n));
    };
    for (std::size_t n : {0ul, 1ul, 3ul, 15ul, 16ul, 17ul, 4095ul, 4096ul, 4097ul, 1ul << 20, (1ul << 20) + 1,
                          (1ul << 20) - 1, (3ul << 20) + 12345})
        for (std::size_t at : {0ul, 1ul, 7ul, 16ul})
            add(at, n);
    add(3, total - 3);
    EXPECT_EQ(kernels::crc32c_spans(spans, 0, nullptr), want);
}

// Passes queued one after another and waited for out of order give the CPU's values; one given
// up on (never waited for) frees its scratch without disturbing the others; a second wait is an
// error, not a second copy.
TEST(checksum_kernels, queued_passes_are_collected_in_any_order) {
    FERRY_REQUIRE_GPU();
    const std::size_t total = (9u << 20) + 77;
    auto host = test::pattern(total, 0, 5);
    device_buffer dev = on_device(host);
    const auto* d = static_cast<const unsigned char*>(dev.data());
    std::vector<kernels::crc_pass> passes;
    std::vector<std::vector<std::uint32_t>> want;
    for (std::size_t at = 0; at < total; at += 3u << 20) {
        const std::size_t n = std::min<std::size_t>(3u << 20, total - at);
        passes.emplace_back(std::vector<kernels::crc_span>{{d + at, n}, {d + at, n / 2}}, 0, nullptr);
        want.push_back({integrity::crc32c(host.data() + at, n), integrity::crc32c(host.data() + at, n / 2)});
    }
    { kernels::crc_pass given_up({{d, total}}, 0, nullptr); }
    ASSERT_EQ(passes.size(), 4u);
    for (std::size_t i = passes.size(); i-- > 0;) EXPECT_EQ(passes[i].wait(), want[i]) << "pass " << i;
    EXPECT_THROW(passes[0].wait(), usage_error);
    EXPECT_EQ(kernels::crc_pass({}, 0, nullptr).wait(), std::vector<std::uint32_t>{});
}

// The public entry: chunks of host and GPU inputs in one call give the CPU's values, in order.
struct chunk_case {
    static constexpr std::size_t total = (3u << 20) + 100;
    static constexpr std::uint64_t chunk = 1 << 20;
    std::vector<unsigned char> host = test::pattern(total, 0, 4);
    std::vector<std::uint32_t> want(std::size_t at, std::size_t n) const {
        std::vector<std::uint32_t> w;
        for (std::size_t k = 0; k < n; k += chunk)
            w.push_back(integrity::crc32c(host.data() + at + k, std::min<std::size_t>(chunk, n - k)));
        return w;
    }
};

TEST(checksum_kernels, crc32c_chunks_of_host_inputs) {
    chunk_case c;
    const auto& host = c.host;
    const std::size_t total = c.total;
    const std::uint64_t chunk = c.chunk;
    auto want = [&](std::size_t at, std::size_t n) { return c.want(at, n); };
    std::vector<crc_input> in{{host.data(), total, placement::host()}, {host.data() + 5, 0, placement::host()},
                              {host.data() + 9, 4096, placement::host()}};
    auto got = crc32c_chunks(in, chunk);
    ASSERT_EQ(got.size(), 3u);
    EXPECT_EQ(got[0], want(0, total));
    EXPECT_TRUE(got[1].empty());
    EXPECT_EQ(got[2], want(9, 4096));
    EXPECT_THROW(crc32c_chunks(in, 0), usage_error);
}

TEST(checksum_kernels, crc32c_chunks_of_host_and_device_inputs) {
    FERRY_REQUIRE_GPU();
    chunk_case c;
    const auto& host = c.host;
    const std::size_t total = c.total;
    const std::uint64_t chunk = c.chunk;
    auto want = [&](std::size_t at, std::size_t n) { return c.want(at, n); };
    std::vector<crc_input> in{{host.data(), total, placement::host()}};
    device_buffer dev = on_device(host);
    in.push_back({static_cast<const unsigned char*>(dev.data()) + 1, total - 1, placement::cuda(0)});
    auto got = crc32c_chunks(in, chunk);
    ASSERT_EQ(got.size(), 2u);
    EXPECT_EQ(got[0], want(0, total));
    EXPECT_EQ(got[1], want(1, total - 1));
}

}  // namespace
}  // namespace ferry
