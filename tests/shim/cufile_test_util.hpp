// Whether cuFile can serve a test file here, and if not why: tests of the cuFile path skip with
// that reason instead of failing (or aborting) for a machine's reason.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <string>

#include "shim/cufile.hpp"

namespace ferry::test {

/// "" when cuFile loads, its driver opens and it registers a handle for `path`; else why not
/// (no udev record of the disk and an unsupported file system make registration fail).
inline std::string cufile_unusable_reason(const std::string& library, const std::string& path) {
    const shim::cufile_state& cf = shim::cufile(library);
    if (!cf.loaded) return "cuFile unusable here: " + cf.load_error;
    if (!cf.driver_skipped.empty()) return "cuFile unusable here: " + cf.driver_skipped;
    if (!cf.driver_open)
        return "cuFile unusable here: cuFileDriverOpen failed with " + std::to_string(cf.driver_open_status) +
               " (" + shim::cufile_status_string(cf.driver_open_status) + ")";
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return "cannot open " + path;
    CUfileDescr_t d{};
    d.handle.fd = fd;
    d.type = CU_FILE_HANDLE_TYPE_OPAQUE_FD;
    CUfileHandle_t h{};
    CUfileError_t st = shim::cufile_functions().handle_register(&h, &d);
    std::string why;
    if (st.err == CU_FILE_SUCCESS)
        shim::cufile_functions().handle_deregister(h);
    else
        why = "cuFileHandleRegister fails for " + path + " with " + std::to_string(st.err) + " (" +
              shim::cufile_status_string(st.err) + "; `ferry doctor " + path + "` says why)";
    ::close(fd);
    return why;
}

}  // namespace ferry::test
