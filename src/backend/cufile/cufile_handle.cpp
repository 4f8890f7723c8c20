#include "backend/cufile/cufile_handle.hpp"

#include <cerrno>
#include <cstring>
#include <utility>

#include "os/posix_io.hpp"
#include "os/fault_hook.hpp"

namespace ferry::detail {

cufile_handle::cufile_handle(int fd) {
    CUfileDescr_t d{};
    d.type = CU_FILE_HANDLE_TYPE_OPAQUE_FD;
    d.handle.fd = fd;
    CUfileHandle_t h = nullptr;
    if (sys::inject("cuFileHandleRegister")) {  // fault-injection seam: as a refusal by cuFile
        status_ = CU_FILE_INTERNAL_ERROR;
        return;
    }
    CUfileError_t st = shim::cufile_functions().handle_register(&h, &d);
    status_ = st.err;
    if (st.err == CU_FILE_SUCCESS) handle_ = h;
}

cufile_handle::cufile_handle(cufile_handle&& o) noexcept
    : handle_(std::exchange(o.handle_, nullptr)), status_(o.status_) {}

cufile_handle& cufile_handle::operator=(cufile_handle&& o) noexcept {
    if (this != &o) {
        if (handle_) shim::cufile_functions().handle_deregister(handle_);
        handle_ = std::exchange(o.handle_, nullptr);
        status_ = o.status_;
    }
    return *this;
}

cufile_handle::~cufile_handle() {
    if (handle_) shim::cufile_functions().handle_deregister(handle_);
}

std::string cufile_handle::failure() const {
    return "cuFileHandleRegister failed with error " + std::to_string(status_) + " (" +
           shim::cufile_status_string(status_) + ")";
}

namespace {

// cuFileRead/Write return bytes, or -1 with errno, or a negative CU_FILE_* code.
[[noreturn]] void throw_io(ssize_t r, const char* what, const io_context& where) {
    if (r == -1) throw system_error(errno, what, where);
    int code = static_cast<int>(-r);
    throw cufile_error(code, std::string(what) + ": " + shim::cufile_status_string(code), where);
}

}  // namespace

namespace {

// Moves n bytes in calls of at most max_io_per_call, retrying EINTR and EAGAIN; `call` is one
// cuFileRead or cuFileWrite of (want, done): the bytes it moved, or what throw_io reads.
// `no_progress` throws for a call that moved nothing.
template <class Call, class NoProgress>
void transfer_all(const char* name, std::size_t n, std::uint64_t offset, const io_context& where, Call call,
                  NoProgress no_progress) {
    std::size_t done = 0;
    unsigned again = 0;
    while (done < n) {
        std::size_t want = std::min(n - done, max_io_per_call);
        ssize_t r = sys::inject(name, &want) ? -1 : call(want, done);
        if (r < 0) {
            if (r == -1 && errno == EINTR) continue;
            if (r == -1 && errno == EAGAIN) {
                eagain_backoff(again++);
                continue;
            }
            throw_io(r, (std::string(name) + " failed").c_str(), where);
        }
        if (r == 0) no_progress(offset + done, where);
        done += static_cast<std::size_t>(r);
    }
}

}  // namespace

void gds_read(const cufile_handle& h, void* base, std::size_t buffer_offset, std::size_t n,
              std::uint64_t offset, const io_context& where) {
    transfer_all(
        "cuFileRead", n, offset, where,
        [&](std::size_t want, std::size_t done) {
            return shim::cufile_functions().read(h.get(), base, want, static_cast<off_t>(offset + done),
                                                 static_cast<off_t>(buffer_offset + done));
        },
        [](std::uint64_t at, const io_context& w) -> void { throw end_of_file_error(w, at); });
}

void gds_write(const cufile_handle& h, const void* base, std::size_t buffer_offset, std::size_t n,
               std::uint64_t offset, const io_context& where) {
    transfer_all(
        "cuFileWrite", n, offset, where,
        [&](std::size_t want, std::size_t done) {
            return shim::cufile_functions().write(h.get(), base, want, static_cast<off_t>(offset + done),
                                                  static_cast<off_t>(buffer_offset + done));
        },
        [](std::uint64_t, const io_context& w) -> void { throw system_error(ENOSPC, "cuFileWrite made no progress", w); });
}

}  // namespace ferry::detail
