#include "backend/posix/posix_source.hpp"

#include <fcntl.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>

#include "log.hpp"
#include "os/page_cache.hpp"
#include "os/posix_io.hpp"
#include "os/reopen.hpp"
#include "os/sys.hpp"
#include "os/worker_thread.hpp"
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

// Reads up to this size take the worker's own descriptor. The contention measured is per call;
// a larger read spends its time copying, and the shared descriptor costs it nothing.
constexpr std::size_t small_read = 64 << 10;

constexpr int fd_untried = -1;
constexpr int fd_refused = -2;

}  // namespace

posix_source::posix_source(const std::string& path, open_mode mode, const settings& s)
    : path_(path),
      mode_(mode),
      cufile_library_(s.cufile_library),
      direct_io_on_(s.direct_io == direct_io_mode::on),
      log_(s.log) {
    // A file open for writing too keeps one descriptor, so that its reads see its writes by
    // construction on every file system.
    const int first = mode == open_mode::read ? fd_untried : fd_refused;
    for (auto& w : worker_fds_) w.store(first, std::memory_order_relaxed);
    // O_NONBLOCK so that opening a FIFO by mistake fails below instead of hanging here.
    fd_ = owned_fd(sys::open(path.c_str(), open_flags(mode) | O_NONBLOCK, 0666));
    if (!fd_) throw system_error(errno, "cannot open", {path});
    struct stat st {};
    if (sys::fstat(fd_.get(), &st) != 0) throw system_error(errno, "fstat failed", {path});
    if (!S_ISREG(st.st_mode) && !S_ISBLK(st.st_mode)) {
        // Say what it is: "Invalid argument" alone does not tell a user that a pipe was given.
        const bool stream = S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode);
        const char* kind = S_ISDIR(st.st_mode)    ? "a directory"
                           : S_ISFIFO(st.st_mode) ? "a FIFO"
                           : S_ISSOCK(st.st_mode) ? "a socket"
                           : S_ISCHR(st.st_mode)  ? "a character device"
                                                  : "not a regular file";
        throw system_error(S_ISDIR(st.st_mode) ? EISDIR : stream ? ESPIPE : EINVAL,
                           std::string("cannot use ") + kind +
                               " (ferry reads and writes regular files and block devices, by offset)",
                           {path});
    }
    int flags = sys::fcntl(fd_.get(), F_GETFL);
    if (flags < 0 || sys::fcntl(fd_.get(), F_SETFL, flags & ~O_NONBLOCK) != 0)
        throw system_error(errno, "fcntl(F_SETFL) failed", {path});
}

posix_source::~posix_source() {
    // The cuFile handle goes before the descriptor it registered.
    cufile_.reset();
    close_worker_fds();
    direct_.reset();
}

source_traits posix_source::traits() const noexcept {
    source_traits t;
    t.writable = mode_ != open_mode::read;
    return t;
}

std::uint64_t posix_source::size() { return file_size(fd_.get(), path_); }

void posix_source::read(char* dst, std::size_t n, std::uint64_t offset, const io_context& where) {
    std::size_t got = pread_full(read_fd(n), dst, n, offset, where);
    if (got != n) throw end_of_file_error(where, offset + got);
}

int posix_source::read_fd(std::size_t n) {
    const int w = worker_thread_index();
    if (n > small_read || w < 0 || w >= static_cast<int>(worker_fds_.size())) return fd_.get();
    std::atomic<int>& slot = worker_fds_[static_cast<std::size_t>(w)];
    int fd = slot.load(std::memory_order_acquire);
    if (fd >= 0) return fd;
    if (fd == fd_refused) return fd_.get();
    const char* why = nullptr;
    int mine = reopen_for_reading(fd_.get(), &why);
    if (mine < 0) {
        // Refused for good, the cap included: this worker reads this file as every thread did
        // before, and asks the kernel nothing more on later reads.
        int e = errno;
        mine = fd_refused;
        if (log_level::debug <= log_ && !fallback_logged_.exchange(true)) {
            settings s;
            s.log = log_;
            log(log_level::debug, s,
                path_ + ": worker " + std::to_string(w) + " reads through the shared descriptor: " + why +
                    (e ? std::string(" (") + std::strerror(e) + ")" : std::string()));
        }
    }
    // Workers of two pools may share an index: the first descriptor stored is the slot's.
    int expected = fd_untried;
    if (!slot.compare_exchange_strong(expected, mine, std::memory_order_acq_rel)) {
        if (mine >= 0) close_reopened(mine);
        return expected >= 0 ? expected : fd_.get();
    }
    return mine >= 0 ? mine : fd_.get();
}

void posix_source::close_worker_fds() noexcept {
    for (auto& w : worker_fds_) {
        int fd = w.exchange(fd_refused, std::memory_order_acq_rel);
        if (fd >= 0) close_reopened(fd);
    }
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
    // Read-only descriptors: their close loses nothing, so only the shared one's error counts.
    close_worker_fds();
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

std::unique_ptr<source> open_local_file(const location& where, open_mode mode, const settings& s) {
    std::string path = where.scheme() == "file" ? std::string(where.rest()) : where.text();
    return std::make_unique<posix_source>(path, mode, s);
}

}  // namespace ferry::detail
