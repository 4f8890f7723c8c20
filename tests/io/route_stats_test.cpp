// Statistics by route: the source that served the bytes and the mover, beside the io_path names.
#include <gtest/gtest.h>

#include <vector>

#include "ferry/ferry.hpp"
#include "test_util.hpp"

namespace {

TEST(route_stats, reads_count_under_their_source_and_mover) {
    ferry::test::temp_dir dir;
    std::string path = dir / "a.bin";
    ferry::test::write_pattern_file(path, 4u << 20);
    ferry::settings s;
    s.threads = 2;
    ferry::io_stats before = ferry::process_stats();
    ferry::file f(path, ferry::open_mode::read, s);
    std::vector<std::uint8_t> buf(4u << 20);
    f.read(buf.data(), buf.size(), 0);
    ferry::io_stats st = f.stats();  // route() points into this snapshot
    const ferry::route_stats* r = st.route("posix", "host");
    ASSERT_NE(r, nullptr);
    EXPECT_EQ(r->read.bytes, 4u << 20);
    EXPECT_EQ(r->read.requests, 1u);
    EXPECT_EQ(r->write.bytes, 0u);
    EXPECT_EQ(f.stats().reads(ferry::io_path::host).bytes, 4u << 20) << "the io_path names still count";

    ferry::io_stats moved = ferry::process_stats() - before;
    ASSERT_NE(moved.route("posix", "host"), nullptr);
    EXPECT_EQ(moved.route("posix", "host")->read.bytes, 4u << 20);

    ferry::io_stats sum = moved;
    sum += moved;
    EXPECT_EQ(sum.route("posix", "host")->read.bytes, 8u << 20);
    EXPECT_TRUE((moved - moved).routes.empty());
}

TEST(route_stats, o_direct_reads_count_under_the_direct_source) {
    ferry::test::temp_dir dir;
    std::string path = dir / "a.bin";
    ferry::test::write_pattern_file(path, 2u << 20);
    ferry::settings s;
    s.direct_io = ferry::direct_io_mode::on;
    ferry::file f(path, ferry::open_mode::read, s);
    std::vector<std::uint8_t> buf(2u << 20);
    f.read(buf.data(), buf.size(), 0);
    ferry::io_stats st = f.stats();
    if (st.reads(ferry::io_path::direct).bytes == 0) GTEST_SKIP() << "O_DIRECT refused on this file system";
    ASSERT_NE(st.route("direct", "host"), nullptr);
    EXPECT_EQ(st.route("direct", "host")->read.bytes, 2u << 20);
    EXPECT_EQ(buf, ferry::test::pattern(buf.size()));
}

}  // namespace
