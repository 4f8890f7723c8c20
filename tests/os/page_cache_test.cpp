// The planner's page-cache residency probe (os/page_cache.cpp): one mapping, small windows.
#include "os/page_cache.hpp"

#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <unistd.h>

#include "os/fault_hook.hpp"
#include "test_util.hpp"

namespace ferry::detail {
namespace {

struct open_file {
    int fd = -1;
    explicit open_file(const std::string& path) : fd(::open(path.c_str(), O_RDONLY)) {}
    ~open_file() {
        if (fd >= 0) ::close(fd);
    }
};

std::size_t read_range(int fd, std::uint64_t offset, std::size_t n) {
    std::vector<char> buf(1 << 20);
    std::size_t done = 0;
    while (done < n) {
        ssize_t r = ::pread(fd, buf.data(), std::min(buf.size(), n - done), static_cast<off_t>(offset + done));
        if (r <= 0) break;
        done += static_cast<std::size_t>(r);
    }
    return done;
}

TEST(page_cache, residency_follows_what_was_read) {
    test::temp_dir dir;
    const std::string path = dir / "f.bin";
    constexpr std::size_t n = 48u << 20;
    test::write_pattern_file(path, n);
    open_file f(path);
    ASSERT_GE(f.fd, 0);
    ::fdatasync(f.fd);
    ASSERT_EQ(::posix_fadvise(f.fd, 0, 0, POSIX_FADV_DONTNEED), 0);
    double cold = resident_fraction(f.fd, n);
    if (cold > 0.5) GTEST_SKIP() << "this file system keeps evicted pages (" << cold << " resident after DONTNEED)";
    EXPECT_LT(cold, 0.1);
    // The second half into the page cache: readahead, which can run megabytes past a read,
    // stops at the end of the file (and is asked not to run at all).
    ::posix_fadvise(f.fd, 0, 0, POSIX_FADV_RANDOM);
    ASSERT_EQ(read_range(f.fd, n / 2, n / 2), n / 2);
    double half = resident_fraction(f.fd, n);
    EXPECT_GT(half, 0.35);
    EXPECT_LT(half, 0.75);
    ASSERT_EQ(read_range(f.fd, 0, n / 2), n / 2);
    EXPECT_GT(resident_fraction(f.fd, n), 0.9);
    // A file of a few pages, and an empty one.
    const std::string small = dir / "s.bin";
    test::write_pattern_file(small, 10000);
    open_file s(small);
    EXPECT_GT(resident_fraction(s.fd, 10000), 0.9);
    EXPECT_EQ(resident_fraction(s.fd, 0), 1.0);
}

int fail_mapping(const char* call, std::size_t*) {
    if (std::strcmp(call, "mmap") != 0 && std::strcmp(call, "mincore") != 0) return 0;
    errno = ENOMEM;
    return -1;
}

TEST(page_cache, an_unmeasurable_file_says_so) {
    test::temp_dir dir;
    const std::string path = dir / "f.bin";
    test::write_pattern_file(path, 1u << 20);
    open_file f(path);
    sys::hook = fail_mapping;
    double r = resident_fraction(f.fd, 1u << 20);
    sys::hook = nullptr;
    EXPECT_EQ(r, -1.0);
    EXPECT_EQ(resident_fraction(-1, 1u << 20), -1.0) << "a descriptor that cannot be mapped";
}

}  // namespace
}  // namespace ferry::detail
