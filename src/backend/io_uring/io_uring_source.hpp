// The local file read through io_uring: the "io_uring" source, an alternative a posix source
// offers (backend/alternatives.cpp) for reads into host memory, and for the staged mover's reads
// into its pinned buffers. A read is cut into up to FERRY_IO_URING_QUEUE_DEPTH pieces submitted
// together on the calling thread's own ring, so one worker keeps that many reads in flight
// where a pread keeps one.
//
// Built only where liburing was found at configure time (FERRY_HAVE_LIBURING); elsewhere the
// probe says so and the planner never routes here. Whether the kernel lets this process use
// io_uring is probed once per process (io_uring_probe).
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <string>

#include "backend/source.hpp"
#include "ferry/file.hpp"
#include "ferry/settings.hpp"

namespace ferry::detail {

class io_uring_source final : public source {
public:
    /// Reads through `fd`, which its owner (the posix source) keeps open while this lives.
    io_uring_source(std::string path, int fd, std::size_t queue_depth);

    std::string_view kind() const noexcept override { return "io_uring"; }
    const std::string& location() const noexcept override { return path_; }
    source_traits traits() const noexcept override { return {}; }
    std::uint64_t size() override;

    /// Thread safe: each calling thread submits on its own ring.
    void read(char* dst, std::size_t n, std::uint64_t offset, const io_context& where) override;

private:
    std::string path_;
    int fd_;
    std::size_t depth_;
};

/// Why io_uring cannot be used in this process (not built, disabled by the kernel's sysctl,
/// refused by a seccomp profile, missing from the kernel) or with these settings
/// (FERRY_IO_URING=off), with the cause's code; nullopt when it can. The kernel is asked once
/// per process. The alternatives table's probe.
std::optional<unavailable_reason> io_uring_probe(const settings& s);

/// The alternatives table's opener: null with the reason when io_uring cannot read this file.
std::unique_ptr<source> open_io_uring_source(const std::string& path, int fd, open_mode mode, const settings& s,
                                             unavailable_reason& why);

}  // namespace ferry::detail
