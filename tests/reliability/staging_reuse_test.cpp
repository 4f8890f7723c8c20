// Staging buffers are never reused before their copy to the GPU finished: 10^4 reads of random
// ranges (random sizes and alignments, many in flight at once, with and without O_DIRECT)
// through small pinned staging buffers into device memory. Each transfer is checked twice: by a
// checksum computed on the GPU over the bytes where they landed (device_checksum.cu), and
// byte-exact on the host once the buffer is copied back, which also says where a mismatch is.
// A buffer refilled while its DMA was still running would show up as bytes of another range.
// Needs a GPU; skips without one.
#include <random>

#include "device_checksum.hpp"
#include "ferry/ferry.hpp"
#include "reliability_util.hpp"
#include "test_util.hpp"

namespace ferry::test {
namespace {

using namespace std::chrono_literals;

TEST(staging_reuse, ten_thousand_random_transfers_land_byte_exact) {
    FERRY_REQUIRE_GPU();
    temp_dir dir;
    const std::size_t file_size = 64u << 20;
    write_pattern_file(dir / "a", file_size);
    const auto expect = pattern(file_size);

    constexpr int batch = 48;             // requests in flight at once
    constexpr std::size_t slot = 1u << 20; // destination region per request
    device_buffer dst(batch * slot + 4096);
    fill_memory(dst.data(), 0, batch * slot + 4096);  // copied back whole: no uninitialized reads
    std::vector<std::uint8_t> back(batch * slot + 4096);
    std::mt19937_64 rng(6);
    int transfers = 0;
    for (auto direct : {direct_io_mode::off, direct_io_mode::on}) {
        settings s;
        s.threads = 4;
        s.staging_buffer_size = 64 << 10;  // small buffers: each is reused many times per request
        s.staging_buffers = 2;
        s.gds = gds_mode::off;
        s.direct_io = direct;
        file f(dir / "a", open_mode::read, s);
        stream st;
        for (int round = 0; round < 5000 / batch + 1; ++round) {
            struct pending {
                std::size_t at, n;
                std::uint64_t off;
                std::future<std::size_t> done;
            };
            std::vector<pending> reqs;
            for (int i = 0; i < batch; ++i) {
                std::size_t n = rng() % (slot - 4096) + 1;
                std::uint64_t off = rng() % (file_size - n);
                std::size_t at = i * slot + rng() % 4096;  // unaligned destinations too
                void* p = static_cast<char*>(dst.data()) + at;
                auto fu = (rng() % 2) ? f.read_async(p, n, off) : f.read_async(p, n, off, st.get());
                reqs.push_back({at, n, off, std::move(fu)});
            }
            within(120s, "staged reads", [&] {
                for (auto& r : reqs) EXPECT_EQ(r.done.get(), r.n);
            });
            st.synchronize();
            std::vector<checked_range> ranges;
            for (const auto& r : reqs) ranges.push_back({r.at, r.n, r.off});
            const auto sums = device_checksums(dst.data(), ranges);
            copy_memory(back.data(), dst.data(), back.size());
            for (std::size_t i = 0; i < reqs.size(); ++i) {
                const auto& r = reqs[i];
                ++transfers;
                ASSERT_EQ(sums[i], host_checksum(expect.data() + r.off, r.n, r.off))
                    << "transfer " << transfers << ": device checksum of " << r.n << " bytes from offset "
                    << r.off << " differs (a staging buffer reused too early?)";
                ASSERT_TRUE(std::equal(back.begin() + r.at, back.begin() + r.at + r.n,
                                       expect.begin() + static_cast<std::ptrdiff_t>(r.off)))
                    << "transfer " << transfers << ": " << r.n << " bytes from offset " << r.off
                    << " differ (a staging buffer reused too early?)";
            }
        }
        EXPECT_GT(f.stats().reads(direct == direct_io_mode::on ? io_path::staged_direct : io_path::staged).bytes +
                      f.stats().reads(io_path::staged).bytes,
                  0u);
    }
    EXPECT_GE(transfers, 10000);
    std::printf("[ figures  ] %d staged transfers checked by device checksum and byte-exact\n", transfers);
}

}  // namespace
}  // namespace ferry::test
