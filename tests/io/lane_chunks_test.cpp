// Cutting gathers into lane chunks: every byte of every row read from the right file offset and
// copied to the right place, chunks within the buffer size, and rows that fit a chunk read as
// one strided read rather than one per row. The lanes are emulated on the CPU: each chunk's reads
// fill a buffer, its copies move the buffer to the destinations.
#include "io/lane_chunks.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "ferry/file.hpp"

#include "test_util.hpp"

namespace ferry::detail {
namespace {

struct two_files {
    test::temp_dir dir;
    std::vector<std::shared_ptr<file_impl>> files;
    two_files() {
        settings s;
        s.threads = 1;
        for (std::uint32_t seed = 1; seed <= 2; ++seed) {
            std::string path = dir / ("f" + std::to_string(seed) + ".bin");
            test::write_pattern_file(path, 4096, seed);
            files.push_back(std::make_shared<file_impl>(path, open_mode::read, s));
        }
    }
    std::uint32_t seed_of(const file_impl* f) const { return f == files[0].get() ? 1 : 2; }
};

// What the lanes do with the chunks, on the CPU, reading the pattern the files hold.
void carry_out(const std::vector<lane_chunk>& chunks, const two_files& f) {
    for (const lane_chunk& c : chunks) {
        std::vector<std::uint8_t> buffer(c.len, 0xEE);
        for (const lane_read& r : c.reads)
            for (std::size_t k = 0; k < r.rows; ++k)
                for (std::size_t b = 0; b < r.len; ++b) {
                    ASSERT_LT(r.at + k * r.len + b, c.len);
                    buffer[r.at + k * r.len + b] = test::pattern_byte(r.offset + k * r.pitch + b, f.seed_of(r.file));
                }
        for (const lane_copy& k : c.copies)
            for (std::size_t row = 0; row < k.rows; ++row) {
                ASSERT_LE(k.at + row * k.pitch + k.width, c.len);
                std::memcpy(k.dst + row * k.width, buffer.data() + k.at + row * k.pitch, k.width);
            }
    }
}

TEST(lane_chunks, every_row_lands_byte_exact_in_chunks_within_the_buffer) {
    two_files f;
    std::mt19937_64 rng(7);
    for (int trial = 0; trial < 200; ++trial) {
        std::vector<gather> extents;
        std::vector<std::vector<std::uint8_t>> out;
        const int n = 1 + static_cast<int>(rng() % 6);
        for (int i = 0; i < n; ++i) {
            std::uint64_t rows = rng() % 4 == 0 ? 1 : 1 + rng() % 40;
            std::uint64_t width = 1 + rng() % 60;
            std::uint64_t pitch = width + rng() % 40;
            std::uint64_t offset = rng() % 512;
            out.emplace_back(rows * width, 0);
            extents.push_back({f.files[rng() % 2], offset, rows, pitch, width, out.back().data(), rng() % 3 == 0, false});
        }
        const std::size_t capacity = 16 + rng() % 400;
        std::vector<lane_chunk> chunks = cut_into_chunks(extents, capacity);
        std::size_t pos = 0;
        for (const lane_chunk& c : chunks) {
            EXPECT_EQ(c.pos, pos);
            EXPECT_GT(c.len, 0u);
            EXPECT_LE(c.len, capacity);
            pos += c.len;
        }
        carry_out(chunks, f);
        for (std::size_t i = 0; i < extents.size(); ++i) {
            const gather& g = extents[i];
            for (std::uint64_t r = 0; r < g.rows; ++r)
                for (std::uint64_t b = 0; b < g.width; ++b)
                    ASSERT_EQ(out[i][r * g.width + b], test::pattern_byte(g.offset + r * g.pitch + b, f.seed_of(g.file.get())))
                        << "trial " << trial << " extent " << i << " row " << r << " byte " << b;
        }
    }
}

TEST(lane_chunks, rows_that_fit_a_chunk_are_one_strided_read) {
    // A half slice along dim 1 of a (100000, 2688) bf16 tensor: 100,000 rows of 5,376 bytes,
    // 10,752 apart, into 8 MiB lane buffers. Its destinations are never touched by the cutting.
    two_files f;
    std::vector<gather> extents{{f.files[0], 0, 100000, 10752, 5376, reinterpret_cast<void*>(std::uintptr_t{1} << 40), false, false}};
    std::vector<lane_chunk> chunks = cut_into_chunks(extents, 8u << 20);
    std::size_t reads = 0, rows = 0, bytes = 0;
    for (const lane_chunk& c : chunks) {
        // The rest of a row the previous chunk cut, the strided rows, the start of a row this
        // chunk's end cuts.
        EXPECT_LE(c.reads.size(), 3u);
        EXPECT_LE(c.copies.size(), 1u);  // the rows land packed: one plain copy
        reads += c.reads.size();
        for (const lane_read& r : c.reads) rows += r.rows, bytes += r.rows * r.len;
    }
    EXPECT_EQ(bytes, std::size_t{100000} * 5376);
    EXPECT_GE(rows, std::size_t{100000});
    EXPECT_LE(reads, 3 * chunks.size());
    EXPECT_EQ(chunks.size(), (std::size_t{100000} * 5376 + (8u << 20) - 1) / (8u << 20));
}

}  // namespace
}  // namespace ferry::detail
