// The GPU kernels against the CPU loops, byte for byte, at misaligned starts and odd counts so
// the vector bodies, heads and tails all run.
#include "cuda/deserialize_kernels.hpp"

#include <gtest/gtest.h>

#include <cstring>

#include "array/host_kernels.hpp"
#include "ferry/array.hpp"
#include "ferry/memory.hpp"
#include "test_util.hpp"

namespace ferry {
namespace {

// Where two byte vectors first differ, for messages ("" when equal).
std::string first_difference(const std::vector<std::uint8_t>& a, const std::vector<std::uint8_t>& b) {
    if (a.size() != b.size()) return "sizes " + std::to_string(a.size()) + " and " + std::to_string(b.size());
    for (std::size_t i = 0; i < a.size(); ++i)
        if (a[i] != b[i])
            return "byte " + std::to_string(i) + " of " + std::to_string(a.size()) + ": " + std::to_string(a[i]) +
                   " instead of " + std::to_string(b[i]);
    return "";
}

std::vector<std::uint8_t> to_host(const void* d, std::size_t n) {
    std::vector<std::uint8_t> v(n);
    if (n) copy_memory(v.data(), d, n);
    return v;
}

TEST(deserialize_kernels, byte_swap_matches_cpu) {
    FERRY_REQUIRE_GPU();
    stream s;
    for (std::size_t unit : {2u, 4u, 8u, 16u}) {
        for (std::size_t count : {0u, 1u, 7u, 33u, 1000u, 65537u}) {
            for (std::size_t misalign = 0; misalign < 16; misalign += unit) {
                std::size_t n = count * unit;
                auto src = test::pattern(n + misalign, 0, static_cast<std::uint32_t>(unit));
                device_buffer d(n + misalign + 1);
                copy_memory(d.data(), src.data(), n + misalign);
                auto* p = static_cast<std::uint8_t*>(d.data()) + misalign;
                kernels::byte_swap(p, count, unit, 0, s.get());
                s.synchronize();
                std::vector<std::uint8_t> expect(src.begin() + misalign, src.end());
                host_kernels::byte_swap(expect.data(), count, unit);
                EXPECT_EQ(first_difference(to_host(p, n), expect), "") << unit << " " << count << " " << misalign;
            }
        }
    }
}

TEST(deserialize_kernels, convert_matches_cpu) {
    FERRY_REQUIRE_GPU();
    stream s;
    const dtype floats[] = {dtype::float16, dtype::bfloat16, dtype::float32, dtype::float64};
    for (dtype from : floats) {
        for (dtype to : floats) {
            if (!kernels::can_convert(from, to)) continue;
            for (std::size_t count : {1u, 9u, 4097u}) {
                // Element skews move the vector head; skew 5 adds one byte: misaligned elements.
                for (std::size_t skew : {0u, 1u, 3u, 5u}) {
                    std::size_t in_bytes = count * size_of(from);
                    std::size_t out_bytes = count * size_of(to);
                    auto src = test::pattern(in_bytes, 0, 77);
                    device_buffer din(in_bytes + 64), dout(out_bytes + 128);  // outputs start up to 81 bytes in
                    std::size_t extra = skew == 5 ? 1 : 0;
                    auto* pin = static_cast<std::uint8_t*>(din.data()) + skew * size_of(from) + extra;
                    auto* pout = static_cast<std::uint8_t*>(dout.data()) + skew * size_of(to) * 2 + extra;
                    copy_memory(pin, src.data(), in_bytes);
                    kernels::convert(pin, from, pout, to, count, 0, s.get());
                    s.synchronize();
                    std::vector<std::uint8_t> expect(out_bytes);
                    host_kernels::convert(src.data(), from, expect.data(), to, count);
                    EXPECT_EQ(first_difference(to_host(pout, out_bytes), expect), "")
                        << to_string(from) << "->" << to_string(to) << " " << count << " " << skew;
                }
            }
        }
    }
}

TEST(deserialize_kernels, fortran_to_c_matches_cpu) {
    FERRY_REQUIRE_GPU();
    stream s;
    const std::vector<std::int64_t> shapes[] = {{1, 1}, {3, 5}, {33, 65}, {1000, 3}, {2, 3, 4},
                                                {7, 1, 9, 2}, {1, 513}, {64, 64}};
    for (std::size_t item : {1u, 2u, 4u, 8u, 16u}) {
        for (const auto& shape : shapes) {
            std::size_t n = item;
            for (auto d : shape) n *= static_cast<std::size_t>(d);
            auto src = test::pattern(n, 0, 5);
            std::vector<std::uint8_t> expect(n);
            host_kernels::fortran_to_c(src.data(), expect.data(), item, shape);
            for (std::size_t shift : {0u, 1u}) {  // 1: misaligned views take the staged path
                device_buffer din(n + 1), dout(n + 1);
                auto* pin = static_cast<std::uint8_t*>(din.data()) + shift;
                auto* pout = static_cast<std::uint8_t*>(dout.data()) + shift;
                copy_memory(pin, src.data(), n);
                kernels::fortran_to_c(pin, pout, item, shape, 0, s.get());
                s.synchronize();
                EXPECT_EQ(first_difference(to_host(pout, n), expect), "")
                    << "item " << item << " shape " << shape_to_string(shape) << " shift " << shift;
            }
        }
    }
}

}  // namespace
}  // namespace ferry
