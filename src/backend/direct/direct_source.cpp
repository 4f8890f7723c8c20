#include "backend/direct/direct_source.hpp"

#include <fcntl.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>

#include "backend/direct/direct_read.hpp"
#include "os/posix_io.hpp"
#include "os/sys.hpp"

namespace ferry::detail {

std::unique_ptr<direct_source> direct_source::open(const std::string& path, unavailable_reason& why) {
    int fd = sys::open(path.c_str(), O_RDONLY | O_DIRECT);
    if (fd < 0) {
        const bool refused = errno == EINVAL;
        why = {.text = refused ? "the file system refuses O_DIRECT (open: EINVAL)"
                               : std::string("O_DIRECT open failed: ") + std::strerror(errno),
               .cause = refused ? reason_code::direct_io_unsupported_fs : reason_code::direct_io_open_failed};
        return nullptr;
    }
    owned_fd owned(fd);
    direct_alignment a = query_direct_alignment(fd);
    return std::make_unique<direct_source>(path, std::move(owned), std::max(a.memory, a.offset));
}

direct_source::direct_source(std::string path, owned_fd fd, std::size_t align)
    : path_(std::move(path)), fd_(std::move(fd)), align_(align) {}

source_traits direct_source::traits() const noexcept {
    source_traits t;
    t.align = align_;
    return t;
}

std::uint64_t direct_source::size() { return file_size(fd_.get(), path_); }

void direct_source::read(char* dst, std::size_t n, std::uint64_t offset, const io_context& where) {
    if (n % align_ != 0 || offset % align_ != 0 || reinterpret_cast<std::uintptr_t>(dst) % align_ != 0)
        throw usage_error("internal: unaligned O_DIRECT read: " + path_);
    direct_read(fd_.get(), align_, dst, n, n, offset, where);
}

const char* direct_source::read_into(char* buffer, std::size_t capacity, std::size_t n, std::uint64_t offset,
                                     const io_context& where) {
    return direct_read(fd_.get(), align_, buffer, capacity, n, offset, where);
}

std::size_t direct_source::payload(std::size_t capacity) const noexcept { return direct_payload(capacity, align_); }

void direct_source::close() {
    if (int e = fd_.close()) throw system_error(e, "close failed (O_DIRECT descriptor)", {path_});
}

}  // namespace ferry::detail
