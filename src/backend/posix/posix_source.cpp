#include "backend/posix/posix_source.hpp"

#include <fcntl.h>
#include <sys/stat.h>

#include <cerrno>
#include <exception>
#include <cstring>

#include "log.hpp"
#include "os/page_cache.hpp"
#include "os/posix_io.hpp"
#include "os/reopen.hpp"
#include "os/sys.hpp"
#include "os/worker_thread.hpp"

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

// Reads up to this size take the worker's own descriptor. The contention measured is per call;
// a larger read spends its time copying, and the shared descriptor costs it nothing.
constexpr std::size_t small_read = 64 << 10;

constexpr int fd_untried = -1;
constexpr int fd_refused = -2;

}  // namespace

posix_source::posix_source(const std::string& path, open_mode mode, const settings& s)
    : path_(path),
      mode_(mode),
      config_(s),
      log_(s.log),
      alternatives_(local_alternatives().size()) {
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
    // The alternatives (a cuFile handle) go before the descriptors they registered.
    reset_alternatives();
    close_worker_fds();
}

void posix_source::reset_alternatives() noexcept {
    for (auto a = alternatives_.rbegin(); a != alternatives_.rend(); ++a) a->opened.reset();
}

source_traits posix_source::traits() const noexcept {
    source_traits t;
    t.writable = mode_ != open_mode::read;
    return t;
}

std::uint64_t posix_source::size() { return file_size(fd_.get(), path_); }

std::string posix_source::version() const { return file_version(fd_.get()); }

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
    // Alternatives close in reverse order of the table (a cuFile handle before the O_DIRECT
    // descriptor it registered), before the shared descriptor, whose error counts first.
    std::exception_ptr first;
    for (auto a = alternatives_.rbegin(); a != alternatives_.rend(); ++a) {
        if (!a->opened) continue;
        try {
            a->opened->close();
        } catch (...) {
            if (!first) first = std::current_exception();
        }
    }
    // Read-only descriptors: their close loses nothing, so only the shared one's error counts.
    close_worker_fds();
    if (int e = fd_.close()) throw system_error(e, "close failed", {path_});
    if (first) std::rethrow_exception(first);
}

double posix_source::cached_fraction() { return resident_fraction(fd_.get(), size()); }

source* posix_source::alternative(std::string_view kind, unavailable_reason& why) {
    const auto table = local_alternatives();
    for (std::size_t i = 0; i < table.size(); ++i)
        if (kind == table[i].kind && table[i].traits.opened_per_file) return open_alternative(i, why);
    return source::alternative(kind, why);
}

source* posix_source::sibling(void* self, alternative_role role, unavailable_reason& why) {
    auto* me = static_cast<posix_source*>(self);
    const auto table = local_alternatives();
    for (std::size_t i = 0; i < table.size(); ++i)
        if (table[i].role == role && table[i].traits.opened_per_file) return me->open_alternative(i, why);
    why = {.text = "no such alternative in this build"};
    return nullptr;
}

source* posix_source::open_alternative(std::size_t index, unavailable_reason& why) {
    alternative_slot& slot = alternatives_[index];
    std::lock_guard lock(slot.mutex);
    if (!slot.tried) {
        slot.tried = true;
        const local_alternative& a = local_alternatives()[index];
        alternative_base base{path_, fd_.get(), mode_, config_, &posix_source::sibling, this};
        slot.opened = a.open(base, slot.why);
    }
    if (!slot.opened) why = slot.why;
    return slot.opened.get();
}

std::unique_ptr<source> open_local_file(const location& where, open_mode mode, const settings& s) {
    std::string path = where.scheme() == "file" ? std::string(where.rest()) : where.text();
    return std::make_unique<posix_source>(path, mode, s);
}

}  // namespace ferry::detail
