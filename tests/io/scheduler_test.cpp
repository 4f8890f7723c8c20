// The scheduler: many ranges of many files as one batch with one future.
#include "io/scheduler.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>

#include "ferry/file.hpp"
#include "ferry/memory.hpp"

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

// ferry::read_batch, the public face of the gathers: pieces of several files, of many sizes.
struct batch_files {
    test::temp_dir dir;
    std::vector<std::unique_ptr<file>> files;
    std::vector<read_piece> pieces;
    std::vector<std::vector<std::uint8_t>> want;
    std::size_t total = 0;
    batch_files() {
        for (int i = 0; i < 3; ++i) {
            std::string path = dir / ("b" + std::to_string(i) + ".bin");
            test::write_pattern_file(path, 3u << 20, static_cast<std::uint32_t>(i + 7));
            files.push_back(std::make_unique<file>(path));
        }
        for (std::size_t k = 0; k < 240; ++k) {  // 1 byte to about 70 KiB each, every file in turn
            std::size_t len = 1 + (k * 2654435761u) % (70u << 10);
            std::uint64_t off = (k * 40503u) % ((3u << 20) - len);
            pieces.push_back({files[k % 3].get(), off, len, nullptr});
            want.push_back(test::pattern(len, off, static_cast<std::uint32_t>(k % 3 + 7)));
            total += len;
        }
    }
    // Packed one after the other from `base`.
    void place(unsigned char* base) {
        std::size_t at = 0;
        for (auto& p : pieces) {
            p.memory = base + at;
            at += p.length;
        }
    }
    void check(const unsigned char* host) const {
        std::size_t at = 0;
        for (std::size_t k = 0; k < pieces.size(); ++k) {
            EXPECT_EQ(0, std::memcmp(host + at, want[k].data(), want[k].size())) << "piece " << k;
            at += pieces[k].length;
        }
    }
};

TEST(read_batch, pieces_of_many_files_land_byte_exact_in_host_memory) {
    batch_files b;
    std::vector<unsigned char> out(b.total);
    b.place(out.data());
    EXPECT_EQ(read_batch(b.pieces).get(), b.total);
    b.check(out.data());
    EXPECT_EQ(read_batch({}).get(), 0u);
}

TEST(read_batch, pieces_of_many_files_land_byte_exact_in_gpu_memory) {
    FERRY_REQUIRE_GPU();
    batch_files b;
    device_buffer d(b.total, 0);
    b.place(static_cast<unsigned char*>(d.data()));
    io_stats before = process_stats();
    EXPECT_EQ(read_batch(b.pieces).get(), b.total);
    std::vector<unsigned char> back(b.total);
    copy_memory(back.data(), d.data(), b.total);
    b.check(back.data());
    io_stats moved = process_stats() - before;
    EXPECT_EQ(moved.bytes_read(), b.total);
    // One kind of memory per batch.
    std::vector<unsigned char> host(16);
    std::vector<read_piece> mixed{{b.files[0].get(), 0, 16, d.data()}, {b.files[1].get(), 0, 16, host.data()}};
    EXPECT_THROW(read_batch(mixed), usage_error);
}

// Batches started one after another from one thread follow each other on the stream lanes,
// each completed by the lanes: all in flight at once, awaited last first, every byte in place.
TEST(read_batch, batches_in_flight_together_on_the_gpu_each_land_byte_exact) {
    FERRY_REQUIRE_GPU();
    test::temp_dir dir;
    constexpr std::size_t file_bytes = 40u << 20;
    std::vector<std::unique_ptr<file>> files;
    for (std::uint32_t i = 0; i < 2; ++i) {
        std::string path = dir / ("f" + std::to_string(i) + ".bin");
        test::write_pattern_file(path, file_bytes, 11 + i);
        files.push_back(std::make_unique<file>(path));
    }
    constexpr std::size_t batches = 12;
    constexpr std::size_t per_batch = 3;  // pieces, each larger than a lane buffer
    constexpr std::size_t piece = 9u << 20;
    device_buffer d(batches * per_batch * piece, 0);
    auto* base = static_cast<unsigned char*>(d.data());
    std::vector<std::future<std::size_t>> inflight;
    std::vector<std::uint64_t> offsets;
    for (std::size_t b = 0; b < batches; ++b) {
        std::vector<read_piece> pieces;
        for (std::size_t k = 0; k < per_batch; ++k) {
            std::size_t n = b * per_batch + k;
            std::uint64_t off = (n * 1048573u) % (file_bytes - piece);
            offsets.push_back(off);
            pieces.push_back({files[n % 2].get(), off, piece, base + n * piece});
        }
        inflight.push_back(read_batch(pieces));
    }
    for (std::size_t b = batches; b-- > 0;) EXPECT_EQ(inflight[b].get(), per_batch * piece) << "batch " << b;
    std::vector<unsigned char> back(piece);
    for (std::size_t n = 0; n < batches * per_batch; ++n) {
        copy_memory(back.data(), base + n * piece, piece);
        auto want = test::pattern(piece, offsets[n], static_cast<std::uint32_t>(11 + n % 2));
        EXPECT_EQ(0, std::memcmp(back.data(), want.data(), piece)) << "piece " << n;
    }
}

TEST(read_batch, bad_pieces_fail_before_any_byte_moves) {
    batch_files b;
    std::vector<unsigned char> out(b.total, 0xAB);
    b.place(out.data());
    b.pieces.push_back({b.files[0].get(), (3u << 20) - 4, 8, out.data()});  // past the end
    EXPECT_THROW(read_batch(b.pieces).get(), end_of_file_error);
    EXPECT_TRUE(std::all_of(out.begin(), out.end(), [](unsigned char c) { return c == 0xAB; }));
    std::vector<read_piece> none{{nullptr, 0, 8, out.data()}};
    EXPECT_THROW(read_batch(none), usage_error);
}

}  // namespace
}  // namespace ferry::detail
