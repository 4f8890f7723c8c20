// Large reads into GPU memory that their caller waits for go through the staging ring
// (io/ring_read.cpp): exact at any offset and length, counted on the ring's route, after the
// calling thread's earlier stream work; the lanes serve reads whose caller does not wait, reads
// that find the ring in use, and every read with FERRY_STAGING_RING=off. Needs a GPU.
#include <cuda_runtime_api.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "ferry/ferry.hpp"
#include "reliability/reliability_util.hpp"
#include "test_util.hpp"

namespace {

// 1 MiB lane buffers: a ring of 8 of them, so a read of 40 MiB goes round it five times.
ferry::settings ring_settings() {
    ferry::settings s;
    s.threads = 4;
    s.lane_buffer_size = 1u << 20;
    s.lane_threshold = 4u << 20;
    return s;
}

std::uint64_t moved_by(const ferry::io_stats& st, const char* mover) {
    const ferry::route_stats* r = st.route("posix", mover);
    return r ? r->read.bytes : 0;
}

std::vector<std::uint8_t> device_bytes(const void* p, std::size_t n) {
    std::vector<std::uint8_t> v(n);
    ferry::copy_memory(v.data(), p, n);
    return v;
}

TEST(staging_ring, a_waited_read_takes_the_ring_exact_at_any_offset_and_length) {
    FERRY_REQUIRE_GPU();
    ferry::test::temp_dir d;
    const std::size_t n = (40u << 20) + 4099;
    ferry::test::write_pattern_file(d / "a", n);
    ferry::file f(d / "a", ferry::open_mode::read, ring_settings());
    ferry::device_buffer dev(n);
    for (const auto& [offset, len] : std::vector<std::pair<std::size_t, std::size_t>>{
             {0, n}, {4099, n - 4099 - 13}, {3, (8u << 20) + 1}, {0, 4u << 20}}) {
        ferry::fill_memory(dev.data(), 0, n);
        ferry::io_stats before = f.stats();
        EXPECT_EQ(f.read(dev.data(), len, offset), len);
        EXPECT_TRUE(device_bytes(dev.data(), len) == ferry::test::pattern(len, offset)) << offset << " + " << len;
        ferry::io_stats moved = f.stats() - before;
        EXPECT_EQ(moved_by(moved, "ring"), len) << offset << " + " << len;
        EXPECT_EQ(moved_by(moved, "lanes"), 0u);
    }
    // Below the threshold: the workers' own staging buffers.
    ferry::io_stats before = f.stats();
    f.read(dev.data(), (4u << 20) - 1, 0);
    EXPECT_EQ(moved_by(f.stats() - before, "ring"), 0u);
    EXPECT_EQ(moved_by(f.stats() - before, "staged"), (4u << 20) - 1);
    // The plan says so.
    bool said = false;
    for (const auto& t : f.plan().reasons) said = said || t.find("ring of 8 x 1 MiB pinned buffers") != std::string::npos;
    EXPECT_TRUE(said);
}

TEST(staging_ring, off_and_for_futures_the_lanes_serve) {
    FERRY_REQUIRE_GPU();
    ferry::test::temp_dir d;
    const std::size_t n = (24u << 20) + 77;
    ferry::test::write_pattern_file(d / "a", n);
    ferry::device_buffer dev(n);
    const auto expect = ferry::test::pattern(n);
    {
        ferry::file f(d / "a", ferry::open_mode::read, ring_settings());
        EXPECT_EQ(f.read_async(dev.data(), n, 0).get(), n);  // nobody waits at the call: the lanes
        EXPECT_TRUE(device_bytes(dev.data(), n) == expect);
        EXPECT_EQ(moved_by(f.stats(), "lanes"), n);
        EXPECT_EQ(moved_by(f.stats(), "ring"), 0u);
    }
    ferry::settings off = ring_settings();
    off.staging_ring = false;
    ferry::file f(d / "a", ferry::open_mode::read, off);
    ferry::fill_memory(dev.data(), 0, n);
    f.read(dev.data(), n, 0);
    EXPECT_TRUE(device_bytes(dev.data(), n) == expect);
    EXPECT_EQ(moved_by(f.stats(), "lanes"), n);
    EXPECT_EQ(moved_by(f.stats(), "ring"), 0u);
}

// Several threads reading at once: one holds the ring at a time, the others take the lanes,
// and every read is exact.
TEST(staging_ring, reads_at_once_from_many_threads_share_the_ring_and_the_lanes) {
    FERRY_REQUIRE_GPU();
    ferry::test::temp_dir d;
    const std::size_t n = (16u << 20) + 4099;
    ferry::test::write_pattern_file(d / "a", n);
    ferry::file f(d / "a", ferry::open_mode::read, ring_settings());
    const auto expect = ferry::test::pattern(n);
    constexpr int readers = 4, rounds = 3;
    std::vector<ferry::device_buffer> dev;
    for (int i = 0; i < readers; ++i) dev.emplace_back(n);
    std::atomic<int> wrong{0}, failed{0};
    ferry::test::within(std::chrono::seconds(120), "concurrent waited reads", [&] {
        std::vector<std::thread> pool;
        for (int i = 0; i < readers; ++i)
            pool.emplace_back([&, i] {
                for (int r = 0; r < rounds; ++r) {
                    try {
                        ferry::fill_memory(dev[i].data(), 0, n);
                        f.read(dev[i].data(), n, 0);
                        if (device_bytes(dev[i].data(), n) != expect) ++wrong;
                    } catch (...) {
                        ++failed;
                    }
                }
            });
        for (auto& t : pool) t.join();
    });
    EXPECT_EQ(wrong.load(), 0);
    EXPECT_EQ(failed.load(), 0);
    ferry::io_stats st = f.stats();
    EXPECT_GT(moved_by(st, "ring"), 0u);
    EXPECT_EQ(moved_by(st, "ring") + moved_by(st, "lanes"), std::uint64_t(readers) * rounds * n);
}

// The ring's copies start after the work the calling thread queued on its per-thread stream
// before the read: here a memset held back by a host function that sleeps, which would
// overwrite the read's bytes if the ring did not wait for it.
TEST(staging_ring, a_read_lands_after_the_threads_earlier_stream_work) {
    FERRY_REQUIRE_GPU();
    ferry::test::temp_dir d;
    const std::size_t n = (12u << 20) + 5;
    ferry::test::write_pattern_file(d / "a", n);
    ferry::file f(d / "a", ferry::open_mode::read, ring_settings());
    ferry::device_buffer dev(n);
    auto nap = [](void*) { std::this_thread::sleep_for(std::chrono::milliseconds(200)); };
    ASSERT_EQ(cudaLaunchHostFunc(cudaStreamPerThread, nap, nullptr), cudaSuccess);
    ASSERT_EQ(cudaMemsetAsync(dev.data(), 0xEE, n, cudaStreamPerThread), cudaSuccess);
    f.read(dev.data(), n, 0);
    EXPECT_TRUE(device_bytes(dev.data(), n) == ferry::test::pattern(n));
    EXPECT_EQ(moved_by(f.stats(), "ring"), n);
}

// prepare_reads makes the lanes and the ring ahead: the first large read then allocates no
// pinned memory.
TEST(staging_ring, prepare_reads_makes_the_ring_ahead_of_the_first_read) {
    FERRY_REQUIRE_GPU();
    ferry::test::temp_dir d;
    const std::size_t n = 20u << 20;
    ferry::test::write_pattern_file(d / "a", n);
    ferry::settings s = ring_settings();
    s.lane_buffer_size = 2u << 20;  // a tuning of its own: an engine no other test made
    ferry::device_buffer dev(n);
    {
        ferry::file first(d / "a", ferry::open_mode::read, s);  // the workers' staging buffers
        first.read(dev.data(), 4096, 0);
    }
    ferry::prepare_reads(0, s);
    const std::uint64_t before = ferry::staging_memory_in_use();
    ferry::file f(d / "a", ferry::open_mode::read, s);
    f.read(dev.data(), n, 0);
    EXPECT_EQ(ferry::staging_memory_in_use(), before) << "the first large read made pinned memory";
    EXPECT_EQ(moved_by(f.stats(), "ring"), n);
    EXPECT_TRUE(device_bytes(dev.data(), n) == ferry::test::pattern(n));
    EXPECT_THROW(ferry::prepare_reads(ferry::cuda_device_count(), s), ferry::error);
}

// A read that fails (the file shrank under it) says so and leaves the ring to the next read;
// the fault loop (reliability/gpu_fault_injection_test.cpp) fails each call of a ring read in
// turn.
TEST(staging_ring, a_failed_read_is_typed_and_the_next_read_gets_the_ring) {
    FERRY_REQUIRE_GPU();
    ferry::test::temp_dir d;
    const std::size_t n = 32u << 20;
    ferry::test::write_pattern_file(d / "a", n);
    ferry::file f(d / "a", ferry::open_mode::read, ring_settings());
    ferry::device_buffer dev(n);
    {
        ferry::file w(d / "a", ferry::open_mode::read_write);
        w.truncate(n / 2);  // the size f knew is now past the end
    }
    EXPECT_THROW(f.read(dev.data(), n, 0), ferry::error);
    ferry::test::write_pattern_file(d / "b", n);
    ferry::file g(d / "b", ferry::open_mode::read, ring_settings());
    ferry::fill_memory(dev.data(), 0, n);
    EXPECT_EQ(g.read(dev.data(), n, 0), n);
    EXPECT_TRUE(device_bytes(dev.data(), n) == ferry::test::pattern(n));
    EXPECT_EQ(moved_by(g.stats(), "ring"), n);
}

}  // namespace
