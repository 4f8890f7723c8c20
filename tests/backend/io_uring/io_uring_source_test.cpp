// The io_uring source: its probe and the FERRY_IO_URING settings (off, auto, on), and its reads
// of whole files, short ends and many pieces. The conformance suite (tests/io/conformance_test.cpp)
// runs the same checks over it as over the posix source.
#include "backend/io_uring/io_uring_source.hpp"

#include <gtest/gtest.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>

#include "ferry/ferry.hpp"
#include "test_util.hpp"

namespace ferry::detail {
namespace {

bool is_io_uring_cause(reason_code c) {
    return c == reason_code::io_uring_not_built || c == reason_code::io_uring_disabled ||
           c == reason_code::io_uring_not_permitted || c == reason_code::io_uring_not_supported ||
           c == reason_code::io_uring_setup_failed;
}

settings io_uring_settings(io_uring_mode m) {
    settings s;
    s.threads = 4;
    s.task_size = 1 << 20;
    s.io_uring = m;
    s.io_uring_queue_depth = 4;
    return s;
}

bool io_uring_usable() { return !io_uring_probe(io_uring_settings(io_uring_mode::on)); }

TEST(io_uring, off_is_a_reason_with_its_code) {
    auto no = io_uring_probe(io_uring_settings(io_uring_mode::off));
    ASSERT_TRUE(no);
    EXPECT_EQ(no->cause, reason_code::io_uring_off);
    EXPECT_EQ(no->text, "FERRY_IO_URING=off");
}

TEST(io_uring, the_probe_says_why_not_with_a_stable_code) {
    auto no = io_uring_probe(io_uring_settings(io_uring_mode::auto_));
    if (no) {
        EXPECT_TRUE(is_io_uring_cause(no->cause)) << to_string(no->cause) << ": " << no->text;
        EXPECT_FALSE(no->text.empty());
    }
    // Asked once per process: the same verdict again.
    auto again = io_uring_probe(io_uring_settings(io_uring_mode::auto_));
    EXPECT_EQ(no.has_value(), again.has_value());
}

TEST(io_uring, auto_does_not_take_it_before_it_is_measured_faster) {
    test::temp_dir d;
    test::write_pattern_file(d / "a", 3u << 20);
    file f(d / "a", open_mode::read, io_uring_settings(io_uring_mode::auto_));
    std::vector<std::uint8_t> buf(3u << 20);
    ASSERT_EQ(f.read(buf.data(), buf.size(), 0), buf.size());
    EXPECT_EQ(buf, test::pattern(buf.size()));
    io_stats st = f.stats();
    EXPECT_EQ(st.route("io_uring", "host"), nullptr);
    for (const plan_reason& r : f.plan().codes) EXPECT_NE(r.code, reason_code::io_uring_on);
}

TEST(io_uring, on_reads_through_it_or_refuses_with_the_reason) {
    test::temp_dir d;
    test::write_pattern_file(d / "a", 3u << 20);
    file f(d / "a", open_mode::read, io_uring_settings(io_uring_mode::on));
    std::vector<std::uint8_t> buf(3u << 20);
    if (!io_uring_usable()) {
        try {
            f.read(buf.data(), buf.size(), 0);
            FAIL() << "FERRY_IO_URING=on read without io_uring";
        } catch (const usage_error& e) {
            std::string what = e.what();
            EXPECT_NE(what.find("FERRY_IO_URING=on"), std::string::npos) << what;
            EXPECT_NE(what.find(d / "a"), std::string::npos) << what;
        }
        return;
    }
    const std::size_t n = buf.size() - 5;
    ASSERT_EQ(f.read(buf.data(), n, 5), n);
    buf.resize(n);
    EXPECT_EQ(buf, test::pattern(n, 5));
    io_stats st = f.stats();
    const route_stats* r = st.route("io_uring", "host");
    ASSERT_NE(r, nullptr);
    EXPECT_EQ(r->read.bytes, n);
    bool said = false;
    for (const plan_reason& c : f.plan().codes) said |= c.code == reason_code::io_uring_on && c.cause == reason_code::none;
    EXPECT_TRUE(said);
}

// The source itself, many pieces per read: whole ranges, a range that meets the end of the
// file (the error says where it ends), and a read of nothing.
TEST(io_uring, the_source_reads_ranges_and_reports_the_end_of_the_file) {
    if (!io_uring_usable()) GTEST_SKIP() << io_uring_probe(io_uring_settings(io_uring_mode::on))->text;
    test::temp_dir d;
    const std::size_t size = (5u << 20) + 123;
    test::write_pattern_file(d / "a", size);
    int fd = ::open((d / "a").c_str(), O_RDONLY);
    ASSERT_GE(fd, 0);
    {
        io_uring_source src(d / "a", fd, 4);
        EXPECT_EQ(src.size(), size);
        std::vector<std::uint8_t> buf(size);
        src.read(reinterpret_cast<char*>(buf.data()), size, 0, {d / "a", 0, size});
        EXPECT_EQ(buf, test::pattern(size));
        std::vector<std::uint8_t> part(4097);
        src.read(reinterpret_cast<char*>(part.data()), part.size(), 3u << 20, {d / "a", 3u << 20, part.size()});
        EXPECT_EQ(part, test::pattern(part.size(), 3u << 20));
        src.read(nullptr, 0, size, {d / "a", size, 0});
        try {
            src.read(reinterpret_cast<char*>(buf.data()), 2u << 20, size - 1000, {d / "a", size - 1000, 2u << 20});
            FAIL() << "read past the end";
        } catch (const end_of_file_error& e) {
            EXPECT_EQ(e.file_size(), size);
        }
    }
    ::close(fd);
}

TEST(io_uring, a_write_only_file_does_not_offer_it) {
    test::temp_dir d;
    unavailable_reason why;
    EXPECT_EQ(open_io_uring_source(d / "a", -1, open_mode::write, io_uring_settings(io_uring_mode::on), why), nullptr);
    EXPECT_EQ(why.cause, reason_code::opened_write_only);
}

TEST(io_uring, the_setting_is_read_and_a_bad_value_names_the_variable) {
    settings s;
    apply_setting(s, "FERRY_IO_URING", "on");
    EXPECT_EQ(s.io_uring, io_uring_mode::on);
    apply_setting(s, "FERRY_IO_URING", "off");
    EXPECT_EQ(s.io_uring, io_uring_mode::off);
    apply_setting(s, "FERRY_IO_URING_QUEUE_DEPTH", "64");
    EXPECT_EQ(s.io_uring_queue_depth, 64u);
    EXPECT_EQ(settings{}.io_uring, io_uring_mode::auto_);
    try {
        apply_setting(s, "FERRY_IO_URING", "fast");
        FAIL();
    } catch (const settings_error& e) {
        EXPECT_NE(std::string(e.what()).find("FERRY_IO_URING"), std::string::npos) << e.what();
    }
    EXPECT_THROW(apply_setting(s, "FERRY_IO_URING_QUEUE_DEPTH", "0"), settings_error);
}

}  // namespace
}  // namespace ferry::detail
