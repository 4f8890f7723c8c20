// Stream-ordered reads and writes stay ordered with the stream on every path, GDS or not.
#include <cuda_runtime_api.h>

#include <cstring>

#include "ferry/ferry.hpp"
#include "test_util.hpp"

namespace {

struct stream_case {
    const char* name;
    ferry::gds_mode gds;
    ferry::direct_io_mode direct;
};

class stream_order : public ::testing::TestWithParam<stream_case> {};

TEST_P(stream_order, read_runs_after_earlier_work_and_before_later_work) {
    FERRY_REQUIRE_GPU();
    ferry::test::temp_dir d;
    const std::size_t n = 64u << 20;
    ferry::test::write_pattern_file(d / "a", n);
    ferry::settings s;
    s.threads = 8;
    s.gds = GetParam().gds;
    s.direct_io = GetParam().direct;
    s.gds_threshold = 0;
    ferry::file f(d / "a", ferry::open_mode::read, s);
    ferry::device_buffer dev(n);
    ferry::pinned_buffer poison(n), back(n);
    std::memset(poison.data(), 0xEE, n);
    std::memset(back.data(), 0, n);
    ferry::stream st;
    cudaStream_t cs = st.get();
    for (int round = 0; round < 3; ++round) {
        // Earlier work that would clobber the read if the read did not wait for it.
        ASSERT_EQ(cudaMemcpyAsync(dev.data(), poison.data(), n, cudaMemcpyHostToDevice, cs), cudaSuccess);
        auto fu = f.read_async(dev.data(), n, 0, st.get());
        // Later work that must see the read's bytes.
        ASSERT_EQ(cudaMemcpyAsync(back.data(), dev.data(), n, cudaMemcpyDeviceToHost, cs), cudaSuccess);
        ASSERT_EQ(cudaStreamSynchronize(cs), cudaSuccess);
        EXPECT_EQ(fu.get(), n);
        auto expect = ferry::test::pattern(n);
        ASSERT_EQ(std::memcmp(back.data(), expect.data(), n), 0) << "round " << round;
        std::memset(back.data(), 0, n);
    }
}

TEST_P(stream_order, write_sees_earlier_work) {
    FERRY_REQUIRE_GPU();
    ferry::test::temp_dir d;
    const std::size_t n = 32u << 20;
    ferry::settings s;
    s.gds = GetParam().gds;
    s.gds_threshold = 0;
    ferry::device_buffer dev(n);
    ferry::stream st;
    cudaStream_t cs = st.get();
    {
        ferry::file f(d / "w", ferry::open_mode::write, s);
        ASSERT_EQ(cudaMemsetAsync(dev.data(), 0x5A, n, cs), cudaSuccess);
        auto fu = f.write_async(dev.data(), n, 0, st.get());
        ASSERT_EQ(cudaMemsetAsync(dev.data(), 0x00, n, cs), cudaSuccess);  // must not reach the file
        st.synchronize();
        EXPECT_EQ(fu.get(), n);
    }
    auto bytes = ferry::test::read_whole(d / "w");
    ASSERT_EQ(bytes.size(), n);
    EXPECT_TRUE(std::all_of(bytes.begin(), bytes.end(), [](std::uint8_t b) { return b == 0x5A; }));
}

TEST_P(stream_order, an_error_reaches_the_future_and_the_stream_goes_on) {
    FERRY_REQUIRE_GPU();
    ferry::test::temp_dir d;
    ferry::test::write_pattern_file(d / "a", 1u << 20);
    ferry::settings s;
    s.gds = GetParam().gds;
    ferry::file f(d / "a", ferry::open_mode::read, s);
    ferry::device_buffer dev(4u << 20);
    ferry::stream st;
    EXPECT_THROW(f.read_async(dev.data(), 4u << 20, 0, st.get()), ferry::end_of_file_error);
    st.synchronize();
}

const stream_case cases[] = {
    {"staged", ferry::gds_mode::off, ferry::direct_io_mode::off},
    {"staged_direct", ferry::gds_mode::off, ferry::direct_io_mode::on},
    {"gds_auto", ferry::gds_mode::auto_, ferry::direct_io_mode::off},
};
INSTANTIATE_TEST_SUITE_P(paths, stream_order, ::testing::ValuesIn(cases),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
