// libnccl loaded at run time (see nccl.hpp).
#include "shim/nccl.hpp"

#include <dlfcn.h>

#include <map>
#include <memory>
#include <mutex>

namespace ferry::shim {
namespace {

template <class F>
bool bind(void* lib, const char* name, F& fn, std::string& error) {
    fn = reinterpret_cast<F>(::dlsym(lib, name));
    if (!fn) {
        error = std::string("symbol ") + name + " missing";
        return false;
    }
    return true;
}

}  // namespace

nccl_state load_nccl(const std::string& library, nccl_api& api) {
    nccl_state s;
    api = {};
    void* lib = ::dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        const char* e = ::dlerror();
        s.load_error = e ? e : ("cannot load " + library);
        return s;
    }
    std::string err;
    bool ok = bind(lib, "ncclGetVersion", api.get_version, err) &&
              bind(lib, "ncclGetErrorString", api.get_error_string, err) &&
              bind(lib, "ncclCommCount", api.comm_count, err) &&
              bind(lib, "ncclCommUserRank", api.comm_user_rank, err) &&
              bind(lib, "ncclBroadcast", api.broadcast, err) &&
              bind(lib, "ncclAllReduce", api.all_reduce, err) &&
              bind(lib, "ncclGroupStart", api.group_start, err) &&
              bind(lib, "ncclGroupEnd", api.group_end, err) &&
              bind(lib, "ncclCommGetAsyncError", api.comm_get_async_error, err) &&
              bind(lib, "ncclCommAbort", api.comm_abort, err) &&
              bind(lib, "ncclCommDestroy", api.comm_destroy, err) &&
              bind(lib, "ncclCommCuDevice", api.comm_cu_device, err) &&
              bind(lib, "ncclGetUniqueId", api.get_unique_id, err) &&
              bind(lib, "ncclCommInitRank", api.comm_init_rank, err);
    if (!ok) {
        api = {};
        s.load_error = library + ": " + err;
        return s;  // stays loaded: a communicator of the caller's may live in it
    }
    // Optional: per-node subgroups need it, everything else works without.
    api.comm_split = reinterpret_cast<decltype(api.comm_split)>(::dlsym(lib, "ncclCommSplit"));
    Dl_info info{};
    if (::dladdr(reinterpret_cast<void*>(api.get_version), &info) && info.dli_fname)
        s.library_path = info.dli_fname;
    else
        s.library_path = library;
    int v = 0;
    if (api.get_version(&v) == nccl_success) s.version = v;
    s.loaded = true;
    return s;
}

const nccl_library& nccl() { return nccl("libnccl.so.2"); }

const nccl_library& nccl(const std::string& library) {
    static std::mutex mutex;
    static std::map<std::string, std::unique_ptr<nccl_library>> loaded;  // never freed: see nccl.hpp
    std::lock_guard lock(mutex);
    auto& slot = loaded[library];
    if (!slot) {
        slot = std::make_unique<nccl_library>();
        slot->state = load_nccl(library, slot->api);
    }
    return *slot;
}

}  // namespace ferry::shim
