#include "backend/cufile/cufile_source.hpp"

#include <unistd.h>

#include "os/posix_io.hpp"
#include "os/sys.hpp"
#include "shim/cufile.hpp"

namespace ferry::detail {

std::optional<unavailable_reason> cufile_probe(const settings& s) {
    const shim::cufile_state& cf = shim::cufile(s.cufile_library);
    if (!cf.loaded)
        return unavailable_reason{.text = "cuFile is not available: " + cf.load_error,
                                  .cause = reason_code::cufile_library_missing};
    if (!cf.driver_open)
        return unavailable_reason{.text = "cuFileDriverOpen failed with error " + std::to_string(cf.driver_open_status) +
                                          " (" + shim::cufile_status_string(cf.driver_open_status) + ")",
                                  .cause = reason_code::cufile_driver_failed};
    return std::nullopt;
}

std::string cufile_unavailable(const settings& s) {
    auto no = cufile_probe(s);
    return no ? no->text : std::string();
}

std::unique_ptr<cufile_source> cufile_source::open(const std::string& path, int fd, bool writable,
                                                   unavailable_reason& why) {
    cufile_handle h(fd);
    if (!h.ok()) {
        why = {.text = h.failure(), .code = h.status(), .cause = reason_code::cufile_register_failed};
        why.udev_missing = sys::access("/run/udev/data", F_OK) != 0;
        if (why.udev_missing)
            why.text += "; the udev database (/run/udev/data) is missing, so cuFile cannot read "
                        "the volume's attributes";
        return nullptr;
    }
    return std::make_unique<cufile_source>(path, fd, writable, std::move(h));
}

cufile_source::cufile_source(std::string path, int fd, bool writable, cufile_handle handle)
    : path_(std::move(path)), fd_(fd), writable_(writable), handle_(std::move(handle)) {}

source_traits cufile_source::traits() const noexcept {
    source_traits t;
    t.writable = writable_;
    t.device_dma = true;
    return t;
}

std::uint64_t cufile_source::size() { return file_size(fd_, path_); }

void cufile_source::read(char* dst, std::size_t n, std::uint64_t offset, const io_context& where) {
    std::size_t got = pread_full(fd_, dst, n, offset, where);
    if (got != n) throw end_of_file_error(where, offset + got);
}

void cufile_source::write(const char* src, std::size_t n, std::uint64_t offset, const io_context& where) {
    pwrite_full(fd_, src, n, offset, where);
}

void cufile_source::read_device(void* base, std::size_t buffer_offset, std::size_t n, std::uint64_t offset,
                                const io_context& where) {
    gds_read(handle_, base, buffer_offset, n, offset, where);
}

void cufile_source::write_device(const void* base, std::size_t buffer_offset, std::size_t n,
                                 std::uint64_t offset, const io_context& where) {
    gds_write(handle_, base, buffer_offset, n, offset, where);
}

void cufile_source::close() { handle_ = cufile_handle(); }

}  // namespace ferry::detail
