#include "shim/cufile.hpp"

#include "os/once_per_process.hpp"
#include "shim/std_fd_guard.hpp"

#include <dlfcn.h>
#include <fcntl.h>
#include <link.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string_view>
#include <cstring>
#include <future>
#include <memory>
#include <thread>

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

// cuFile needs a CUDA driver with a device. Without one, cuFileDriverOpen of cuFile 1.20 spins
// forever at 100% CPU (measured on the CPU-only machines with the nvidia-cufile wheel), so the
// driver is asked first, through libcuda itself: "" when usable, else why not.
std::string cuda_driver_problem() {
    void* cuda = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!cuda) return "no CUDA driver (libcuda.so.1 cannot be loaded)";
    using init_fn = int (*)(unsigned);
    using count_fn = int (*)(int*);
    auto init = reinterpret_cast<init_fn>(::dlsym(cuda, "cuInit"));
    auto count = reinterpret_cast<count_fn>(::dlsym(cuda, "cuDeviceGetCount"));
    if (!init || !count) return "libcuda.so.1 lacks cuInit or cuDeviceGetCount";
    if (int rc = init(0); rc != 0)
        return "the CUDA driver does not initialize (cuInit: CUresult " + std::to_string(rc) + ")";
    int n = 0;
    if (int rc = count(&n); rc != 0 || n == 0) return "the CUDA driver sees no GPU";
    return {};
}

// cuFile writes cufile.log into the working directory unless told otherwise; a user's directory
// is no place for it. Where neither CUFILE_LOGFILE_PATH nor a logging.dir in cufile.json says
// where, the log goes to $TMPDIR (else /tmp) as cufile-<uid>.log.
void keep_log_out_of_working_directory() {
    if (std::getenv("CUFILE_LOGFILE_PATH")) return;
    const char* config = std::getenv("CUFILE_ENV_PATH_JSON");
    std::string text;
    if (FILE* f = std::fopen(config && *config ? config : "/etc/cufile.json", "rb")) {
        char buf[4096];
        while (std::size_t n = std::fread(buf, 1, sizeof buf, f)) text.append(buf, n);
        std::fclose(f);
    }
    // A configured logging directory is left alone. cufile.json allows // comments, and the
    // shipped one names "dir" in a comment: look at what each line holds before any comment.
    for (std::size_t pos = 0; pos < text.size();) {
        std::size_t end = text.find('\n', pos);
        if (end == std::string::npos) end = text.size();
        std::string_view line(text.data() + pos, end - pos);
        line = line.substr(0, line.find("//"));
        if (line.find("\"dir\"") != std::string_view::npos) return;
        pos = end + 1;
    }
    const char* tmp = std::getenv("TMPDIR");
    std::string path = std::string(tmp && *tmp ? tmp : "/tmp") + "/cufile-" + std::to_string(::getuid()) + ".log";
    ::setenv("CUFILE_LOGFILE_PATH", path.c_str(), 0);
}

// The longest cuFileDriverOpen may take before ferry gives up on it (it took well under a second
// on the GPU machine; a hang must not hang ferry, the doctor least of all).
constexpr std::chrono::seconds driver_open_limit{20};

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
    s.driver_skipped = cuda_driver_problem();
    if (!s.driver_skipped.empty()) return s;
    keep_log_out_of_working_directory();
    {
        // Some cuFile versions have closed or replaced fd 0-2 when opening the driver without
        // /dev/nvidia-fs*: keep them as they were. The open runs on its own thread so that a
        // hang is bounded; a thread that never returns is left behind, detached.
        std_fd_guard guard;
        auto result = std::make_shared<std::promise<CUfileError_t>>();
        std::future<CUfileError_t> done = result->get_future();
        std::thread([result, open = api.driver_open] {
            try {
                result->set_value(open());
            } catch (...) {
                result->set_exception(std::current_exception());
            }
        }).detach();
        if (done.wait_for(driver_open_limit) != std::future_status::ready) {
            s.driver_skipped = "cuFileDriverOpen did not return within " +
                               std::to_string(driver_open_limit.count()) + " s";
            s.std_fds_disturbed = !guard.restore().empty();
            return s;
        }
        CUfileError_t st{};
        try {
            st = done.get();
        } catch (...) {
            s.driver_skipped = "cuFileDriverOpen threw an exception";
            return s;
        }
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

// Once per process; a child forked while another thread was loading does not wait for it
// (os/once_per_process.hpp).
namespace {
detail::once_per_process<cufile_state> loaded_once;
const cufile_state forked_mid_load{.load_error = "this process was forked while another thread was loading cuFile"};
}  // namespace

const cufile_state& cufile(const std::string& library) {
    return loaded_once.get([&] { return load_quietly(library); }, forked_mid_load);
}

const cufile_api& cufile_functions() { return api; }

std::string cufile_status_string(int code) {
    return cufileop_status_error(static_cast<CUfileOpError>(code < 0 ? -code : code));
}

}  // namespace ferry::shim
