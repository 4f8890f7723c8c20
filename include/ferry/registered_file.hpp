// ferry::registered_file: a local file kept registered with CUDA, for a file loaded into GPU
// memory again and again (a server switching between models).
//
// Registering maps the file read-only and pins its page-cache pages with cudaHostRegister
// (read-only) once. While the registration lives, every read of that file into device memory,
// through any API of the process (ferry::file, the formats' loads, checkpoint loads), is a
// DMA straight from the page cache: no pinned staging copy, no CPU work per byte. The planner
// says so (reason "registered"; route ("registered", "device-dma"), counted as `staged`).
//
// Costs: the whole file is read into the page cache and locked there (it cannot be evicted)
// for as long as the registration lives, counted against a process-wide limit (by default half
// the machine's memory); registering 8 GiB took 0.23-0.38 s on the H200 machine. A read of
// the file after it changed (size or modification time) takes its usual route, and the
// planner's reasons say why. Files opened while it lives keep it until they close.
#pragma once

#include "ferry/export.hpp"

#include <cstdint>
#include <memory>
#include <string>

namespace ferry {

namespace detail {
class registered_source;
}

/// Thread safety: a value; its members may be called from many threads. Move-only.
class FERRY_EXPORT registered_file {
public:
    /// Registers `path`, or shares the live registration of the same unchanged file. Throws
    /// usage_error (not a regular local file, empty, over the limit), system_error (open,
    /// mmap) or cuda_error (no GPU; the GPU cannot register read-only memory), naming the path.
    explicit registered_file(const std::string& path);
    registered_file(registered_file&&) noexcept;
    registered_file& operator=(registered_file&&) noexcept;
    registered_file(const registered_file&) = delete;
    registered_file& operator=(const registered_file&) = delete;
    ~registered_file();

    const std::string& path() const noexcept;
    /// The bytes registered (the file's size when registered).
    std::uint64_t size() const noexcept;
    /// How long registering the file took, in seconds.
    double seconds() const noexcept;
    /// Gives the registration up (files still open on it keep it until they close). Idempotent.
    void close() noexcept;

private:
    std::shared_ptr<detail::registered_source> impl_;
};

/// The cap on the bytes all registrations of the process hold (0: back to the default, half
/// the machine's memory), and the bytes registered now.
FERRY_EXPORT void set_registration_limit(std::uint64_t bytes);
FERRY_EXPORT std::uint64_t registration_limit();
FERRY_EXPORT std::uint64_t registered_bytes();

}  // namespace ferry
