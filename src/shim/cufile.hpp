// libcufile, loaded at run time: ferry never links it, so everything but GDS works without it.
//
// The shim returns raw cuFile codes; io/ and doctor/ turn them into exceptions or reasons.
#pragma once

#include <cufile.h>

#include <mutex>
#include <string>

namespace ferry::shim {

/// Function pointers into libcufile.so.0 (the subset ferry uses).
struct cufile_api {
    CUfileError_t (*driver_open)();
    CUfileError_t (*driver_close)();
    CUfileError_t (*driver_get_properties)(CUfileDrvProps_t*);
    CUfileError_t (*handle_register)(CUfileHandle_t*, CUfileDescr_t*);
    void (*handle_deregister)(CUfileHandle_t);
    CUfileError_t (*buf_register)(const void*, size_t, int);
    CUfileError_t (*buf_deregister)(const void*);
    ssize_t (*read)(CUfileHandle_t, void*, size_t, off_t, off_t);
    ssize_t (*write)(CUfileHandle_t, const void*, size_t, off_t, off_t);
    CUfileError_t (*get_version)(int*);  ///< may be null (older libraries)
    CUfileError_t (*get_parameter_bool)(CUFileBoolConfigParameter_t, bool*);  ///< may be null
};

/// What loading and opening cuFile gave, once per process.
struct cufile_state {
    bool loaded = false;           ///< dlopen and every required symbol succeeded
    std::string library_path;      ///< the file dlopen found (from dl_iterate_phdr / dlinfo)
    std::string load_error;        ///< dlerror() or the missing symbol, when !loaded
    int version = 0;               ///< cuFileGetVersion (e.g. 1150 for 1.15), 0 if unknown
    bool driver_open = false;      ///< cuFileDriverOpen succeeded
    int driver_open_status = 0;    ///< its CU_FILE_* code
    int driver_open_cuda = 0;      ///< its CUresult, when the code is CU_FILE_CUDA_DRIVER_ERROR
    bool have_properties = false;
    CUfileDrvProps_t properties{};  ///< cuFileDriverGetProperties, when have_properties
    bool std_fds_disturbed = false;  ///< the driver open closed or replaced fd 0-2 (restored)

    /// nvidia-fs loaded (properties report a version other than 0.0).
    bool nvfs_present() const {
        return have_properties &&
               (properties.nvfs.major_version != 0 || properties.nvfs.minor_version != 0);
    }
    /// cuFile can do real direct DMA here: nvidia-fs is loaded (PCI P2PDMA is not detected).
    bool direct_dma() const;
    /// Usable at all (maybe only in compatibility mode).
    bool usable() const { return loaded && driver_open; }
};

/// Loads `library` (first call only; later calls return the first result) and opens the
/// driver, guarding fds 0-2. Thread safe. Never throws.
const cufile_state& cufile(const std::string& library);
/// The function table; valid only when cufile(...).loaded.
const cufile_api& cufile_functions();

/// CU_FILE_* code to cuFile's own message.
std::string cufile_status_string(int code);

}  // namespace ferry::shim
