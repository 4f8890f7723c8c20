// The local file read and written with buffered pread/pwrite: the "posix" source, which the
// registry opens for plain paths and file:// locations. It also offers the local file's
// alternatives (backend/alternatives.cpp: O_DIRECT reads, cuFile DMA...), each opened on first
// ask and owned here.
//
// Small reads on the engine's workers each go through that worker's own descriptor of the file
// (os/reopen.hpp): preads of 1.5-5.4 KiB from 16 workers on one descriptor took 1.8-3.4x the
// wall time per read of a descriptor per thread on the H200 machine (ferry_pread_contention), the
// shared struct file being one contended cache line. Larger reads, other threads, and a worker
// that cannot have its own descriptor use the shared one.
#pragma once

#include <sys/types.h>

#include <array>
#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backend/alternatives.hpp"
#include "backend/location.hpp"
#include "backend/source.hpp"
#include "ferry/file.hpp"
#include "os/owned_fd.hpp"

namespace ferry::detail {

class posix_source final : public source {
public:
    /// Opens `path` (a regular file or a block device). Throws system_error naming it.
    posix_source(const std::string& path, open_mode mode, const settings& s);
    ~posix_source() override;

    std::string_view kind() const noexcept override { return "posix"; }
    const std::string& location() const noexcept override { return path_; }
    source_traits traits() const noexcept override;
    std::uint64_t size() override;
    /// The file's identity now (fstat): "inode DEV:INO size N mtime S.NS". A file replaced
    /// under its name, or rewritten in place, gives another; "" when fstat fails.
    std::string version() const override;

    void read(char* dst, std::size_t n, std::uint64_t offset, const io_context& where) override;
    void write(const char* src, std::size_t n, std::uint64_t offset, const io_context& where) override;
    void sync() override;
    void truncate(std::uint64_t size) override;
    void close() override;

    /// An alternative of the table in backend/alternatives.cpp that this file opens.
    source* alternative(std::string_view kind, unavailable_reason& why) override;
    double cached_fraction() override;

    int fd() const noexcept { return fd_.get(); }
    int descriptor() const noexcept override { return fd_.get(); }

private:
    /// One per entry of local_alternatives(), opened on first ask.
    struct alternative_slot {
        std::mutex mutex;
        bool tried = false;
        std::unique_ptr<source> opened;
        unavailable_reason why;
    };
    source* open_alternative(std::size_t index, unavailable_reason& why);
    static source* sibling(void* self, alternative_role role, unavailable_reason& why);
    void reset_alternatives() noexcept;
    /// The descriptor a read of `n` bytes on the calling thread goes through.
    int read_fd(std::size_t n);
    void close_worker_fds() noexcept;

    std::string path_;
    open_mode mode_;
    settings config_;  ///< what the alternatives' probes and openers read
    owned_fd fd_;
    log_level log_;

    /// Per worker index: its own descriptor of the file, not tried yet (-1) or not to be had
    /// (-2: refused, or the file is open for writing too). Workers past the last share fd_.
    std::array<std::atomic<int>, 64> worker_fds_;
    std::atomic<bool> fallback_logged_{false};

    std::vector<alternative_slot> alternatives_;
};

/// The registry's opener for local files: plain paths and file:// locations.
std::unique_ptr<source> open_local_file(const location& where, open_mode mode, const settings& s);

}  // namespace ferry::detail
