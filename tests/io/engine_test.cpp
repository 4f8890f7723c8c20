// The engine's sizing of its stream lanes (io/engine.cpp), checked without a GPU.
#include "io/engine.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

namespace ferry::detail {
namespace {

TEST(engine, stream_lanes_take_four_staging_buffers_within_the_memory_limit) {
    settings s;
    s.threads = 4;
    s.staging_buffers = 2;
    s.staging_buffer_size = 2u << 20;
    engine roomy(s.resolved());
    EXPECT_EQ(roomy.lanes().count(), 4u);
    EXPECT_EQ(roomy.lanes().buffer_size(), 8u << 20);
    // Asked for: as many lanes and as large as the limit allows.
    s.stream_lanes = 6;
    s.lane_buffer_size = 4u << 20;
    engine asked(s.resolved());
    EXPECT_EQ(asked.lanes().count(), 6u);
    EXPECT_EQ(asked.lanes().buffer_size(), 4u << 20);
    s.lane_buffer_size = 1u << 30;  // more than the limit leaves: (1 GiB - 16 MiB) / 12, in 64 KiB
    engine capped(s.resolved());
    EXPECT_EQ(capped.lanes().buffer_size(), ((1u << 30) - (16u << 20)) / 12 / (64u << 10) * (64u << 10));
    s.stream_lanes = 0;
    s.lane_buffer_size = 0;

    // 4 x 2 x 64 KiB staging buffers leave 512 KiB of 1 MiB: 4 lanes x 2 buffers x 64 KiB.
    s.staging_buffer_size = 64u << 10;
    s.staging_memory_limit = 1u << 20;
    engine tight(s.resolved());
    EXPECT_EQ(tight.lanes().buffer_size(), 64u << 10);
    EXPECT_LE(4 * 2 * tight.staging().buffer_size() + 4 * 2 * tight.lanes().buffer_size(), 1u << 20);
}

TEST(engine, file_workers_start_on_first_use_and_count_as_pending) {
    settings s;
    s.threads = 2;
    engine e(s.resolved());
    EXPECT_EQ(e.pending(), 0u);
    thread_pool& files = e.file_workers();
    EXPECT_EQ(&files, &e.file_workers());
    EXPECT_EQ(files.size(), 2u);
    std::atomic<bool> go{false};
    files.submit([&] {
        while (!go) std::this_thread::yield();
    });
    EXPECT_EQ(e.pending(), 1u);
    go = true;
}

}  // namespace
}  // namespace ferry::detail
