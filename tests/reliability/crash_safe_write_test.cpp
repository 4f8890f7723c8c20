// Crash-safe saves: a writer process saves a .npy file and a safetensors file over and over,
// alternating two versions, and is killed with SIGKILL at random moments, at least 200 times.
// After every kill each destination must load as one complete version, never a mix or a torn
// file; the test also counts the kills that landed mid-save (a temporary file was left).
//
// The writer is this test binary again (fork + exec of /proc/self/exe): a forked copy of a
// process that already ran ferry I/O would inherit an engine whose worker threads do not exist
// in the child (see fork_test.cpp), and a fresh process is what a crashing program looks like.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <random>

#include "ferry/ferry.hpp"
#include "ferry/npy.hpp"
#include "ferry/safetensors.hpp"
#include "reliability_util.hpp"
#include "test_util.hpp"

namespace ferry::test {
namespace {

constexpr const char* writer_env = "FERRY_TEST_CRASH_WRITER";

array version(int v) {
    array a(dtype::float32, {128, 1024});
    auto bytes = pattern(a.nbytes(), 0, 100 + v);
    std::memcpy(a.data(), bytes.data(), bytes.size());
    return a;
}

std::vector<named_array> tensors(int v) {
    array b(dtype::int64, {4096});
    auto bytes = pattern(b.nbytes(), 0, 200 + v);
    std::memcpy(b.data(), bytes.data(), bytes.size());
    return {{"w", version(v)}, {"b", b}};
}

bool same(const array& a, const array& b) {
    return a.type() == b.type() && a.shape() == b.shape() &&
           std::memcmp(a.data(), b.data(), a.nbytes()) == 0;
}

// Which version (0 or 1) a loaded .npy file is; -1 for neither.
int which_npy(const array& got) {
    for (int v : {0, 1})
        if (same(got, version(v))) return v;
    return -1;
}

int which_safetensors(const std::vector<named_array>& got) {
    for (int v : {0, 1}) {
        auto want = tensors(v);
        if (got.size() != 2) return -1;
        // load_safetensors returns tensors sorted by name: "b", then "w".
        if (got[0].name == "b" && got[1].name == "w" && same(got[0].value, want[1].value) &&
            same(got[1].value, want[0].value))
            return v;
    }
    return -1;
}

// The writer: runs instead of the tests when the binary is started with writer_env set to
// "DIR:FD"; saves alternately until killed, writing one byte to FD after each save.
class writer_environment : public ::testing::Environment {
public:
    void SetUp() override {
        const char* spec = std::getenv(writer_env);
        if (!spec) return;
        std::string s(spec);
        std::string dir = s.substr(0, s.rfind(':'));
        int fd = std::atoi(s.substr(s.rfind(':') + 1).c_str());
        array a[2] = {version(0), version(1)};
        std::vector<named_array> t[2] = {tensors(0), tensors(1)};
        for (unsigned i = 0;; ++i) {
            int v = (i + 1) % 2;  // the parent starts from version 0
            save_npy(dir + "/a.npy", a[v]);
            save_safetensors(dir + "/m.safetensors", t[v]);
            char c = 1;
            if (::write(fd, &c, 1) != 1) std::_Exit(3);
        }
    }
};
const auto* registered = ::testing::AddGlobalTestEnvironment(new writer_environment);

bool is_temporary(const std::string& name) { return name != "a.npy" && name != "m.safetensors"; }

// Starts a writer saving into `dir` that reports each save on `report_fd`. Everything the child
// needs is prepared before fork: between fork and exec only async-signal-safe calls.
pid_t start_writer(const std::string& dir, int report_fd) {
    std::vector<std::string> env_strings;
    for (char** e = ::environ; *e; ++e)
        if (std::strncmp(*e, writer_env, std::strlen(writer_env)) != 0) env_strings.emplace_back(*e);
    env_strings.push_back(std::string(writer_env) + "=" + dir + ":" + std::to_string(report_fd));
    std::vector<char*> envp;
    for (auto& e : env_strings) envp.push_back(e.data());
    envp.push_back(nullptr);
    const char* argv[] = {"ferry_tests", "--gtest_filter=crash_safe_write.*", nullptr};
    pid_t pid = ::fork();
    if (pid == 0) {
        ::fcntl(report_fd, F_SETFD, 0);  // the report pipe survives exec
        int null = ::open("/dev/null", O_WRONLY);
        if (null >= 0) ::dup2(null, STDOUT_FILENO);
        ::execve("/proc/self/exe", const_cast<char* const*>(argv), envp.data());
        ::_exit(127);
    }
    return pid;
}

TEST(crash_safe_write, killed_writers_leave_the_old_or_the_new_file) {
    temp_dir dir;
    save_npy(dir / "a.npy", version(0));
    save_safetensors(dir / "m.safetensors", tensors(0));
    std::mt19937 rng(20261129);
    int kills = 0, mid_save = 0, saves = 0, switched = 0;
    int last_npy = 0;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(50);
    // 200 kills, or as many as 50 s allow where each writer starts slowly (a sanitizer build on
    // a loaded machine made 183); fewer than 100 fails.
    while (kills < 200 && std::chrono::steady_clock::now() < deadline) {
        int pipe_fds[2];
        ASSERT_EQ(::pipe2(pipe_fds, O_CLOEXEC), 0);
        pid_t pid = start_writer(dir.path(), pipe_fds[1]);
        ASSERT_GE(pid, 0);
        ::close(pipe_fds[1]);
        // Wait for the first completed save (the process is up), then kill at a random moment
        // within the next few saves.
        pollfd p{pipe_fds[0], POLLIN, 0};
        int ready = ::poll(&p, 1, 30000);
        if (ready == 1) {
            char buf[64];
            ssize_t n = ::read(pipe_fds[0], buf, sizeof buf);
            if (n > 0) saves += static_cast<int>(n);
            std::this_thread::sleep_for(std::chrono::microseconds(
                std::uniform_int_distribution<int>(0, 40000)(rng)));
        }
        ::kill(pid, SIGKILL);
        int status = 0;
        ASSERT_EQ(::waitpid(pid, &status, 0), pid);
        char buf[4096];
        ssize_t n;
        while ((n = ::read(pipe_fds[0], buf, sizeof buf)) > 0) saves += static_cast<int>(n);
        ::close(pipe_fds[0]);
        ASSERT_EQ(ready, 1) << "the writer never completed a save (exit status " << status << ")";
        ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
            << "the writer ended on its own, status " << status;
        ++kills;

        auto entries = dir_entries(dir.path());
        bool temp_left = false;
        for (const auto& e : entries) temp_left |= is_temporary(e);
        mid_save += temp_left;
        int v = which_npy(load_npy(dir / "a.npy"));
        ASSERT_NE(v, -1) << "kill " << kills << ": a.npy is neither version";
        switched += v != last_npy;
        last_npy = v;
        ASSERT_NE(which_safetensors(load_safetensors(dir / "m.safetensors")), -1)
            << "kill " << kills << ": m.safetensors is neither version";
        // Leftovers of killed writers are cleared here so that each kill is judged alone;
        // whether the library clears them itself is tested below.
        for (const auto& e : entries)
            if (is_temporary(e)) ::unlink((dir / e).c_str());
    }
    std::printf("[ figures  ] %d kills, %d mid-save (temporary file left), %d saves completed, "
                "%d version changes seen\n", kills, mid_save, saves, switched);
    EXPECT_GE(kills, 100) << "only " << kills << " kills in 50 s";
    EXPECT_GT(mid_save, 0) << "no kill landed inside a save: the test proves nothing";
    EXPECT_GT(switched, 0) << "the destination never changed: the writer never got through";
}

// A save must clear the temporary files that killed writers left next to its target (the temp
// files of live writers stay: each holds a lock on its own).
TEST(crash_safe_write, the_next_save_clears_temporary_files_of_killed_writers) {
    temp_dir dir;
    save_npy(dir / "a.npy", version(0));
    int left = 0;
    int null = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
    for (int i = 0; i < 50 && left == 0; ++i) {
        pid_t pid = start_writer(dir.path(), null);
        ASSERT_GE(pid, 0);
        std::this_thread::sleep_for(std::chrono::milliseconds(200 + 10 * i));
        ::kill(pid, SIGKILL);
        ::waitpid(pid, nullptr, 0);
        for (const auto& e : dir_entries(dir.path())) left += is_temporary(e);
    }
    ::close(null);
    ASSERT_GT(left, 0) << "no kill left a temporary file; nothing to clear";
    save_npy(dir / "a.npy", version(1));
    save_safetensors(dir / "m.safetensors", tensors(1));
    EXPECT_EQ(dir_entries(dir.path()), (std::set<std::string>{"a.npy", "m.safetensors"}));
}

}  // namespace
}  // namespace ferry::test
