#include "backend/direct/direct_read.hpp"

#include <algorithm>
#include <cerrno>

#include "os/alignment.hpp"
#include "os/posix_io.hpp"
#include "os/sys.hpp"

namespace ferry::detail {

const char* direct_read(int fd, std::size_t align, char* buffer, std::size_t capacity, std::size_t n,
                        std::uint64_t offset, const io_context& where) {
    std::uint64_t begin = align_down(offset, align);
    std::uint64_t end = align_up(offset + n, align);
    std::size_t span = static_cast<std::size_t>(end - begin);
    if (span > capacity) throw system_error(EINVAL, "internal: O_DIRECT span exceeds its buffer", where);
    // A read that crosses end of file returns short with a whole number of blocks or the
    // file's tail; only the wanted bytes must be there.
    std::size_t got = 0;
    unsigned again = 0;
    while (got < span) {
        ssize_t r = sys::pread(fd, buffer + got, std::min(span - got, max_io_per_call),
                               static_cast<off_t>(begin + got));
        if (r < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN) {
                eagain_backoff(again++);
                continue;
            }
            throw system_error(errno, "O_DIRECT read failed", where);
        }
        if (r == 0) break;
        got += static_cast<std::size_t>(r);
        if (got % align != 0) break;  // the file's unaligned tail: end of file
    }
    std::size_t head = static_cast<std::size_t>(offset - begin);
    if (got < head + n) throw end_of_file_error(where, begin + got);
    return buffer + head;
}

}  // namespace ferry::detail
