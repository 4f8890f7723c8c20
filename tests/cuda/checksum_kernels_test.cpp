// The GPU CRC-32C kernel against the CPU's, over spans of every size class (empty, a few bytes,
// a piece boundary, several pieces) at unaligned addresses, in one launch.
#include <gtest/gtest.h>

#include <vector>

#include "cuda/checksum_kernels.hpp"
#include "cuda/deserialize_kernels.hpp"
#include "ferry/array.hpp"
#include "integrity/crc32c.hpp"
#include "test_util.hpp"

namespace ferry {
namespace {

TEST(checksum_kernels, spans_match_the_cpu) {
    FERRY_REQUIRE_GPU();
    const std::size_t total = (5u << 20) + 4096;
    auto host = test::pattern(total, 0, 9);
    device_buffer dev(total, 0);
    kernels::copy(dev.data(), host.data(), total, 0, nullptr);
    kernels::synchronize(nullptr, 0);
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

}  // namespace
}  // namespace ferry
