// The local file registered with cuFile: the "cufile" source, an alternative that a posix source
// opens on first ask. It moves bytes between the file and GPU memory itself (cuFileRead and
// cuFileWrite), with direct DMA when nvidia-fs is loaded, else in cuFile's compatibility mode.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "backend/cufile/cufile_handle.hpp"
#include "backend/source.hpp"
#include "ferry/settings.hpp"

namespace ferry::detail {

class cufile_source final : public source {
public:
    /// Registers `fd`, which its owner keeps open for as long as this source lives. Null with
    /// the reason (and cuFile's status as its code) when cuFile cannot serve the file.
    static std::unique_ptr<cufile_source> open(const std::string& path, int fd, bool writable,
                                               unavailable_reason& why);
    cufile_source(std::string path, int fd, bool writable, cufile_handle handle);

    std::string_view kind() const noexcept override { return "cufile"; }
    const std::string& location() const noexcept override { return path_; }
    source_traits traits() const noexcept override;
    std::uint64_t size() override;

    void read(char* dst, std::size_t n, std::uint64_t offset, const io_context& where) override;
    void write(const char* src, std::size_t n, std::uint64_t offset, const io_context& where) override;
    void read_device(void* base, std::size_t buffer_offset, std::size_t n, std::uint64_t offset,
                     const io_context& where) override;
    void write_device(const void* base, std::size_t buffer_offset, std::size_t n, std::uint64_t offset,
                      const io_context& where) override;
    void close() override;

private:
    std::string path_;
    int fd_;
    bool writable_;
    cufile_handle handle_;
};

/// Why cuFile cannot be used at all in this process ("" when it can): the library does not
/// load, or its driver does not open. The registry's unavailable() for "cufile".
/// Why cuFile cannot be used in this process (its library does not load, or its driver does not
/// open), with the cause's code; nullopt when it can. The alternatives table's probe.
std::optional<unavailable_reason> cufile_probe(const settings& s);
std::string cufile_unavailable(const settings& s);

}  // namespace ferry::detail
