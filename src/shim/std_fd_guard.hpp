// Keeps fds 0-2 exactly as they were (the cuFile driver open and the doctor use it).
//
// Opening the cuFile driver where /dev/nvidia-fs* is missing has been seen to close fd 0 in
// other programs, and any library that opens a file while fd 0, 1 or 2 is closed silently takes
// that number, so later writes meant for stdout land in it. While a guard lives, closed standard
// fds are held on /dev/null (new files never get those numbers) and open ones are remembered by
// a duplicate; the destructor closes the placeholders and puts back any standard fd that was
// closed or replaced.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace ferry::shim {

/// Identity of an fd: closed, or the open file (device, inode, access mode).
struct fd_identity {
    bool open = false;
    dev_t dev = 0;
    ino_t ino = 0;
    int access = 0;

    static fd_identity of(int fd);
    bool operator==(const fd_identity&) const = default;
};

/// Move-less scope guard for fds 0-2. Not thread safe against another thread closing or
/// replacing standard fds at the same time (nothing can be).
class std_fd_guard {
public:
    std_fd_guard();
    ~std_fd_guard();
    std_fd_guard(const std_fd_guard&) = delete;
    std_fd_guard& operator=(const std_fd_guard&) = delete;

    /// Checks now and repairs; returns the fds that had been disturbed since construction
    /// ("fd 0 was closed", ...). The destructor calls it too.
    std::vector<std::string> restore();

private:
    fd_identity before_[3];
    int saved_[3] = {-1, -1, -1};     ///< duplicates of the open standard fds
    bool placeholder_[3] = {false, false, false};  ///< fds we filled with /dev/null
    fd_identity placeholder_id_[3];
    bool restored_ = false;
};

}  // namespace ferry::shim
