// The posix source's descriptor per worker: small reads on the engine's workers go through each
// worker's own descriptor of the file, which is the same inode as the shared one whatever
// happened to the path, which never costs the process more than its cap of descriptors, and
// without which (refused, EMFILE, the cap reached) reads stay correct on the shared one.
#include <dirent.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string_view>
#include <vector>

#include "io/scheduler.hpp"
#include "os/fault_hook.hpp"
#include "os/reopen.hpp"
#include "test_util.hpp"

namespace ferry::detail {
namespace {

constexpr std::uint64_t row = 4 << 10;    // each pread
constexpr std::uint64_t pitch = 8 << 10;  // a gap between rows, so that no two are one read
constexpr std::uint64_t file_bytes = 16 << 20;

settings eight_workers() {
    settings s;
    s.threads = 8;
    return s;
}

std::size_t open_descriptors() {
    std::size_t n = 0;
    DIR* d = ::opendir("/proc/self/fd");
    if (!d) return 0;
    while (dirent* e = ::readdir(d))
        if (e->d_name[0] != '.') ++n;
    ::closedir(d);
    return n;
}

// Every row of every file, 16 rows a gather so that the gathers spread over all the workers.
// Checks each row against the pattern of `seed` + the file's place.
void read_rows_and_check(const std::vector<std::shared_ptr<file_impl>>& files, std::uint32_t seed,
                         std::uint64_t width = row, std::uint64_t step = pitch) {
    const std::uint64_t rows_per_file = file_bytes / step;
    const std::uint64_t rows_per_gather = 16;
    std::vector<std::vector<std::uint8_t>> out(files.size(), std::vector<std::uint8_t>(rows_per_file * width));
    std::vector<gather> batch;
    for (std::size_t f = 0; f < files.size(); ++f)
        for (std::uint64_t r = 0; r < rows_per_file; r += rows_per_gather) {
            gather g;
            g.file = files[f];
            g.offset = r * step;
            g.rows = rows_per_gather;
            g.pitch = step;
            g.width = width;
            g.memory = out[f].data() + r * width;
            batch.push_back(g);
        }
    ASSERT_EQ(submit_gathers(batch).get(), files.size() * rows_per_file * width);
    for (std::size_t f = 0; f < files.size(); ++f)
        for (std::uint64_t r = 0; r < rows_per_file; ++r) {
            auto want = test::pattern(width, r * step, seed + static_cast<std::uint32_t>(f));
            ASSERT_EQ(0, std::memcmp(out[f].data() + r * width, want.data(), width)) << "file " << f << " row " << r;
        }
}

// Lowers RLIMIT_NOFILE's soft limit for the scope of a test; restores it after.
class soft_limit {
public:
    explicit soft_limit(rlim_t soft) {
        ::getrlimit(RLIMIT_NOFILE, &saved_);
        rlimit r = saved_;
        r.rlim_cur = soft;
        ok_ = soft <= saved_.rlim_max && ::setrlimit(RLIMIT_NOFILE, &r) == 0;
    }
    ~soft_limit() { ::setrlimit(RLIMIT_NOFILE, &saved_); }
    bool ok() const { return ok_; }

private:
    rlimit saved_{};
    bool ok_ = false;
};

// Counts the seam's open() calls, letting each run.
std::atomic<int> opens{0};
int count_opens(const char* call, std::size_t*) {
    if (std::string_view(call) == "open") ++opens;
    return 0;
}
struct open_counter {
    open_counter() {
        opens = 0;
        sys::hook = &count_opens;
    }
    ~open_counter() { sys::hook = nullptr; }
};

// Fails every open() of the seam with EMFILE, counting them.
int refuse_opens(const char* call, std::size_t*) {
    if (std::string_view(call) != "open") return 0;
    ++opens;
    errno = EMFILE;
    return -1;
}

// The sanitizers' runtimes need descriptors of their own for some checks (UBSan's vptr check
// probes memory through a pipe), so a process at its descriptor limit fails them falsely.
#if defined(__SANITIZE_ADDRESS__)
#define FERRY_TEST_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FERRY_TEST_SANITIZED 1
#endif
#endif

// How many descriptors below `limit` the process holds.
rlim_t descriptors_below(int limit) {
    rlim_t n = 0;
    DIR* d = ::opendir("/proc/self/fd");
    if (!d) return 0;
    while (dirent* e = ::readdir(d))
        if (e->d_name[0] != '.' && std::atoi(e->d_name) < limit && std::atoi(e->d_name) != ::dirfd(d)) ++n;
    ::closedir(d);
    return n;
}

// The lowest descriptor number free now: where the next open() lands.
int lowest_free_descriptor() {
    int fd = ::dup(0);
    ::close(fd);
    return fd;
}

// Reads rows of a file of its own once, so that what the engine and CUDA open on first use (the
// driver's device nodes and events, on a machine with a GPU) is open before a test counts.
void warm_engine(const test::temp_dir& dir) {
    std::string path = dir / "warm.bin";
    test::write_pattern_file(path, file_bytes, 1);
    auto f = std::make_shared<file_impl>(path, open_mode::read, eight_workers());
    read_rows_and_check({f}, 1);
    f->close();
}

TEST(posix_worker_fd, small_reads_from_many_workers_are_exact_and_the_descriptors_go_with_close) {
    test::temp_dir dir;
    std::string path = dir / "rows.bin";
    test::write_pattern_file(path, file_bytes, 3);
    warm_engine(dir);
    ASSERT_EQ(reopened_descriptors(), 0u);
    const std::size_t before = open_descriptors();
    auto f = std::make_shared<file_impl>(path, open_mode::read, eight_workers());
    read_rows_and_check({f}, 3);
    // The shared descriptor and at least one worker's own, at most one per worker.
    EXPECT_GT(open_descriptors(), before + 1);
    EXPECT_GE(reopened_descriptors(), 1u);
    EXPECT_LE(reopened_descriptors(), 8u);
    read_rows_and_check({f}, 3);  // again, every worker on the descriptor it has
    f->close();
    EXPECT_EQ(reopened_descriptors(), 0u);
    EXPECT_EQ(open_descriptors(), before);
}

TEST(posix_worker_fd, large_reads_and_threads_that_are_not_workers_share_the_descriptor) {
    test::temp_dir dir;
    std::string path = dir / "rows.bin";
    test::write_pattern_file(path, file_bytes, 4);
    auto f = std::make_shared<file_impl>(path, open_mode::read, eight_workers());
    read_rows_and_check({f}, 4, 128 << 10, 256 << 10);
    EXPECT_EQ(reopened_descriptors(), 0u) << "reads of 128 KiB";
    std::vector<std::uint8_t> small(row);
    for (std::uint64_t off = 0; off < file_bytes; off += 1 << 20) {
        f->read_now(reinterpret_cast<char*>(small.data()), small.size(), off);
        ASSERT_EQ(small, test::pattern(row, off, 4));
    }
    EXPECT_EQ(reopened_descriptors(), 0u) << "small reads on the test's own thread";
}

TEST(posix_worker_fd, reads_return_the_original_bytes_after_a_rename_over_the_path_or_an_unlink) {
    test::temp_dir dir;
    std::string path = dir / "rows.bin";
    std::string other = dir / "other.bin";
    std::string gone = dir / "gone.bin";
    test::write_pattern_file(path, file_bytes, 5);
    test::write_pattern_file(gone, file_bytes, 6);
    auto renamed = std::make_shared<file_impl>(path, open_mode::read, eight_workers());
    auto unlinked = std::make_shared<file_impl>(gone, open_mode::read, eight_workers());
    // Before any worker opened its own descriptor: the reopens come after.
    test::write_pattern_file(other, file_bytes, 9);
    ASSERT_EQ(std::rename(other.c_str(), path.c_str()), 0);
    ASSERT_EQ(::unlink(gone.c_str()), 0);
    read_rows_and_check({renamed, unlinked}, 5);
    EXPECT_GE(reopened_descriptors(), 2u) << "the workers read through descriptors of their own";
    renamed->close();
    unlinked->close();
    EXPECT_EQ(reopened_descriptors(), 0u);
}

TEST(posix_worker_fd, reads_stay_exact_on_the_shared_descriptor_when_reopens_fail_with_emfile) {
#ifdef FERRY_TEST_SANITIZED
    GTEST_SKIP() << "the sanitizer runtime needs descriptors of its own at the limit (its pipe-based "
                    "checks fail falsely); the injected EMFILE test below runs here";
#endif
    test::temp_dir dir;
    std::string path = dir / "rows.bin";
    test::write_pattern_file(path, file_bytes, 7);
    // Descriptors held open so that the limit below leaves a cap of several, which is then not
    // what refuses: the limit itself (EMFILE) is.
    std::vector<int> padding;
    for (int i = 0; i < 24; ++i) padding.push_back(::dup(0));
    auto f = std::make_shared<file_impl>(path, open_mode::read, eight_workers());
    {
        soft_limit no_more(static_cast<rlim_t>(lowest_free_descriptor()));
        if (!no_more.ok()) GTEST_SKIP() << "cannot lower RLIMIT_NOFILE";
        ASSERT_GT(reopened_descriptor_cap(), 1u);
        open_counter counter;
        read_rows_and_check({f}, 7);
        EXPECT_GT(opens.load(), 0) << "the workers tried to open descriptors of their own";
        EXPECT_EQ(reopened_descriptors(), 0u);
    }
    // The limit back: the refused workers stay on the shared descriptor, any other may open its
    // own; the bytes are the same either way.
    read_rows_and_check({f}, 7);
    f->close();
    EXPECT_EQ(reopened_descriptors(), 0u);
    for (int fd : padding) ::close(fd);
}

TEST(posix_worker_fd, reads_stay_exact_on_the_shared_descriptor_when_every_reopen_is_refused) {
    test::temp_dir dir;
    std::string path = dir / "rows.bin";
    test::write_pattern_file(path, file_bytes, 9);
    warm_engine(dir);
    auto f = std::make_shared<file_impl>(path, open_mode::read, eight_workers());
    const std::size_t before = open_descriptors();
    opens = 0;
    sys::hook = &refuse_opens;
    read_rows_and_check({f}, 9);
    sys::hook = nullptr;
    EXPECT_GT(opens.load(), 0) << "the workers tried to open descriptors of their own";
    EXPECT_EQ(reopened_descriptors(), 0u);
    EXPECT_EQ(open_descriptors(), before) << "a refused reopen holds nothing";
    // Opens allowed again: the refused workers stay on the shared descriptor, any other may
    // open its own; the bytes are the same either way.
    read_rows_and_check({f}, 9);
    f->close();
    EXPECT_EQ(reopened_descriptors(), 0u);
}

TEST(posix_worker_fd, the_extra_descriptors_never_exceed_a_quarter_of_the_soft_limit) {
    test::temp_dir dir;
    std::vector<std::string> paths;
    for (int i = 0; i < 12; ++i) {
        paths.push_back(dir / ("shard" + std::to_string(i) + ".bin"));
        test::write_pattern_file(paths.back(), file_bytes, static_cast<std::uint32_t>(20 + i));
    }
    // The lowest limit (a multiple of 4, from 64) that leaves room below it for the 12 files,
    // the cap and some slack, whatever descriptors the process holds already.
    rlim_t limit = 64;
    while (limit - descriptors_below(static_cast<int>(limit)) < 12 + limit / 4 + 8) limit += 4;
    if (limit / 4 >= 12 * 8) GTEST_SKIP() << "the process holds too many descriptors for this test";
    soft_limit low(limit);
    if (!low.ok()) GTEST_SKIP() << "cannot lower RLIMIT_NOFILE to " << limit;
    const std::size_t cap = static_cast<std::size_t>(limit / 4);
    ASSERT_EQ(reopened_descriptor_cap(), cap);
    std::vector<std::shared_ptr<file_impl>> files;
    for (const auto& p : paths) files.push_back(std::make_shared<file_impl>(p, open_mode::read, eight_workers()));
    const std::size_t opened = open_descriptors();
    // 12 files by 8 workers could take 96 descriptors.
    read_rows_and_check(files, 20);
    EXPECT_EQ(reopened_descriptors(), cap);
    EXPECT_LE(open_descriptors() - opened, cap);
    // The user's own open still succeeds.
    int mine = ::open(paths[0].c_str(), O_RDONLY | O_CLOEXEC);
    EXPECT_GE(mine, 0) << std::strerror(errno);
    if (mine >= 0) ::close(mine);
    for (auto& f : files) f->close();
    EXPECT_EQ(reopened_descriptors(), 0u);
}

}  // namespace
}  // namespace ferry::detail
