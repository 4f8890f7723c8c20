// fork() while ferry has I/O in flight: the child either reads correctly on host paths or
// gets a clear ferry::error, and never hangs (the parent kills it after a deadline). The
// parent's own request must complete as if nothing happened.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ferry/ferry.hpp"
#include "reliability_util.hpp"
#include "test_util.hpp"

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

}  // namespace
}  // namespace ferry::test
