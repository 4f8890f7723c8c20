#include "backend/host/host_backend.hpp"

#include "os/posix_io.hpp"

namespace ferry::detail {

void host_read(int fd, char* dst, std::size_t n, std::uint64_t offset, const io_context& where) {
    std::size_t got = pread_full(fd, dst, n, offset, where);
    if (got != n) throw end_of_file_error(where, offset + got);
}

void host_write(int fd, const char* src, std::size_t n, std::uint64_t offset, const io_context& where) {
    pwrite_full(fd, src, n, offset, where);
}

}  // namespace ferry::detail
