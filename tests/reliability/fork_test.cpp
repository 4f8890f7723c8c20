// fork() while ferry has I/O in flight: the child either reads correctly on host paths or
// gets a clear ferry::error, and never hangs (the parent kills it after a deadline). The
// parent's own request must complete as if nothing happened.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>

#include "ferry/ferry.hpp"
#include "os/once_per_process.hpp"
#include "reliability_util.hpp"
#include "test_util.hpp"

// AddressSanitizer's allocator (gcc 12's libasan) takes no lock around fork(): a child forked
// while another thread is inside malloc can hang in the sanitizer runtime itself.
#if defined(__SANITIZE_ADDRESS__)
#define FERRY_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FERRY_TEST_ASAN 1
#endif
#endif

// Every test here forks while ferry's worker threads run, and so may fork while one of them
// allocates: under AddressSanitizer the child can then hang in the sanitizer's allocator, not
// in ferry (a CI run saw it once in the first test). They run in the normal build.
#ifdef FERRY_TEST_ASAN
#define FERRY_SKIP_UNDER_ASAN()                                                                  \
    GTEST_SKIP() << "under AddressSanitizer a child forked while another thread allocates can hang " \
                    "in the sanitizer's own allocator lock; this test runs in the normal build"
#else
#define FERRY_SKIP_UNDER_ASAN() (void)0
#endif

namespace ferry::test {
namespace {

using namespace std::chrono_literals;

// Exit statuses of the child.
constexpr int child_read_ok = 0;
constexpr int child_clear_error = 2;
constexpr int child_wrong = 3;

// Waits for `pid` at most `limit`; kills it and reports a hang after that.
int wait_or_kill(pid_t pid, std::chrono::milliseconds limit, bool& hung) {
    auto end = std::chrono::steady_clock::now() + limit;
    int status = 0;
    while (std::chrono::steady_clock::now() < end) {
        if (::waitpid(pid, &status, WNOHANG) == pid) return status;
        std::this_thread::sleep_for(5ms);
    }
    hung = true;
    ::kill(pid, SIGKILL);
    ::waitpid(pid, &status, 0);
    return status;
}

// In the child: a read large enough to go through the worker threads.
[[noreturn]] void child_reads(const std::string& path, std::size_t n) {
    try {
        file f(path);
        std::vector<std::uint8_t> back(n);
        f.read(back.data(), n, 0);
        ::_exit(back == pattern(n) ? child_read_ok : child_wrong);
    } catch (const ferry::error&) {
        ::_exit(child_clear_error);
    } catch (...) {
        ::_exit(child_wrong);
    }
}

// The child's read is large enough to need the worker threads, which a forked child does not
// inherit: the engine must notice and start its own (it once waited forever on a queue nobody
// served).
TEST(fork_during_io, child_reads_or_fails_clearly_and_never_hangs) {
    FERRY_SKIP_UNDER_ASAN();
    temp_dir dir;
    const std::size_t n = 8u << 20;
    write_pattern_file(dir / "a", n);
    int ok = 0, clear = 0;
    for (int round = 0; round < 10; ++round) {
        file f(dir / "a");
        std::vector<std::uint8_t> back(n);
        auto pending = f.read_async(back.data(), n, 0);  // in flight across the fork
        pid_t pid = ::fork();
        ASSERT_GE(pid, 0);
        if (pid == 0) child_reads(dir / "a", n);
        bool hung = false;
        int status = wait_or_kill(pid, 20s, hung);
        ASSERT_FALSE(hung) << "round " << round << ": the forked child hung in a read";
        ASSERT_TRUE(WIFEXITED(status)) << "round " << round << ": child died, status " << status;
        int code = WEXITSTATUS(status);
        ASSERT_NE(code, child_wrong) << "round " << round << ": wrong bytes or an untyped error";
        (code == child_read_ok ? ok : clear)++;
        EXPECT_EQ(pending.get(), n);
        EXPECT_TRUE(back == pattern(n));
    }
    std::printf("[ figures  ] fork during I/O: %d children read, %d got a clear error\n", ok, clear);
}

// A child whose request is small enough to run on the calling thread reads correctly while
// the parent's request is in flight (it once hung when the fork caught a worker creating the
// process-wide counters), and the parent's request completes.
TEST(fork_during_io, child_small_reads_work_and_the_parent_is_unaffected) {
    FERRY_SKIP_UNDER_ASAN();
    temp_dir dir;
    const std::size_t n = 8u << 20;
    write_pattern_file(dir / "a", n);
    for (int round = 0; round < 10; ++round) {
        file f(dir / "a");
        std::vector<std::uint8_t> back(n);
        auto pending = f.read_async(back.data(), n, 0);
        pid_t pid = ::fork();
        ASSERT_GE(pid, 0);
        if (pid == 0) child_reads(dir / "a", 64 << 10);
        bool hung = false;
        int status = wait_or_kill(pid, 20s, hung);
        ASSERT_FALSE(hung) << "round " << round;
        ASSERT_TRUE(WIFEXITED(status)) << "status " << status;
        EXPECT_EQ(WEXITSTATUS(status), child_read_ok);
        within(30s, "parent read after fork", [&] { EXPECT_EQ(pending.get(), n); });
        EXPECT_TRUE(back == pattern(n));
    }
}

// Other threads busy with the library's process-wide locks (the global settings, the engine
// registry, the process counters) while the main thread forks: without the fork handlers
// (os/fork_safe_mutex.hpp) a child whose fork caught one of those locks taken would hang on it
// forever. Every child must read correctly.
TEST(fork_during_io, forks_while_other_threads_hold_process_wide_locks) {
    FERRY_SKIP_UNDER_ASAN();
    temp_dir dir;
    const std::size_t n = 4u << 20;
    write_pattern_file(dir / "a", n);
    std::atomic<bool> stop{false};
    thread_group busy;
    for (int t = 0; t < 3; ++t)
        busy.run([&, t] {
            std::vector<std::uint8_t> buf(64 << 10);
            while (!stop) {
                settings s = settings::global();
                if (t == 0) settings::set_global(s);
                (void)process_stats();
                file f(dir / "a");
                f.read(buf.data(), buf.size(), 0);
            }
        });
    int children = 0;
    for (int round = 0; round < 100; ++round) {
        pid_t pid = ::fork();
        ASSERT_GE(pid, 0);
        if (pid == 0) {
            (void)settings::global();
            (void)process_stats();
            child_reads(dir / "a", n);
        }
        bool hung = false;
        int status = wait_or_kill(pid, 20s, hung);
        EXPECT_FALSE(hung) << "round " << round << ": a child hung on a lock taken at fork time";
        if (hung) break;
        ASSERT_TRUE(WIFEXITED(status)) << "status " << status;
        EXPECT_EQ(WEXITSTATUS(status), child_read_ok) << "round " << round;
        ++children;
    }
    stop = true;
    EXPECT_NO_THROW(busy.join());
    std::printf("[ figures  ] %d forks while other threads held the library's locks: 0 hangs\n", children);
}

// The probes the library runs once per process (loading cuFile, asking the kernel about
// io_uring, starting the CUDA runtime) take a while. A fork while another thread is inside one
// must not leave the child waiting for that thread, which the child does not have: the child
// gets the fallback at once, and the parent's probe finishes as if nothing happened. (A CI run
// once saw a child hang on such a probe held in a function-local static.)
TEST(fork_during_io, a_child_forked_mid_probe_gets_the_fallback_and_does_not_wait) {
    FERRY_SKIP_UNDER_ASAN();
    detail::once_per_process<int> once;
    std::atomic<bool> inside{false}, release{false};
    std::thread prober([&] {
        EXPECT_EQ(once.get(
                      [&] {
                          inside = true;
                          for (int i = 0; i < 20000 && !release; ++i) std::this_thread::sleep_for(1ms);
                          return 7;
                      },
                      -1),
                  7);
    });
    for (int i = 0; i < 20000 && !inside; ++i) std::this_thread::sleep_for(1ms);
    ASSERT_TRUE(inside.load());
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) ::_exit(once.get([] { return 8; }, -1) == -1 ? child_read_ok : child_wrong);
    bool hung = false;
    int status = wait_or_kill(pid, 20s, hung);
    release = true;
    prober.join();
    ASSERT_FALSE(hung) << "the child waited for a probe running in a thread it does not have";
    ASSERT_TRUE(WIFEXITED(status)) << "status " << status;
    EXPECT_EQ(WEXITSTATUS(status), child_read_ok) << "the child did not get the fallback";
    EXPECT_EQ(once.get([] { return 9; }, -1), 7) << "the parent's probe must stand";
}

// A probe that throws leaves nothing behind: the next call probes again.
TEST(fork_during_io, a_probe_that_throws_is_run_again) {
    detail::once_per_process<int> once;
    EXPECT_THROW(once.get([]() -> int { throw std::runtime_error("no"); }, -1), std::runtime_error);
    EXPECT_EQ(once.get([] { return 5; }, -1), 5);
    EXPECT_EQ(once.get([] { return 6; }, -1), 5);
}

// A file opened before fork() belongs to the parent: its requests in flight never finish in
// the child and its engine has no workers there. The child gets a clear error, never a hang,
// and can still close it.
TEST(fork_during_io, a_file_opened_before_fork_is_refused_in_the_child) {
    temp_dir dir;
    const std::size_t n = 8u << 20;
    write_pattern_file(dir / "a", n);
    file f(dir / "a");
    std::vector<std::uint8_t> back(n);
    auto pending = f.read_async(back.data(), n, 0);
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
        int code = child_wrong;
        try {
            std::vector<std::uint8_t> mine(4096);
            f.read(mine.data(), mine.size(), 0);
        } catch (const usage_error& e) {
            if (std::string(e.what()).find("before fork()") != std::string::npos) code = child_clear_error;
        } catch (...) {
        }
        try {
            f.close();
        } catch (...) {
            code = child_wrong;
        }
        ::_exit(code);
    }
    bool hung = false;
    int status = wait_or_kill(pid, 20s, hung);
    ASSERT_FALSE(hung) << "the child hung on the parent's file";
    ASSERT_TRUE(WIFEXITED(status)) << "status " << status;
    EXPECT_EQ(WEXITSTATUS(status), child_clear_error);
    EXPECT_EQ(pending.get(), n);
    EXPECT_TRUE(back == pattern(n));
}

}  // namespace
}  // namespace ferry::test
