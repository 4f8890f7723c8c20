// ferry::file on host memory: errors, retries of short and interrupted transfers (through the
// fault-injection seam), counters, modes.
#include <sys/wait.h>

#include <cerrno>
#include <cstdlib>
#include <thread>

#include "ferry/ferry.hpp"
#include "os/sys.hpp"
#include "test_util.hpp"

namespace {

// Installs a fault hook for the scope of a test.
struct fault_scope {
    explicit fault_scope(ferry::sys::fault_hook h) { ferry::sys::hook = h; }
    ~fault_scope() { ferry::sys::hook = nullptr; }
};

std::atomic<int> calls{0};

ferry::settings small_settings() {
    ferry::settings s;
    s.threads = 4;
    s.task_size = 1 << 20;
    return s;
}

TEST(file, missing_file_is_a_system_error_with_errno_and_path) {
    try {
        ferry::file f("/nonexistent/dir/x.bin");
        FAIL() << "opened";
    } catch (const ferry::system_error& e) {
        EXPECT_EQ(e.code(), ENOENT);
        EXPECT_EQ(e.where().path, "/nonexistent/dir/x.bin");
        EXPECT_NE(std::string(e.what()).find("/nonexistent/dir/x.bin"), std::string::npos);
    }
}

TEST(file, directories_and_fifos_are_refused_without_hanging) {
    ferry::test::temp_dir d;
    EXPECT_THROW(ferry::file f(d.path()), ferry::system_error);
    std::string fifo = d / "fifo";
    ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
    try {
        ferry::file f(fifo);
        ADD_FAILURE() << "a FIFO was opened";
    } catch (const ferry::system_error& e) {
        // The message says what the path is, not only "Invalid argument".
        EXPECT_NE(std::string(e.what()).find("cannot use a FIFO"), std::string::npos) << e.what();
        EXPECT_EQ(e.code(), ESPIPE);
    }
}

TEST(file, modes_are_enforced) {
    ferry::test::temp_dir d;
    ferry::test::write_pattern_file(d / "a", 100);
    char buf[10];
    ferry::file r(d / "a");
    EXPECT_THROW(r.write(buf, 10, 0), ferry::usage_error);
    ferry::file w(d / "b", ferry::open_mode::write);
    EXPECT_THROW(w.read(buf, 1, 0), ferry::usage_error);
    r.close();
    EXPECT_THROW(r.size(), ferry::usage_error);
}

TEST(file, interrupted_and_short_reads_are_retried) {
    ferry::test::temp_dir d;
    const std::size_t n = (3u << 20) + 17;
    ferry::test::write_pattern_file(d / "a", n);
    ferry::file f(d / "a", ferry::open_mode::read, small_settings());
    calls = 0;
    fault_scope scope([](const char* call, std::size_t* len) -> int {
        if (std::string_view(call) != "pread") return 0;
        int k = ++calls;
        if (k % 3 == 0) {
            errno = EINTR;
            return -1;
        }
        if (k % 3 == 1) {
            errno = EAGAIN;
            return -1;
        }
        if (len && *len > 1000) *len = 1000;  // short transfers
        return 0;
    });
    std::vector<std::uint8_t> back(n);
    EXPECT_EQ(f.read(back.data(), n, 0), n);
    EXPECT_EQ(back, ferry::test::pattern(n));
    EXPECT_GT(calls.load(), 3000);
}

TEST(file, interrupted_and_short_writes_are_retried) {
    ferry::test::temp_dir d;
    const std::size_t n = (2u << 20) + 5;
    auto data = ferry::test::pattern(n, 0, 3);
    {
        ferry::file f(d / "w", ferry::open_mode::write, small_settings());
        calls = 0;
        fault_scope scope([](const char* call, std::size_t* len) -> int {
            if (std::string_view(call) != "pwrite") return 0;
            if (++calls % 2 == 0) {
                errno = EINTR;
                return -1;
            }
            if (len && *len > 4096) *len = 4096;
            return 0;
        });
        EXPECT_EQ(f.write(data.data(), n, 0), n);
    }
    EXPECT_EQ(ferry::test::read_whole(d / "w"), data);
}

TEST(file, a_persistent_error_reaches_the_caller_typed) {
    ferry::test::temp_dir d;
    ferry::test::write_pattern_file(d / "a", 4u << 20);
    ferry::file f(d / "a", ferry::open_mode::read, small_settings());
    std::vector<std::uint8_t> back(4u << 20);
    for (int err : {EIO, EINVAL}) {
        static std::atomic<int> code;
        code = err;
        calls = 0;
        fault_scope scope([](const char* call, std::size_t*) -> int {
            if (std::string_view(call) != "pread" || ++calls < 3) return 0;
            errno = code;
            return -1;
        });
        try {
            f.read(back.data(), back.size(), 0);
            ADD_FAILURE() << "no error";
        } catch (const ferry::system_error& e) {
            EXPECT_EQ(e.code(), err);
            EXPECT_EQ(e.where().path, d / "a");
            EXPECT_GT(e.where().length, 0u);
        }
    }
    // Afterwards the file works again and the workers are idle.
    EXPECT_EQ(f.read(back.data(), back.size(), 0), back.size());
}

TEST(file, write_errors_name_the_range) {
    ferry::test::temp_dir d;
    ferry::file f(d / "w", ferry::open_mode::write, small_settings());
    std::vector<std::uint8_t> data(3u << 20, 1);
    fault_scope scope([](const char* call, std::size_t*) -> int {
        if (std::string_view(call) != "pwrite") return 0;
        errno = ENOSPC;
        return -1;
    });
    try {
        f.write(data.data(), data.size(), 4096);
        FAIL();
    } catch (const ferry::system_error& e) {
        EXPECT_EQ(e.code(), ENOSPC);
        EXPECT_GE(e.where().offset, 4096u);
    }
}

TEST(file, counters_tell_the_path_per_file_and_process) {
    ferry::test::temp_dir d;
    ferry::test::write_pattern_file(d / "a", 5u << 20);
    ferry::io_stats before = ferry::process_stats();
    ferry::file f(d / "a", ferry::open_mode::read, small_settings());
    std::vector<std::uint8_t> back(5u << 20);
    f.read(back.data(), back.size(), 0);
    ferry::io_stats s = f.stats();
    EXPECT_EQ(s.reads(ferry::io_path::host).bytes, 5u << 20);
    EXPECT_EQ(s.reads(ferry::io_path::host).requests, 1u);
    EXPECT_EQ(s.bytes_read(), 5u << 20);
    ferry::io_stats delta = ferry::process_stats() - before;
    EXPECT_GE(delta.reads(ferry::io_path::host).bytes, 5u << 20);
    EXPECT_EQ(ferry::to_string(ferry::io_path::cufile_compat), "cufile-compat");
}

TEST(file, the_plan_explains_itself) {
    ferry::test::temp_dir d;
    ferry::test::write_pattern_file(d / "a", 1u << 20);
    ferry::settings s = small_settings();
    s.gds = ferry::gds_mode::off;
    ferry::file f(d / "a", ferry::open_mode::read, s);
    ferry::path_plan p = f.plan();
    EXPECT_FALSE(p.reasons.empty());
    if (ferry::cuda_device_count() == 0) EXPECT_EQ(p.path, ferry::io_path::host);
    else EXPECT_EQ(p.path, ferry::io_path::staged);
    // Each reason has its stable code beside it.
    ASSERT_EQ(p.codes.size(), p.reasons.size());
    if (ferry::cuda_device_count() == 0) EXPECT_EQ(ferry::to_string(p.codes[0].code), "host_memory");
    else EXPECT_EQ(ferry::to_string(p.codes[0].code), "gds_off");
}

TEST(file, an_unusable_alternative_names_its_cause_in_the_plan) {
    ferry::test::temp_dir d;
    ferry::test::write_pattern_file(d / "a", 1u << 20);
    ferry::settings s = small_settings();
    s.direct_io = ferry::direct_io_mode::on;
    // Open for writing only: O_DIRECT reads cannot be had, and the plan says so by its code.
    ferry::file f(d / "a", ferry::open_mode::append_write, s);
    ferry::path_plan p = f.plan();
    ASSERT_EQ(p.codes.size(), p.reasons.size());
    bool found = false;
    for (std::size_t i = 0; i < p.codes.size(); ++i)
        if (p.codes[i].code == ferry::reason_code::direct_unusable) {
            found = true;
            EXPECT_EQ(ferry::to_string(p.codes[i].cause), "opened_write_only") << p.reasons[i];
        }
    EXPECT_TRUE(found) << ::testing::PrintToString(p.reasons);
}

TEST(file, gds_on_without_cufile_is_an_error_not_a_silent_fallback) {
    FERRY_REQUIRE_GPU();
    ferry::test::temp_dir d;
    ferry::test::write_pattern_file(d / "a", 4u << 20);
    // A fresh process, since the cuFile library is loaded once per process.
    std::string cmd = "FERRY_GDS=on FERRY_CUFILE_LIBRARY=/nonexistent/libcufile.so.0 " + std::string(FERRY_CLI) +
                      " load --device cuda:0 " + (d / "a") + " 2>" + (d / "err");
    int rc = std::system(cmd.c_str());
    EXPECT_EQ(WEXITSTATUS(rc), 1);
    auto err = ferry::test::read_whole(d / "err");
    std::string text(err.begin(), err.end());
    EXPECT_NE(text.find("FERRY_GDS=on"), std::string::npos) << text;
}

TEST(file, destroying_a_file_with_requests_in_flight_waits_for_them) {
    ferry::test::temp_dir d;
    ferry::test::write_pattern_file(d / "a", 16u << 20);
    std::vector<std::uint8_t> back(16u << 20);
    std::future<std::size_t> fu;
    {
        ferry::file f(d / "a", ferry::open_mode::read, small_settings());
        fu = f.read_async(back.data(), back.size(), 0);
    }
    EXPECT_EQ(fu.get(), back.size());
    EXPECT_EQ(back, ferry::test::pattern(16u << 20));
}

TEST(file, direct_io_falls_back_when_the_file_system_refuses_it) {
    ferry::test::temp_dir d;
    ferry::test::write_pattern_file(d / "a", 3u << 20);
    ferry::settings s = small_settings();
    s.direct_io = ferry::direct_io_mode::on;
    ferry::file f(d / "a", ferry::open_mode::read, s);
    // Some file systems accept O_DIRECT at open and refuse it at read time (EINVAL): the
    // first read (an O_DIRECT one) fails so.
    calls = 0;
    fault_scope scope([](const char* call, std::size_t*) -> int {
        if (std::string_view(call) != "pread" || ++calls != 1) return 0;
        errno = EINVAL;
        return -1;
    });
    std::vector<std::uint8_t> back(3u << 20);
    f.read(back.data(), back.size(), 0);
    EXPECT_EQ(back, ferry::test::pattern(3u << 20));
    ferry::io_stats st = f.stats();
    bool counted = false;
    for (const auto& [reason, n] : st.fallbacks) counted |= reason.find("O_DIRECT") != std::string::npos;
    EXPECT_TRUE(counted);
    EXPECT_GT(st.reads(ferry::io_path::host).bytes, 0u);
    // Later reads stay buffered.
    f.read(back.data(), back.size(), 0);
    EXPECT_EQ(f.stats().reads(ferry::io_path::host).bytes - st.reads(ferry::io_path::host).bytes, 3u << 20);
}

}  // namespace
