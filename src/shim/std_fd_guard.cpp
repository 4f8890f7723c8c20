#include "shim/std_fd_guard.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

namespace ferry::shim {

fd_identity fd_identity::of(int fd) {
    fd_identity id;
    int flags = ::fcntl(fd, F_GETFL);
    struct stat st {};
    if (flags < 0 || ::fstat(fd, &st) != 0) return id;
    id.open = true;
    id.dev = st.st_dev;
    id.ino = st.st_ino;
    id.access = flags & O_ACCMODE;
    return id;
}

std_fd_guard::std_fd_guard() {
    for (int fd = 0; fd < 3; ++fd) {
        before_[fd] = fd_identity::of(fd);
        if (before_[fd].open) saved_[fd] = ::fcntl(fd, F_DUPFD_CLOEXEC, 3);
    }
    // Fill closed standard fds with /dev/null. open() returns the lowest free number, so this
    // never lands on (or replaces) a file another thread holds; stop at the first number above 2.
    for (;;) {
        int fd = ::open("/dev/null", O_RDWR | O_CLOEXEC);
        if (fd < 0) break;
        if (fd > 2) {
            ::close(fd);
            break;
        }
        if (before_[fd].open) {  // cannot happen; be safe rather than lose the placeholder
            ::close(fd);
            break;
        }
        placeholder_[fd] = true;
        placeholder_id_[fd] = fd_identity::of(fd);
    }
}

std::vector<std::string> std_fd_guard::restore() {
    std::vector<std::string> disturbed;
    for (int fd = 0; fd < 3; ++fd) {
        fd_identity now = fd_identity::of(fd);
        if (placeholder_[fd]) {
            if (now != placeholder_id_[fd])
                disturbed.push_back("fd " + std::to_string(fd) + " (closed) was taken");
            // Put back "closed" only if what sits there is still our /dev/null.
            if (now == placeholder_id_[fd]) ::close(fd);
            placeholder_[fd] = false;
        } else if (before_[fd].open && now != before_[fd]) {
            disturbed.push_back("fd " + std::to_string(fd) + (now.open ? " was replaced" : " was closed"));
            if (saved_[fd] >= 0) ::dup2(saved_[fd], fd);  // dup2 clears FD_CLOEXEC on fd
        } else if (!before_[fd].open && now.open) {
            disturbed.push_back("fd " + std::to_string(fd) + " (closed) was taken");
        }
        if (saved_[fd] >= 0) {
            ::close(saved_[fd]);
            saved_[fd] = -1;
        }
    }
    restored_ = true;
    return disturbed;
}

std_fd_guard::~std_fd_guard() {
    if (!restored_) restore();
}

}  // namespace ferry::shim
