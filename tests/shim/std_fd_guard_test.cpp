// std_fd_guard puts fds 0-2 back exactly as they were.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <unistd.h>

#include "shim/std_fd_guard.hpp"

namespace ferry::shim {
namespace {

/// Saves fd 0 for the test and puts it back at the end, whatever the test did.
class stdin_saver {
public:
    stdin_saver() : copy_(::fcntl(0, F_DUPFD_CLOEXEC, 3)), before_(fd_identity::of(0)) {}
    ~stdin_saver() {
        if (copy_ >= 0) {
            ::dup2(copy_, 0);
            ::close(copy_);
        } else {
            ::close(0);
        }
    }
    const fd_identity& before() const { return before_; }

private:
    int copy_;
    fd_identity before_;
};

TEST(StdFdGuard, RestoresAClosedStandardFd) {
    stdin_saver saver;
    if (!saver.before().open) GTEST_SKIP() << "fd 0 is closed in this test process";
    std_fd_guard guard;
    ::close(0);  // what a misbehaving library does
    auto disturbed = guard.restore();
    ASSERT_EQ(disturbed.size(), 1u);
    EXPECT_EQ(disturbed[0], "fd 0 was closed");
    EXPECT_EQ(fd_identity::of(0), saver.before());
}

TEST(StdFdGuard, RestoresAReplacedStandardFd) {
    stdin_saver saver;
    if (!saver.before().open) GTEST_SKIP() << "fd 0 is closed in this test process";
    std_fd_guard guard;
    int other = ::open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
    ASSERT_GE(other, 0);
    ::dup2(other, 0);
    ::close(other);
    auto disturbed = guard.restore();
    ASSERT_EQ(disturbed.size(), 1u);
    EXPECT_EQ(disturbed[0], "fd 0 was replaced");
    EXPECT_EQ(fd_identity::of(0), saver.before());
}

TEST(StdFdGuard, ClosedFdStaysClosedAndIsNotHandedOut) {
    stdin_saver saver;
    ::close(0);
    {
        std_fd_guard guard;
        // While the guard lives, new files never get number 0.
        int fd = ::open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
        EXPECT_GT(fd, 2);
        if (fd >= 0) ::close(fd);
        EXPECT_TRUE(guard.restore().empty());
    }
    EXPECT_FALSE(fd_identity::of(0).open);
}

TEST(StdFdGuard, UntouchedFdsReportNothing) {
    fd_identity before[3] = {fd_identity::of(0), fd_identity::of(1), fd_identity::of(2)};
    {
        std_fd_guard guard;
        EXPECT_TRUE(guard.restore().empty());
    }
    for (int fd = 0; fd < 3; ++fd) EXPECT_EQ(fd_identity::of(fd), before[fd]);
}

}  // namespace
}  // namespace ferry::shim
