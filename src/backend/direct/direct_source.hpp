// The local file read with O_DIRECT: the "direct" source, an alternative that a posix source
// opens on first ask. Every range is widened to the file system's alignment (statx DIOALIGN,
// else 4096) and read into an aligned buffer; the wanted bytes are found inside it. Reads only.
#pragma once

#include <memory>
#include <string>

#include "backend/source.hpp"
#include "os/alignment.hpp"
#include "os/owned_fd.hpp"

namespace ferry::detail {

class direct_source final : public source {
public:
    /// Opens `path` with O_DIRECT; null with the reason when the file system refuses it.
    static std::unique_ptr<direct_source> open(const std::string& path, unavailable_reason& why);
    direct_source(std::string path, owned_fd fd, std::size_t align);

    std::string_view kind() const noexcept override { return "direct"; }
    const std::string& location() const noexcept override { return path_; }
    source_traits traits() const noexcept override;
    std::uint64_t size() override;

    /// `dst`, `n` and `offset` must be multiples of the alignment.
    void read(char* dst, std::size_t n, std::uint64_t offset, const io_context& where) override;
    const char* read_into(char* buffer, std::size_t capacity, std::size_t n, std::uint64_t offset,
                          const io_context& where) override;
    std::size_t payload(std::size_t capacity) const noexcept override;
    void close() override;

    /// Closes the descriptor; returns 0 or the errno of a failed close.
    int close_descriptor() noexcept { return fd_.close(); }
    int fd() const noexcept { return fd_.get(); }
    std::size_t align() const noexcept { return align_; }

private:
    std::string path_;
    owned_fd fd_;
    std::size_t align_;
};

}  // namespace ferry::detail
