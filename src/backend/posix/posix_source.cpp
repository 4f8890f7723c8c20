#include "backend/posix/posix_source.hpp"

#include <fcntl.h>
#include <sys/stat.h>

#include <cerrno>

#include "os/page_cache.hpp"
#include "os/posix_io.hpp"
#include "os/sys.hpp"
#include "shim/cufile.hpp"

namespace ferry::detail {
namespace {

int open_flags(open_mode m) {
    switch (m) {
        case open_mode::read: return O_RDONLY;
        case open_mode::write: return O_WRONLY | O_CREAT | O_TRUNC;
        case open_mode::read_write: return O_RDWR | O_CREAT;
        case open_mode::append_write: return O_WRONLY | O_CREAT;
    }
    return O_RDONLY;
}

bool write_only(open_mode m) { return m == open_mode::write || m == open_mode::append_write; }

}  // namespace

posix_source::posix_source(const std::string& path, open_mode mode, const settings& s)
    : path_(path), mode_(mode), cufile_library_(s.cufile_library), direct_io_on_(s.direct_io == direct_io_mode::on) {
    // O_NONBLOCK so that opening a FIFO by mistake fails below instead of hanging here.
    fd_ = owned_fd(sys::open(path.c_str(), open_flags(mode) | O_NONBLOCK, 0666));
    if (!fd_) throw system_error(errno, "cannot open", {path});
    struct stat st {};
    if (sys::fstat(fd_.get(), &st) != 0) throw system_error(errno, "fstat failed", {path});
    if (!S_ISREG(st.st_mode) && !S_ISBLK(st.st_mode))
        throw system_error(S_ISDIR(st.st_mode) ? EISDIR : EINVAL, "not a regular file or block device", {path});
    int flags = sys::fcntl(fd_.get(), F_GETFL);
    if (flags < 0 || sys::fcntl(fd_.get(), F_SETFL, flags & ~O_NONBLOCK) != 0)
        throw system_error(errno, "fcntl(F_SETFL) failed", {path});
}

posix_source::~posix_source() {
    // The cuFile handle goes before the descriptor it registered.
    cufile_.reset();
    direct_.reset();
}

source_traits posix_source::traits() const noexcept {
    source_traits t;
    t.writable = mode_ != open_mode::read;
    return t;
}

std::uint64_t posix_source::size() { return file_size(fd_.get(), path_); }

void posix_source::read(char* dst, std::size_t n, std::uint64_t offset, const io_context& where) {
    std::size_t got = pread_full(fd_.get(), dst, n, offset, where);
    if (got != n) throw end_of_file_error(where, offset + got);
}

void posix_source::write(const char* src, std::size_t n, std::uint64_t offset, const io_context& where) {
    pwrite_full(fd_.get(), src, n, offset, where);
}

void posix_source::sync() {
    if (sys::fsync(fd_.get()) != 0) throw system_error(errno, "fsync failed", {path_});
}

void posix_source::truncate(std::uint64_t size) {
    if (sys::ftruncate(fd_.get(), static_cast<off_t>(size)) != 0)
        throw system_error(errno, "ftruncate failed", {path_, 0, size});
}

void posix_source::close() {
    cufile_.reset();
    int e1 = direct_ ? direct_->close_descriptor() : 0;
    int e2 = fd_.close();
    if (e2) throw system_error(e2, "close failed", {path_});
    if (e1) throw system_error(e1, "close failed (O_DIRECT descriptor)", {path_});
}

double posix_source::cached_fraction() { return resident_fraction(fd_.get(), size()); }

source* posix_source::alternative(std::string_view kind, unavailable_reason& why) {
    if (kind == "direct") return direct(why);
    if (kind == "cufile") return cufile(why);
    return source::alternative(kind, why);
}

direct_source* posix_source::direct(unavailable_reason& why) {
    std::lock_guard lock(direct_mutex_);
    if (!direct_tried_) {
        direct_tried_ = true;
        if (write_only(mode_)) direct_why_ = {"opened for writing only", 0};
        else direct_ = direct_source::open(path_, direct_why_);
    }
    if (!direct_) why = direct_why_;
    return direct_.get();
}

cufile_source* posix_source::cufile(unavailable_reason& why) {
    std::lock_guard lock(cufile_mutex_);
    if (!cufile_tried_) {
        cufile_tried_ = true;
        settings s;
        s.cufile_library = cufile_library_;
        std::string no = cufile_unavailable(s);
        if (!no.empty()) {
            cufile_why_ = {no, 0};
        } else {
            // Real GDS wants an O_DIRECT descriptor. In compatibility mode cuFile does POSIX I/O on
            // the descriptor it gets, so an O_DIRECT one would bypass the page cache (1.6 against
            // 11 GB/s hot on our measurements): hand it the buffered one unless O_DIRECT was asked for.
            int fd = fd_.get();
            if (shim::cufile(cufile_library_).direct_dma() || direct_io_on_) {
                unavailable_reason ignored;
                if (direct_source* d = direct(ignored)) fd = d->fd();
            }
            cufile_ = cufile_source::open(path_, fd, mode_ != open_mode::read, cufile_why_);
        }
    }
    if (!cufile_) why = cufile_why_;
    return cufile_.get();
}

std::unique_ptr<source> open_local_file(const std::string& location, open_mode mode, const settings& s) {
    std::string path = location.rfind("file://", 0) == 0 ? location.substr(7) : location;
    return std::make_unique<posix_source>(path, mode, s);
}

}  // namespace ferry::detail
