// Stream-ordered reads and writes stay ordered with the stream on every path, GDS or not.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>
#include <future>
#include <vector>

#include "ferry/ferry.hpp"
#include "reliability/reliability_util.hpp"
#include "test_util.hpp"

namespace {

struct stream_case {
    const char* name;
    ferry::gds_mode gds;
    ferry::direct_io_mode direct;
    std::size_t staging_buffer_size = 0;  // 64 KiB: 512 KiB lanes, so a request spans many chunks
};

// Test listings name the parameter, not its bytes.
void PrintTo(const stream_case& c, std::ostream* os) { *os << c.name; }

class stream_order : public ::testing::TestWithParam<stream_case> {
protected:
    static ferry::settings settings_for(const stream_case& c) {
        ferry::settings s;
        s.gds = c.gds;
        s.direct_io = c.direct;
        s.gds_threshold = 0;
        s.staging_buffer_size = c.staging_buffer_size;
        return s;
    }
};

TEST_P(stream_order, read_runs_after_earlier_work_and_before_later_work) {
    FERRY_REQUIRE_GPU();
    ferry::test::temp_dir d;
    const std::size_t n = 64u << 20;
    ferry::test::write_pattern_file(d / "a", n);
    ferry::settings s = settings_for(GetParam());
    s.threads = 8;
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
    ferry::settings s = settings_for(GetParam());
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
    ferry::settings s = settings_for(GetParam());
    ferry::file f(d / "a", ferry::open_mode::read, s);
    ferry::device_buffer dev(4u << 20);
    ferry::stream st;
    EXPECT_THROW(f.read_async(dev.data(), 4u << 20, 0, st.get()), ferry::end_of_file_error);
    st.synchronize();
}

// Host memory on a stream: the read lands after the stream's earlier work (a copy that writes
// the same buffer) and before its later work (a copy of the buffer to the GPU).
TEST_P(stream_order, read_to_host_memory_keeps_stream_order) {
    FERRY_REQUIRE_GPU();
    ferry::test::temp_dir d;
    const std::size_t n = 8u << 20;
    ferry::test::write_pattern_file(d / "a", n);
    ferry::file f(d / "a", ferry::open_mode::read, settings_for(GetParam()));
    ferry::device_buffer poison(n), dev(n);
    ASSERT_EQ(cudaMemset(poison.data(), 0xEE, n), cudaSuccess);
    ferry::pinned_buffer host(n);
    std::vector<std::uint8_t> back(n);
    ferry::stream st;
    cudaStream_t cs = st.get();
    ASSERT_EQ(cudaMemcpyAsync(host.data(), poison.data(), n, cudaMemcpyDeviceToHost, cs), cudaSuccess);
    auto fu = f.read_async(host.data(), n, 0, cs);
    ASSERT_EQ(cudaMemcpyAsync(dev.data(), host.data(), n, cudaMemcpyHostToDevice, cs), cudaSuccess);
    st.synchronize();
    EXPECT_EQ(fu.get(), n);
    ferry::copy_memory(back.data(), dev.data(), n);
    EXPECT_TRUE(back == ferry::test::pattern(n));
    EXPECT_EQ(f.stats().reads(ferry::io_path::host).bytes, n);
}

// A file closed while its stream has not yet reached a request: close() does not wait for the
// stream, and the request ends with a usage_error instead of touching a closed descriptor.
TEST_P(stream_order, a_file_closed_before_its_stream_arrives_fails_the_request) {
    FERRY_REQUIRE_GPU();
    ferry::test::temp_dir d;
    const std::size_t n = 4u << 20;
    ferry::test::write_pattern_file(d / "a", n);
    ferry::file f(d / "a", ferry::open_mode::read, settings_for(GetParam()));
    ferry::device_buffer dev(n);
    ferry::stream st;
    // Hold the stream with a host function that waits for the test (on the CPU only).
    std::promise<void> gate;
    std::shared_future<void> open_gate = gate.get_future().share();
    auto hold = [](void* p) { static_cast<std::shared_future<void>*>(p)->wait(); };
    ASSERT_EQ(cudaLaunchHostFunc(st.get(), hold, &open_gate), cudaSuccess);
    auto fu = f.read_async(dev.data(), n, 0, st.get());
    ferry::test::within(std::chrono::seconds(30), "close with a stream-ordered read queued", [&] { f.close(); });
    gate.set_value();
    st.synchronize();
    EXPECT_THROW(fu.get(), ferry::usage_error);
}

// Reads without a stream of the caller's go through the lanes after the calling thread's
// per-thread stream, and may start their file side ahead of their place there: never ahead of
// a stream-ordered write queued before them, whose bytes they must read: queued behind other
// reads' chunks, and queued on idle lanes while the stream has not reached the write.
TEST(stream_order_ahead, a_read_after_a_stream_ordered_write_reads_what_it_wrote) {
    FERRY_REQUIRE_GPU();
    ferry::test::temp_dir d;
    const std::size_t n = 64u << 20;  // above the lanes' threshold: the read takes the lanes
    ferry::test::write_pattern_file(d / "a", n);
    ferry::settings s;
    s.gds = ferry::gds_mode::off;
    s.staging_buffer_size = 256u << 10;  // 1 MiB lane buffers: many chunks on every lane
    ferry::file f(d / "a", ferry::open_mode::read_write, s);
    ferry::device_buffer src(n), dst(n), early(n);
    std::vector<std::uint8_t> back(n);
    const auto expect = ferry::test::pattern(n);
    for (int round = 0; round < 3; ++round) {
        // Before the write: reads in a row keep the lanes busy, so the write's and the next
        // read's chunks queue behind theirs.
        std::vector<std::future<std::size_t>> before;
        for (int k = 0; k < 3; ++k) before.push_back(f.read_async(early.data(), n, 0));
        const unsigned char v = static_cast<unsigned char>(0x30 + round);
        // Odd rounds hold the stream before the write until the read is queued, with the lanes
        // idle by then: the read may not start its file side when it is queued.
        std::promise<void> gate;
        std::shared_future<void> open_gate = gate.get_future().share();
        const bool held = round % 2 == 1;
        struct opener {  // the stream never stays held, also where an assertion returns early
            std::promise<void>& p;
            bool armed = false;
            void open() {
                if (armed) p.set_value();
                armed = false;
            }
            ~opener() { open(); }
        } release{gate};
        if (held) {
            for (auto& b : before) EXPECT_EQ(b.get(), n);
            before.clear();
            auto hold = [](void* p) { static_cast<std::shared_future<void>*>(p)->wait(); };
            ASSERT_EQ(cudaLaunchHostFunc(cudaStreamPerThread, hold, &open_gate), cudaSuccess);
            release.armed = true;
        }
        ASSERT_EQ(cudaMemsetAsync(src.data(), v, n, cudaStreamPerThread), cudaSuccess);
        auto w = f.write_async(src.data(), n, 0, reinterpret_cast<ferry::stream_t>(cudaStreamPerThread));
        auto r = f.read_async(dst.data(), n, 0);
        release.open();
        EXPECT_EQ(r.get(), n);
        EXPECT_EQ(w.get(), n);
        for (auto& b : before) EXPECT_EQ(b.get(), n);
        ferry::copy_memory(back.data(), dst.data(), n);
        EXPECT_TRUE(std::all_of(back.begin(), back.end(), [&](std::uint8_t b) { return b == v; })) << "round " << round;
        // The reads before the write may have seen the file before or after it, or in between;
        // put the pattern back for the next round.
        ferry::copy_memory(src.data(), expect.data(), n);
        f.write(src.data(), n, 0);
    }
}

// A read on the lanes answers to the stop flag of the thread that made it, between chunks: the
// host functions that start the later chunks' file sides run on CUDA's thread, which has no
// flag of its own. Stopped just after the call, with a thousand chunks to go, it fails with
// interrupted_error instead of reading them all; the lanes serve the next read as before.
TEST(stream_order_stop, a_stopped_lane_read_starts_no_more_chunks) {
    FERRY_REQUIRE_GPU();
    ferry::test::temp_dir d;
    const std::size_t n = 256u << 20;
    ferry::test::write_pattern_file(d / "a", n);
    ferry::settings s;
    s.gds = ferry::gds_mode::off;
    s.staging_buffer_size = 64u << 10;  // 256 KiB lane buffers: 1,024 chunks
    ferry::file f(d / "a", ferry::open_mode::read, s);
    ferry::device_buffer dst(n);
    ferry::stream st;
    for (bool ordered : {true, false}) {
        ferry::stop_source stop;
        std::future<std::size_t> fu;
        {
            ferry::stop_scope scope(stop);
            fu = ordered ? f.read_async(dst.data(), n, 0, st.get()) : f.read_async(dst.data(), n, 0);
        }
        stop.request_stop();
        EXPECT_THROW(fu.get(), ferry::interrupted_error) << (ordered ? "on a stream" : "without a stream");
        ASSERT_EQ(cudaStreamSynchronize(st.get()), cudaSuccess);
    }
    EXPECT_EQ(f.read_async(dst.data(), n, 0, st.get()).get(), n);
    std::vector<std::uint8_t> back(n);
    ferry::copy_memory(back.data(), dst.data(), n);
    const auto expect = ferry::test::pattern(n);
    EXPECT_EQ(std::memcmp(back.data(), expect.data(), n), 0);
}

const stream_case cases[] = {
    {"staged", ferry::gds_mode::off, ferry::direct_io_mode::off},
    {"staged_direct", ferry::gds_mode::off, ferry::direct_io_mode::on},
    {"gds_auto", ferry::gds_mode::auto_, ferry::direct_io_mode::off},
    {"many_chunks", ferry::gds_mode::off, ferry::direct_io_mode::off, 64u << 10},
};
INSTANTIATE_TEST_SUITE_P(paths, stream_order, ::testing::ValuesIn(cases),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(stream_order_gds, on_is_refused_for_device_memory_on_a_stream) {
    FERRY_REQUIRE_GPU();
    ferry::test::temp_dir d;
    ferry::test::write_pattern_file(d / "a", 1u << 20);
    ferry::settings s;
    s.gds = ferry::gds_mode::on;
    s.gds_threshold = 0;
    ferry::file f(d / "a", ferry::open_mode::read, s);
    ferry::device_buffer dev(1u << 20);
    ferry::path_plan plan;
    try {
        plan = f.plan();
    } catch (const ferry::cufile_error& e) {  // FERRY_GDS=on refuses a file cuFile cannot register
        GTEST_SKIP() << "cuFile cannot be used for this file here: " << e.what();
    }
    if (plan.path != ferry::io_path::gds && plan.path != ferry::io_path::cufile_compat)
        GTEST_SKIP() << "cuFile cannot be used for this file here: "
                     << (plan.reasons.empty() ? std::string("no reason given") : plan.reasons.back());
    ferry::stream st;
    EXPECT_THROW(f.read_async(dev.data(), 1u << 20, 0, st.get()), ferry::usage_error);
    EXPECT_EQ(f.read(dev.data(), 1u << 20, 0), 1u << 20);  // without a stream, cuFile it is
}

}  // namespace
