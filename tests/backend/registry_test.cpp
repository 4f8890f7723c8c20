// The source registry: schemes, a source registered at run time.
#include "backend/registry.hpp"

#include <gtest/gtest.h>

#include <vector>

#include "backend/memory_source.hpp"
#include "ferry/ferry.hpp"
#include "test_util.hpp"

namespace ferry::detail {
namespace {

TEST(registry, an_unknown_scheme_is_a_usage_error_naming_it) {
    try {
        open_source(location("nosuch://user:pw@host/x"), open_mode::read, settings{});
        FAIL() << "no error";
    } catch (const usage_error& e) {
        std::string m = e.what();
        EXPECT_NE(m.find("nosuch"), std::string::npos) << m;
        EXPECT_EQ(m.find("pw@"), std::string::npos) << m;
    }
}

TEST(registry, a_scheme_registered_at_run_time_opens_through_ferry_file) {
    test::register_memory_source("mem");
    test::temp_dir dir;
    std::string path = dir / "m.bin";
    test::write_pattern_file(path, 3u << 20);
    ferry::file f("mem://" + path);
    std::vector<std::uint8_t> got(3u << 20);
    EXPECT_EQ(f.read(got.data(), got.size(), 0), got.size());
    EXPECT_EQ(got, test::pattern(got.size()));
    EXPECT_GT(f.stats().reads(io_path::host).bytes, 0u);
    io_stats st = f.stats();  // route() points into this snapshot
    const route_stats* r = st.route("memory", "host");
    ASSERT_NE(r, nullptr) << "statistics keyed by source and mover";
    EXPECT_EQ(r->read.bytes, 3u << 20);
    EXPECT_EQ(r->read.requests, 1u);
    EXPECT_EQ(st.route("posix", "host"), nullptr);
    EXPECT_TRUE(source_unavailable("memory", settings{}).empty());
}

TEST(registry, the_local_file_offers_direct_and_cufile_alternatives) {
    test::temp_dir dir;
    std::string path = dir / "a.bin";
    test::write_pattern_file(path, 1u << 20);
    auto s = open_source(location(path), open_mode::read, settings{});
    EXPECT_EQ(s->kind(), "posix");
    unavailable_reason why;
    EXPECT_EQ(s->alternative("http", why), nullptr);
    EXPECT_FALSE(why.text.empty());
    source* d = s->alternative("direct", why);
    if (d) EXPECT_GT(d->traits().align, 0u);
    s->close();
}

}  // namespace
}  // namespace ferry::detail
