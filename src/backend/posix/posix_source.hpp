// The local file read and written with buffered pread/pwrite: the "posix" source, which the
// registry opens for plain paths and file:// locations. It also offers the local file's two
// alternatives, opened on first ask and owned here: "direct" (O_DIRECT reads) and "cufile"
// (cuFile DMA to and from GPU memory).
#pragma once

#include <sys/types.h>

#include <memory>
#include <mutex>
#include <string>

#include "backend/cufile/cufile_source.hpp"
#include "backend/direct/direct_source.hpp"
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

    std::string path_;
    open_mode mode_;
    std::string cufile_library_;
    bool direct_io_on_;  ///< FERRY_DIRECT_IO=on: cuFile gets the O_DIRECT descriptor too
    owned_fd fd_;

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
std::unique_ptr<source> open_local_file(const std::string& location, open_mode mode, const settings& s);

}  // namespace ferry::detail
