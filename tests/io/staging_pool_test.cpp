#include "io/staging_pool.hpp"
#include "ferry/stats.hpp"
#include "io/thread_pool.hpp"
#include "test_util.hpp"

#include <atomic>
#include <stdexcept>

TEST(staging_pool, stays_within_its_memory_limit) {
    ferry::detail::staging_pool pool(16, 4, 8u << 20, 16u << 20);
    EXPECT_LE(16u * 4u * pool.buffer_size(), 16u << 20);
    EXPECT_EQ(pool.buffer_size() % (64u << 10), 0u);
    auto& slot = pool.slot(3);
    EXPECT_EQ(slot.buffers.size(), 4u);
    EXPECT_LE(pool.allocated(), 16u << 20);
    EXPECT_LE(ferry::staging_memory_in_use(), ferry::staging_memory_peak());
    for (auto* b : slot.buffers) EXPECT_EQ(reinterpret_cast<std::uintptr_t>(b) % 4096, 0u);
}

TEST(thread_pool, runs_many_mixed_tasks_and_drains_on_destruction) {
    std::atomic<long> sum{0};
    {
        ferry::detail::thread_pool pool(4);
        for (long i = 0; i < 100000; ++i)
            pool.submit([&sum, i] {
                if (i % 1000 == 0) {
                    volatile long spin = 0;
                    for (int k = 0; k < 10000; ++k) spin = spin + k;
                }
                sum += i;
            });
    }  // destruction with work queued runs it all
    EXPECT_EQ(sum.load(), 100000L * 99999L / 2);
}

TEST(thread_pool, workers_know_their_index) {
    ferry::detail::thread_pool pool(3);
    std::atomic<int> bad{0};
    std::atomic<int> done{0};
    for (int i = 0; i < 300; ++i)
        pool.submit([&] {
            int w = ferry::detail::thread_pool::worker_index();
            if (w < 0 || w >= 3) ++bad;
            ++done;
        });
    while (done < 300) std::this_thread::yield();
    EXPECT_EQ(bad.load(), 0);
    EXPECT_EQ(ferry::detail::thread_pool::worker_index(), -1);
}
