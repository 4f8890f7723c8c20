// A local file kept registered with CUDA (ferry::registered_file): its page-cache pages mapped
// read-only and pinned once with cudaHostRegister, so that every later read of it into GPU
// memory is a DMA straight from the page cache, without the staging copy. The "registered"
// source, which the planner picks for reads of such a file into device memory.
//
// Each registration lives in a process-wide table, looked up by the file's device and inode and
// used only while the file's size and modification time are still those it was registered with.
#pragma once

#include <sys/stat.h>

#include <cstdint>
#include <memory>
#include <string>

#include "backend/source.hpp"
#include "os/owned_fd.hpp"

namespace ferry::detail {

class registered_source final : public source {
public:
    /// Registers `path` (or shares the live registration of the same, unchanged file). Throws
    /// usage_error (not a regular file, empty, over the registration limit), system_error
    /// (open, mmap) or cuda_error (no GPU, registration refused), each naming the path.
    static std::shared_ptr<registered_source> create(const std::string& path);
    ~registered_source() override;

    std::string_view kind() const noexcept override { return "registered"; }
    const std::string& location() const noexcept override { return path_; }
    source_traits traits() const noexcept override;
    std::uint64_t size() override { return size_; }

    /// Into host memory: a pread of the file (the mapping is never touched by the CPU, so a
    /// file truncated since cannot fault).
    void read(char* dst, std::size_t n, std::uint64_t offset, const io_context& where) override;
    /// One copy from the registered pages on this thread's own stream, waited for.
    void read_device(void* base, std::size_t buffer_offset, std::size_t n, std::uint64_t offset,
                     const io_context& where) override;

    /// What registering cost, in seconds.
    double seconds() const noexcept { return seconds_; }
    /// Whether `st` (of a file open now) is this file, unchanged since it was registered.
    bool same_file(const struct stat& st) const noexcept;

    registered_source(const registered_source&) = delete;
    registered_source& operator=(const registered_source&) = delete;

private:
    friend std::shared_ptr<registered_source> find_registration(int fd, std::string& changed);
    registered_source(std::string path, owned_fd fd, const struct stat& st);

    std::string path_;
    owned_fd fd_;
    std::uint64_t size_ = 0;
    dev_t dev_ = 0;
    ino_t ino_ = 0;
    struct timespec mtime_ {};
    char* map_ = nullptr;
    bool registered_ = false;
    double seconds_ = 0;
};

/// The live registration of the file open as `fd`, unchanged, or null. Where a registration
/// of the same file exists but the file changed since, `changed` says how. Costs nothing when
/// the process registered no file.
std::shared_ptr<registered_source> find_registration(int fd, std::string& changed);

/// The process-wide cap on registered bytes (default: half the machine's memory), and the
/// bytes registered now.
void set_registration_limit(std::uint64_t bytes);
std::uint64_t registration_limit();
std::uint64_t registered_bytes();

}  // namespace ferry::detail
