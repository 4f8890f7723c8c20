// The I/O thread pool under stress: 10^5 tasks of mixed sizes from several submitting threads,
// destruction with work still queued (every queued task still runs), and many threads reading
// one file at once through ferry::file. Run under TSan by scripts/sanitize.sh.
#include <atomic>
#include <random>

#include "ferry/ferry.hpp"
#include "io/thread_pool.hpp"
#include "reliability_util.hpp"
#include "test_util.hpp"

namespace ferry::test {
namespace {

using namespace std::chrono_literals;

// A task of `work` units of busy work whose result lands in `sink` (so it is not optimised away).
void busy(std::uint64_t work, std::atomic<std::uint64_t>& sink) {
    std::uint64_t x = work;
    for (std::uint64_t i = 0; i < work; ++i) x = x * 6364136223846793005ull + 1442695040888963407ull;
    sink.fetch_add(x | 1, std::memory_order_relaxed);
}

TEST(thread_pool_stress, a_hundred_thousand_mixed_tasks_from_many_submitters) {
    std::atomic<std::uint64_t> sink{0};
    std::atomic<int> done{0};
    constexpr int submitters = 4, per_submitter = 25000;
    {
        detail::thread_pool pool(4);
        within(120s, "thread pool stress", [&] {
            thread_group threads;
            for (int s = 0; s < submitters; ++s) {
                threads.run([&, s] {
                    std::mt19937 rng(s);
                    for (int i = 0; i < per_submitter; ++i) {
                        // Mostly tiny tasks, a few long ones: queues both empty and deep.
                        std::uint64_t work = rng() % 100 == 0 ? 20000 : rng() % 200;
                        pool.submit([&, work] {
                            busy(work, sink);
                            done.fetch_add(1, std::memory_order_relaxed);
                        });
                    }
                });
            }
            EXPECT_NO_THROW(threads.join());
            while (pool.pending() != 0) std::this_thread::sleep_for(1ms);
        });
        EXPECT_EQ(done.load(), submitters * per_submitter);
        EXPECT_EQ(pool.pending(), 0u);
    }
    EXPECT_NE(sink.load(), 0u);
}

TEST(thread_pool_stress, destruction_with_work_queued_runs_every_task) {
    for (int round = 0; round < 20; ++round) {
        std::atomic<int> done{0};
        std::atomic<std::uint64_t> sink{0};
        within(60s, "pool destruction", [&] {
            detail::thread_pool pool(3);
            for (int i = 0; i < 2000; ++i)
                pool.submit([&, i] {
                    busy(i % 7 == 0 ? 5000 : 10, sink);
                    done.fetch_add(1);
                });
        });  // destroyed here, most tasks still queued
        EXPECT_EQ(done.load(), 2000) << "round " << round;
    }
}

TEST(thread_pool_stress, tasks_that_submit_tasks) {
    std::atomic<int> done{0};
    {
        detail::thread_pool pool(4);
        within(60s, "nested submit", [&] {
            for (int i = 0; i < 1000; ++i)
                pool.submit([&] {
                    for (int j = 0; j < 10; ++j) pool.submit([&] { done.fetch_add(1); });
                    done.fetch_add(1);
                });
            while (pool.pending() != 0) std::this_thread::sleep_for(1ms);
        });
    }
    EXPECT_EQ(done.load(), 11000);
}

TEST(thread_pool_stress, many_threads_read_one_file_with_some_requests_failing) {
    temp_dir dir;
    const std::size_t n = 6u << 20;
    write_pattern_file(dir / "a", n);
    const auto expect = pattern(n);
    settings s;
    s.threads = 4;
    s.task_size = 64 << 10;
    file f(dir / "a", open_mode::read, s);
    std::atomic<int> good{0}, eof{0};
    within(120s, "concurrent readers", [&] {
        thread_group readers;
        for (int t = 0; t < 8; ++t) {
            readers.run([&, t] {
                std::mt19937 rng(t);
                for (int i = 0; i < 40; ++i) {
                    std::uint64_t off = rng() % n;
                    std::size_t len = rng() % (1u << 20) + 1;
                    std::vector<std::uint8_t> buf(len);
                    try {
                        f.read(buf.data(), len, off);  // past the end for some: an error
                        if (std::equal(buf.begin(), buf.end(), expect.begin() + static_cast<std::ptrdiff_t>(off)))
                            ++good;
                    } catch (const end_of_file_error&) {
                        ++eof;
                        EXPECT_GT(off + len, n);
                    }
                }
            });
        }
        EXPECT_NO_THROW(readers.join());
    });
    EXPECT_EQ(good + eof, 8 * 40);
    EXPECT_GT(eof.load(), 0);
    EXPECT_TRUE(workers_idle(s));
}

}  // namespace
}  // namespace ferry::test
