#include "backend/io_uring/io_uring_source.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <vector>

#include "os/once_per_process.hpp"
#include "os/posix_io.hpp"

#ifdef FERRY_HAVE_LIBURING
#include <liburing.h>
#include <unistd.h>
#endif

namespace ferry::detail {
namespace {

bool write_only(open_mode m) { return m == open_mode::write || m == open_mode::append_write; }

#ifdef FERRY_HAVE_LIBURING

// A read at least this large per piece: smaller ones cost more in submission than they gain in
// parallelism on one worker.
constexpr std::size_t min_piece = 64 << 10;
// The most one read(2)-like request moves on Linux.
constexpr std::size_t max_piece = 0x7ffff000;

/// The calling thread's ring, made on first use with at least `depth` entries and torn down at
/// the thread's exit. A thread's requests run one at a time, so one ring per thread needs no lock.
/// A child of fork() has a copy of the forking thread's ring, which shares its queues with the
/// parent's: the child gives its copy up (unmapping and closing only its own) and makes its own.
struct thread_ring {
    io_uring ring{};
    unsigned entries = 0;
    bool ok = false;
    pid_t owner = 0;
    ~thread_ring() { reset(); }
    void reset() noexcept {
        if (ok) io_uring_queue_exit(&ring);
        ok = false;
        entries = 0;
    }
};

thread_local thread_ring this_thread_ring;

io_uring& ring_for(std::size_t depth, const io_context& where) {
    thread_ring& r = this_thread_ring;
    const pid_t me = ::getpid();
    if (r.ok && r.entries >= depth && r.owner == me) return r.ring;
    r.reset();
    int e = io_uring_queue_init(static_cast<unsigned>(depth), &r.ring, 0);
    if (e < 0) throw system_error(-e, "io_uring_queue_init failed", where);
    r.ok = true;
    r.entries = static_cast<unsigned>(depth);
    r.owner = me;
    return r.ring;
}

/// /proc/sys/kernel/io_uring_disabled: 0 (allowed), 1 (only for kernel.io_uring_group), 2
/// (disabled); -1 where the kernel has no such switch (before Linux 6.6).
int io_uring_disabled_sysctl() {
    std::ifstream in("/proc/sys/kernel/io_uring_disabled");
    int v = -1;
    if (!(in >> v)) return -1;
    return v;
}

#endif

/// What the kernel says.
std::optional<unavailable_reason> ask_kernel() {
#ifndef FERRY_HAVE_LIBURING
    return unavailable_reason{.text = "this build of ferry has no io_uring (liburing was not found when it was "
                                      "built)",
                              .cause = reason_code::io_uring_not_built};
#else
    const int disabled = io_uring_disabled_sysctl();
    if (disabled == 2)
        return unavailable_reason{.text = "io_uring is disabled for every process "
                                          "(/proc/sys/kernel/io_uring_disabled = 2)",
                                  .cause = reason_code::io_uring_disabled};
    io_uring ring{};
    int e = io_uring_queue_init(2, &ring, 0);
    if (e == 0) {
        io_uring_queue_exit(&ring);
        return std::nullopt;
    }
    if (e == -EPERM && disabled == 1)
        return unavailable_reason{.text = "io_uring is disabled for processes outside kernel.io_uring_group "
                                          "(/proc/sys/kernel/io_uring_disabled = 1)",
                                  .cause = reason_code::io_uring_disabled};
    if (e == -EPERM)
        return unavailable_reason{.text = "io_uring_setup is not permitted (EPERM): a seccomp profile (a "
                                          "container's) or a security module refuses it",
                                  .cause = reason_code::io_uring_not_permitted};
    if (e == -ENOSYS)
        return unavailable_reason{.text = "the kernel has no io_uring (io_uring_setup: ENOSYS)",
                                  .cause = reason_code::io_uring_not_supported};
    return unavailable_reason{.text = std::string("io_uring_setup failed: ") + std::strerror(-e),
                              .cause = reason_code::io_uring_setup_failed};
#endif
}

// Asked once per process; a child forked mid-question does not wait for it
// (os/once_per_process.hpp).
detail::once_per_process<std::optional<unavailable_reason>> verdict_once;
const std::optional<unavailable_reason> forked_mid_probe = unavailable_reason{
    .text = "this process was forked while another thread was asking the kernel about io_uring",
    .cause = reason_code::io_uring_setup_failed};

const std::optional<unavailable_reason>& kernel_verdict() { return verdict_once.get(ask_kernel, forked_mid_probe); }

}  // namespace

io_uring_source::io_uring_source(std::string path, int fd, std::size_t queue_depth)
    : path_(std::move(path)), fd_(fd), depth_(std::max<std::size_t>(queue_depth, 1)) {}

std::uint64_t io_uring_source::size() { return file_size(fd_, path_); }

#ifdef FERRY_HAVE_LIBURING

void io_uring_source::read(char* dst, std::size_t n, std::uint64_t offset, const io_context& where) {
    if (n == 0) return;
    io_uring& ring = ring_for(depth_, where);
    // Up to depth_ pieces of whole pages, each at least min_piece.
    std::size_t piece = (n + depth_ - 1) / depth_;
    piece = std::clamp<std::size_t>((piece + 4095) / 4096 * 4096, min_piece, max_piece);
    struct part {
        std::size_t at, len, done;
    };
    std::vector<part> parts;
    parts.reserve((n + piece - 1) / piece);
    for (std::size_t at = 0; at < n; at += piece) parts.push_back({at, std::min(piece, n - at), 0});

    std::size_t next = 0, in_flight = 0;
    int error = 0;
    std::uint64_t file_end = UINT64_MAX;  // where the file ended, when a piece met its end
    std::vector<std::size_t> again;
    auto queue = [&](std::size_t i) {
        io_uring_sqe* sqe = io_uring_get_sqe(&ring);  // never null: at most depth_ in flight
        const part& p = parts[i];
        io_uring_prep_read(sqe, fd_, dst + p.at + p.done, static_cast<unsigned>(p.len - p.done),
                           offset + p.at + p.done);
        io_uring_sqe_set_data(sqe, reinterpret_cast<void*>(static_cast<std::uintptr_t>(i)));
        ++in_flight;
    };
    for (;;) {
        // After an error nothing more is queued; after the end of the file, only the rest of
        // pieces before it (a short read there says where the file really ends).
        const bool stopping = error != 0 || file_end != UINT64_MAX;
        for (std::size_t i : again)
            if (!error && offset + parts[i].at + parts[i].done < file_end) queue(i);
        again.clear();
        while (!stopping && next < parts.size() && in_flight < depth_) queue(next++);
        if (in_flight == 0) break;
        int r = io_uring_submit_and_wait(&ring, 1);
        if (r < 0 && r != -EINTR && r != -EAGAIN && r != -EBUSY) {
            // Nothing queued since the last submission went in: wait for what did, so that no
            // read lands in `dst` after this returns, and give the ring up.
            std::size_t unsent = io_uring_sq_ready(&ring);
            in_flight -= unsent;
            while (in_flight > 0) {
                io_uring_cqe* cqe = nullptr;
                if (io_uring_wait_cqe(&ring, &cqe) < 0) break;
                io_uring_cqe_seen(&ring, cqe);
                --in_flight;
            }
            this_thread_ring.reset();
            throw system_error(-r, "io_uring_submit failed", where);
        }
        unsigned head = 0, seen = 0;
        io_uring_cqe* cqe = nullptr;
        io_uring_for_each_cqe(&ring, head, cqe) {
            ++seen;
            --in_flight;
            const std::size_t i = static_cast<std::size_t>(reinterpret_cast<std::uintptr_t>(io_uring_cqe_get_data(cqe)));
            part& p = parts[i];
            const int res = cqe->res;
            if (res == -EINTR || res == -EAGAIN) again.push_back(i);
            else if (res < 0) error = error ? error : -res;
            else if (res == 0) file_end = std::min<std::uint64_t>(file_end, offset + p.at + p.done);
            else if ((p.done += static_cast<std::size_t>(res)) < p.len) again.push_back(i);  // a short read
        }
        io_uring_cq_advance(&ring, seen);
    }
    if (error) throw system_error(error, "io_uring read failed", where);
    if (file_end != UINT64_MAX) throw end_of_file_error(where, file_end);
}

#else

void io_uring_source::read(char*, std::size_t, std::uint64_t, const io_context& where) {
    throw system_error(ENOSYS, "io_uring read: " + kernel_verdict()->text, where);
}

#endif

std::optional<unavailable_reason> io_uring_probe(const settings& s) {
    if (s.io_uring == io_uring_mode::off)
        return unavailable_reason{.text = "FERRY_IO_URING=off", .cause = reason_code::io_uring_off};
    return kernel_verdict();
}

std::unique_ptr<source> open_io_uring_source(const std::string& path, int fd, open_mode mode, const settings& s,
                                             unavailable_reason& why) {
    if (write_only(mode)) {
        why = {.text = "opened for writing only", .cause = reason_code::opened_write_only};
        return nullptr;
    }
    if (auto no = io_uring_probe(s)) {
        why = *no;
        return nullptr;
    }
    return std::make_unique<io_uring_source>(path, fd, s.io_uring_queue_depth);
}

}  // namespace ferry::detail
