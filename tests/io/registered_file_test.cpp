// ferry::registered_file: a file registered once, read into GPU memory by DMA from its pinned
// page-cache pages; used only while the file is unchanged; under the process's limit.
#include <gtest/gtest.h>

#include <algorithm>

#include <fcntl.h>
#include <sys/stat.h>

#include <fstream>
#include <string>
#include <vector>

#include "ferry/ferry.hpp"
#include "io/planner.hpp"
#include "test_util.hpp"

namespace {

using ferry::test::pattern;

bool mentions(const std::vector<std::string>& reasons, const std::string& word) {
    for (const auto& r : reasons)
        if (r.find(word) != std::string::npos) return true;
    return false;
}

// The planner's rule, from facts alone (no GPU).
ferry::detail::plan_facts device_read(bool registered, std::string changed = {}) {
    ferry::detail::plan_facts f;
    f.memory = ferry::memory_kind::device;
    f.size = std::size_t(1) << 30;
    f.threads = 16;
    f.staging_buffers = 2;
    f.staging_buffer_size = 2 << 20;
    f.cached_fraction = [] { return 1.0; };
    f.nvidia_fs_loaded = [] { return false; };
    using ferry::detail::unavailable_reason;
    f.alternatives.push_back({ferry::detail::alternative_for(ferry::detail::alternative_role::registered_pages),
                              [registered, changed]() -> std::optional<unavailable_reason> {
                                  if (registered) return std::nullopt;
                                  if (changed.empty()) return unavailable_reason{};
                                  return unavailable_reason{.text = changed,
                                                            .cause = ferry::reason_code::registration_changed};
                              }});
    return f;
}

TEST(registered_file, the_planner_reads_a_registered_file_by_dma_from_its_pages) {
    using namespace ferry::detail;
    plan_result p = plan_route(device_read(true));
    EXPECT_EQ(p.chosen.source, "registered");
    EXPECT_EQ(p.chosen.how, mover::device_dma);
    ASSERT_FALSE(p.reasons.empty());
    EXPECT_EQ(p.reasons.back().code, reason_code::registered);

    plan_result changed = plan_route(device_read(false, "it was modified since it was registered"));
    EXPECT_NE(changed.chosen.source, "registered");
    EXPECT_TRUE(mentions(changed.texts(), "modified since it was registered"));
    EXPECT_TRUE(std::any_of(changed.reasons.begin(), changed.reasons.end(), [](const reason& r) {
        return r.code == reason_code::registered && r.cause == reason_code::registration_changed;
    }));

    plan_result none = plan_route(device_read(false));
    for (const auto& r : none.reasons) EXPECT_NE(r.code, reason_code::registered) << r.text;

    plan_facts gds_on = device_read(true);
    gds_on.gds = ferry::gds_mode::on;  // cuFile only: the registration is not a way around it
    EXPECT_NE(plan_route(gds_on).chosen.source, "registered");
    plan_facts host = device_read(true);
    host.memory = ferry::memory_kind::host;
    EXPECT_EQ(plan_route(host).chosen.how, mover::host);
    plan_facts write = device_read(true);
    write.dir = ferry::direction::write;
    EXPECT_NE(plan_route(write).chosen.source, "registered");
}

// With a GPU the registration holds the file's bytes until closed; without one it is refused
// with the reason and the path.
TEST(registered_file, registering_holds_the_bytes_or_says_why_not_naming_the_file) {
    ferry::test::temp_dir dir;
    std::string path = dir / "w.bin";
    ferry::test::write_pattern_file(path, 1 << 20);
    const std::uint64_t held = ferry::registered_bytes();
    if (ferry::cuda_device_count() > 0) {
        ferry::registered_file r(path);
        EXPECT_EQ(ferry::registered_bytes(), held + (1u << 20));
        EXPECT_EQ(r.path(), path);
    } else {
        try {
            ferry::registered_file r(path);
            ADD_FAILURE() << "registered without a GPU";
        } catch (const ferry::cuda_error& e) {
            EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
        }
    }
    EXPECT_EQ(ferry::registered_bytes(), held);
}

TEST(registered_file, reads_into_the_gpu_take_the_registration_and_are_exact) {
    FERRY_REQUIRE_GPU();
    ferry::test::temp_dir dir;
    std::string path = dir / "w.bin";
    const std::size_t n = (64u << 20) + 12345;
    ferry::test::write_pattern_file(path, n);
    const std::uint64_t before_bytes = ferry::registered_bytes();
    ferry::registered_file reg(path);
    EXPECT_EQ(reg.size(), n);
    EXPECT_EQ(ferry::registered_bytes(), before_bytes + n);
    EXPECT_GT(reg.seconds(), 0.0);

    ferry::file f(path);
    EXPECT_TRUE(mentions(f.plan().reasons, "ferry::registered_file"));
    ferry::device_buffer d(n);
    // The whole file, and an odd piece in the middle.
    EXPECT_EQ(f.read(d.data(), n, 0), n);
    std::vector<std::uint8_t> back(n);
    ferry::copy_memory(back.data(), d.data(), n);
    EXPECT_TRUE(back == pattern(n, 0)) << "whole file";
    EXPECT_EQ(f.read(d.data(), 777777, 4097), 777777u);
    std::vector<std::uint8_t> part(777777);
    ferry::copy_memory(part.data(), d.data(), part.size());
    EXPECT_TRUE(part == pattern(part.size(), 4097)) << "a piece at an odd offset";
    ferry::io_stats st = f.stats();
    const ferry::route_stats* r = st.route("registered", "device-dma");
    ASSERT_NE(r, nullptr);
    EXPECT_EQ(r->read.bytes, n + 777777);
    EXPECT_EQ(st.route("posix", "staged"), nullptr);
    // Past the end: the usual error, nothing read.
    EXPECT_THROW(f.read(d.data(), 100, n - 50), ferry::end_of_file_error);
    // Into host memory the registration changes nothing.
    std::vector<std::uint8_t> host(4096);
    f.read(host.data(), host.size(), 0);
    EXPECT_NE(f.stats().route("posix", "host"), nullptr);
    f.close();
    reg.close();
    EXPECT_EQ(ferry::registered_bytes(), before_bytes) << "closed: the pages are unpinned";
}

TEST(registered_file, a_file_changed_since_takes_its_usual_route_and_the_plan_says_why) {
    FERRY_REQUIRE_GPU();
    ferry::test::temp_dir dir;
    std::string path = dir / "w.bin";
    const std::size_t n = 8u << 20;
    ferry::test::write_pattern_file(path, n);
    ferry::registered_file reg(path);
    {
        std::ofstream out(path, std::ios::binary | std::ios::in | std::ios::out);
        out.seekp(100);
        out.put('\x5a');
    }
    struct timespec times[2] = {{0, UTIME_OMIT}, {12345, 0}};  // a modification time that surely differs
    ASSERT_EQ(::utimensat(AT_FDCWD, path.c_str(), times, 0), 0);
    ferry::file f(path);
    EXPECT_TRUE(mentions(f.plan().reasons, "modified since it was registered"));
    ferry::device_buffer d(n);
    f.read(d.data(), n, 0);
    std::vector<std::uint8_t> back(n), want = pattern(n, 0);
    want[100] = 0x5a;
    ferry::copy_memory(back.data(), d.data(), n);
    EXPECT_TRUE(back == want) << "the bytes of the file now";
    EXPECT_EQ(f.stats().route("registered", "device-dma"), nullptr);

    // Appended to: the size differs.
    { std::ofstream(path, std::ios::binary | std::ios::app).put('x'); }
    ferry::file g(path);
    EXPECT_TRUE(mentions(g.plan().reasons, "size changed since it was registered"));
}

TEST(registered_file, the_limit_and_bad_files_are_refused_with_the_path) {
    FERRY_REQUIRE_GPU();
    ferry::test::temp_dir dir;
    std::string path = dir / "w.bin";
    ferry::test::write_pattern_file(path, 4u << 20);
    const std::uint64_t held = ferry::registered_bytes();
    ferry::set_registration_limit(held + (1u << 20));
    try {
        ferry::registered_file r(path);
        FAIL() << "registered past the limit";
    } catch (const ferry::usage_error& e) {
        EXPECT_NE(std::string(e.what()).find("registration limit"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    }
    ferry::set_registration_limit(0);
    EXPECT_GT(ferry::registration_limit(), 1u << 30) << "the default: half the machine's memory";
    EXPECT_EQ(ferry::registered_bytes(), held) << "a refused registration holds nothing";

    std::string empty = dir / "empty.bin";
    { std::ofstream(empty, std::ios::binary); }
    EXPECT_THROW(ferry::registered_file{empty}, ferry::usage_error);
    EXPECT_THROW(ferry::registered_file{dir.path()}, ferry::usage_error) << "a directory";
    EXPECT_THROW(ferry::registered_file{dir / "missing.bin"}, ferry::system_error);
    EXPECT_EQ(ferry::registered_bytes(), held);
}

TEST(registered_file, a_second_registration_of_the_same_file_shares_the_first) {
    FERRY_REQUIRE_GPU();
    ferry::test::temp_dir dir;
    std::string path = dir / "w.bin";
    ferry::test::write_pattern_file(path, 4u << 20);
    const std::uint64_t held = ferry::registered_bytes();
    ferry::registered_file a(path);
    ferry::registered_file b(path);
    EXPECT_EQ(ferry::registered_bytes(), held + (4u << 20));
    a.close();
    {
        ferry::file f(path);
        EXPECT_TRUE(mentions(f.plan().reasons, "ferry::registered_file")) << "b still holds it";
    }
    b.close();
    EXPECT_EQ(ferry::registered_bytes(), held);
    ferry::file f(path);
    EXPECT_FALSE(mentions(f.plan().reasons, "ferry::registered_file")) << "given up: the usual route";
}

}  // namespace
