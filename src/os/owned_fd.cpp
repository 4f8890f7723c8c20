#include "os/owned_fd.hpp"

#include <cerrno>

#include "os/sys.hpp"

namespace ferry::detail {

int owned_fd::close() noexcept {
    if (fd_ < 0) return 0;
    int fd = std::exchange(fd_, -1);
    return sys::close(fd) == 0 ? 0 : errno;
}

}  // namespace ferry::detail
