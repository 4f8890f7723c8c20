// A file registered with cuFile (cuFileHandleRegister), and reads/writes through it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "ferry/error.hpp"
#include "shim/cufile.hpp"

namespace ferry::detail {

/// Owner of a cuFile handle. Move-only; deregisters on destruction. The descriptor stays
/// owned by the caller and must outlive the handle.
class cufile_handle {
public:
    cufile_handle() = default;
    /// Registers `fd`; check ok() and status(): registration failing is a reason to fall back,
    /// not an exception.
    explicit cufile_handle(int fd);
    cufile_handle(cufile_handle&& o) noexcept;
    cufile_handle& operator=(cufile_handle&& o) noexcept;
    cufile_handle(const cufile_handle&) = delete;
    cufile_handle& operator=(const cufile_handle&) = delete;
    ~cufile_handle();

    bool ok() const noexcept { return handle_ != nullptr; }
    int status() const noexcept { return status_; }
    /// Plain words for a failed registration (code and cuFile's message).
    std::string failure() const;
    CUfileHandle_t get() const noexcept { return handle_; }

private:
    CUfileHandle_t handle_ = nullptr;
    int status_ = 0;
};

/// cuFileRead of exactly n bytes at `offset` into `base + buffer_offset` (device memory).
void gds_read(const cufile_handle& h, void* base, std::size_t buffer_offset, std::size_t n,
              std::uint64_t offset, const io_context& where);
void gds_write(const cufile_handle& h, const void* base, std::size_t buffer_offset, std::size_t n,
               std::uint64_t offset, const io_context& where);

}  // namespace ferry::detail
