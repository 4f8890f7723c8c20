// The local file read and written with buffered pread/pwrite: the "posix" source, which the
// registry opens for plain paths and file:// locations. It also offers the local file's two
// alternatives, opened on first ask and owned here: "direct" (O_DIRECT reads) and "cufile"
// (cuFile DMA to and from GPU memory).
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

#include "backend/cufile/cufile_source.hpp"
#include "backend/direct/direct_source.hpp"
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

    void read(char* dst, std::size_t n, std::uint64_t offset, const io_context& where) override;
    void write(const char* src, std::size_t n, std::uint64_t offset, const io_context& where) override;
    void sync() override;
    void truncate(std::uint64_t size) override;
    void close() override;

    /// "direct" or "cufile".
    source* alternative(std::string_view kind, unavailable_reason& why) override;
    double cached_fraction() override;

    int fd() const noexcept { return fd_.get(); }

private:
    direct_source* direct(unavailable_reason& why);
    cufile_source* cufile(unavailable_reason& why);
    /// The descriptor a read of `n` bytes on the calling thread goes through.
    int read_fd(std::size_t n);
    void close_worker_fds() noexcept;

    std::string path_;
    open_mode mode_;
    std::string cufile_library_;
    bool direct_io_on_;  ///< FERRY_DIRECT_IO=on: cuFile gets the O_DIRECT descriptor too
    owned_fd fd_;
    log_level log_;

    /// Per worker index: its own descriptor of the file, not tried yet (-1) or not to be had
    /// (-2: refused, or the file is open for writing too). Workers past the last share fd_.
    std::array<std::atomic<int>, 64> worker_fds_;
    std::atomic<bool> fallback_logged_{false};

    std::mutex direct_mutex_;
    bool direct_tried_ = false;
    std::unique_ptr<direct_source> direct_;
    unavailable_reason direct_why_;

    std::mutex cufile_mutex_;
    bool cufile_tried_ = false;
    std::unique_ptr<cufile_source> cufile_;
    unavailable_reason cufile_why_;
};

/// The registry's opener for local files: plain paths and file:// locations.
std::unique_ptr<source> open_local_file(const location& where, open_mode mode, const settings& s);

}  // namespace ferry::detail
