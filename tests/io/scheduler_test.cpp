// The scheduler: many ranges of many files as one batch with one future.
#include "io/scheduler.hpp"

#include <gtest/gtest.h>

#include "test_util.hpp"

namespace ferry::detail {
namespace {

TEST(scheduler, a_batch_of_slices_of_many_files_lands_byte_exact) {
    test::temp_dir dir;
    settings s;
    s.threads = 4;
    std::vector<std::shared_ptr<file_impl>> files;
    for (int i = 0; i < 3; ++i) {
        std::string path = dir / ("t" + std::to_string(i) + ".bin");
        test::write_pattern_file(path, 5u << 20, static_cast<std::uint32_t>(i + 1));
        files.push_back(std::make_shared<file_impl>(path, open_mode::read, s));
    }
    std::vector<std::vector<std::uint8_t>> out(6, std::vector<std::uint8_t>(2u << 20));
    std::vector<transfer> batch;
    for (int i = 0; i < 6; ++i)
        batch.push_back({files[i % 3], static_cast<std::uint64_t>(i) * 100000, out[i].size(), out[i].data()});
    EXPECT_EQ(submit_batch(direction::read, batch).get(), 6 * (2u << 20));
    for (int i = 0; i < 6; ++i)
        EXPECT_EQ(out[i], test::pattern(out[i].size(), static_cast<std::uint64_t>(i) * 100000,
                                        static_cast<std::uint32_t>(i % 3 + 1)))
            << i;
    EXPECT_EQ(submit_batch(direction::read, {}).get(), 0u);
}

TEST(scheduler, the_first_error_ends_the_batch_after_every_range) {
    test::temp_dir dir;
    std::string path = dir / "a.bin";
    test::write_pattern_file(path, 1u << 20);
    auto f = std::make_shared<file_impl>(path, open_mode::read, settings{});
    std::vector<std::uint8_t> a(1u << 20), b(16);
    std::vector<transfer> batch{{f, 0, a.size(), a.data()}, {f, (1u << 20) - 8, b.size(), b.data()}};
    EXPECT_THROW(submit_batch(direction::read, batch).get(), end_of_file_error);
    EXPECT_EQ(a, test::pattern(a.size()));
}

TEST(scheduler, files_with_the_same_tuning_share_one_engine) {
    settings s;
    s.threads = 3;
    auto a = engine::shared(s.resolved());
    auto b = engine::shared(s.resolved());
    settings t = s;
    t.threads = 5;
    auto c = engine::shared(t.resolved());
    auto d = engine::shared(s.resolved());
    EXPECT_EQ(a, b);
    EXPECT_NE(a, c);
    EXPECT_EQ(a, d) << "another tuning in between does not replace the engine";
}

}  // namespace
}  // namespace ferry::detail
