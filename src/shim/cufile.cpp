#include "shim/cufile.hpp"

#include "shim/std_fd_guard.hpp"

#include <dlfcn.h>
#include <fcntl.h>
#include <link.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

namespace ferry::shim {
namespace {

cufile_api api{};

template <class F>
bool bind(void* lib, const char* name, F& fn, std::string& error, bool required = true) {
    fn = reinterpret_cast<F>(::dlsym(lib, name));
    if (!fn && required) {
        error = std::string("symbol ") + name + " missing";
        return false;
    }
    return true;
}

std::string loaded_path(void* lib, void* symbol) {
    Dl_info info{};
    if (symbol && ::dladdr(symbol, &info) && info.dli_fname) return info.dli_fname;
    (void)lib;
    return {};
}

cufile_state load(const std::string& library) {
    cufile_state s;
    void* lib = ::dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        const char* e = ::dlerror();
        s.load_error = e ? e : ("cannot load " + library);
        return s;
    }
    std::string err;
    bool ok = bind(lib, "cuFileDriverOpen", api.driver_open, err) &&
              bind(lib, "cuFileDriverClose", api.driver_close, err) &&
              bind(lib, "cuFileDriverGetProperties", api.driver_get_properties, err) &&
              bind(lib, "cuFileHandleRegister", api.handle_register, err) &&
              bind(lib, "cuFileHandleDeregister", api.handle_deregister, err) &&
              bind(lib, "cuFileBufRegister", api.buf_register, err) &&
              bind(lib, "cuFileBufDeregister", api.buf_deregister, err) &&
              bind(lib, "cuFileRead", api.read, err) && bind(lib, "cuFileWrite", api.write, err) &&
              bind(lib, "cuFileGetVersion", api.get_version, err, false) &&
              bind(lib, "cuFileGetParameterBool", api.get_parameter_bool, err, false);
    if (!ok) {
        s.load_error = library + ": " + err;
        return s;  // the library stays loaded: unloading cuFile has been unsafe
    }
    s.loaded = true;
    s.library_path = loaded_path(lib, reinterpret_cast<void*>(api.driver_open));
    if (s.library_path.empty()) s.library_path = library;
    if (api.get_version) {
        int v = 0;
        if (api.get_version(&v).err == CU_FILE_SUCCESS) s.version = v;
    }
    {
        // Some cuFile versions have closed or replaced fd 0-2 when opening the driver without
        // /dev/nvidia-fs*: keep them as they were.
        std_fd_guard guard;
        CUfileError_t st = api.driver_open();
        s.std_fds_disturbed = !guard.restore().empty();
        s.driver_open_status = st.err;
        s.driver_open_cuda = static_cast<int>(st.cu_err);
        s.driver_open = st.err == CU_FILE_SUCCESS || st.err == CU_FILE_DRIVER_ALREADY_OPEN;
    }
    if (s.driver_open) {
        s.have_properties = api.driver_get_properties(&s.properties).err == CU_FILE_SUCCESS;
    }
    return s;
}

}  // namespace

bool cufile_state::direct_dma() const {
    // Direct DMA needs nvidia-fs here; PCI P2PDMA without it is not detected as direct (the
    // doctor reports its hints separately), so such a system reads in compatibility terms.
    return usable() && nvfs_present();
}

// cuFile prints its complaints (a bad cufile.json, a missing module) on standard output,
// where they would corrupt a program's own output (ferry doctor --json): while it loads and
// opens, standard output goes to standard error.
cufile_state load_quietly(const std::string& library) {
    std::fflush(stdout);
    int saved = ::fcntl(1, F_DUPFD_CLOEXEC, 3);
    if (saved >= 0) ::dup2(2, 1);
    cufile_state s = load(library);
    std::fflush(stdout);
    if (saved >= 0) {
        ::dup2(saved, 1);
        ::close(saved);
    }
    return s;
}

const cufile_state& cufile(const std::string& library) {
    static const cufile_state s = load_quietly(library);
    return s;
}

const cufile_api& cufile_functions() { return api; }

std::string cufile_status_string(int code) {
    return cufileop_status_error(static_cast<CUfileOpError>(code < 0 ? -code : code));
}

}  // namespace ferry::shim
