// An owned file descriptor: move-only; close() releases it and reports the error, the
// destructor releases it and ignores the error. Every close goes through the seam.
#pragma once

#include <utility>

namespace ferry::detail {

class owned_fd {
public:
    owned_fd() = default;
    explicit owned_fd(int fd) noexcept : fd_(fd) {}
    owned_fd(owned_fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
    owned_fd& operator=(owned_fd&& o) noexcept {
        if (this != &o) {
            close();
            fd_ = std::exchange(o.fd_, -1);
        }
        return *this;
    }
    owned_fd(const owned_fd&) = delete;
    owned_fd& operator=(const owned_fd&) = delete;
    ~owned_fd() { close(); }

    int get() const noexcept { return fd_; }
    explicit operator bool() const noexcept { return fd_ >= 0; }
    /// Closes now (a no-op when already closed). Returns 0, or the errno of a failed close:
    /// Linux releases the descriptor either way.
    int close() noexcept;

private:
    int fd_ = -1;
};

}  // namespace ferry::detail
