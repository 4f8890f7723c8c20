// libnccl, loaded at run time: ferry never links it, so a distributed load can take a caller's
// NCCL communicator while every other path works without NCCL installed (as cuFile is loaded).
//
// Declares only the NCCL types and functions ferry calls, from NCCL's published C API
// (nccl.h, 2.x: ncclResult_t, ncclDataType_t and ncclRedOp_t are int enums; a communicator
// is an opaque pointer), so building ferry needs no NCCL headers. Raw codes come back; the
// caller turns them into exceptions.
#pragma once

#include <cstddef>
#include <string>

struct ncclComm;
struct CUstream_st;

namespace ferry::shim {

using nccl_comm_t = ncclComm*;

/// ncclUniqueId: NCCL_UNIQUE_ID_BYTES (128) opaque bytes, passed by value.
struct nccl_unique_id {
    char internal[128];
};

/// ncclResult_t values ferry tells apart.
enum nccl_result : int { nccl_success = 0, nccl_in_progress = 7 };
/// The first NCCL with ncclCommSplit (per-node subgroups need it): 2.18.0.
inline constexpr int nccl_split_version = 21800;
/// ncclDataType_t values ferry uses (collectives move bytes: uint8).
enum nccl_type : int { nccl_int8 = 0, nccl_uint8 = 1, nccl_int32 = 2, nccl_int64 = 4 };
/// ncclRedOp_t values ferry uses.
enum nccl_op : int { nccl_sum = 0, nccl_max = 2 };

/// Function pointers into libnccl.so.2 (the subset ferry uses).
struct nccl_api {
    int (*get_version)(int*);
    const char* (*get_error_string)(int);
    int (*comm_count)(nccl_comm_t, int*);
    int (*comm_user_rank)(nccl_comm_t, int*);
    int (*broadcast)(const void*, void*, std::size_t, int, int, nccl_comm_t, CUstream_st*);
    int (*all_reduce)(const void*, void*, std::size_t, int, int, nccl_comm_t, CUstream_st*);
    int (*group_start)();
    int (*group_end)();
    int (*comm_get_async_error)(nccl_comm_t, int*);
    int (*comm_abort)(nccl_comm_t);
    int (*comm_destroy)(nccl_comm_t);
    int (*comm_cu_device)(nccl_comm_t, int*);
    int (*get_unique_id)(nccl_unique_id*);
    int (*comm_init_rank)(nccl_comm_t*, int, nccl_unique_id, int);
    /// ncclCommSplit(comm, color, key, newcomm, config): null before NCCL 2.18 (optional).
    int (*comm_split)(nccl_comm_t, int, int, nccl_comm_t*, void*);
};

/// What loading NCCL gave.
struct nccl_state {
    bool loaded = false;        ///< dlopen and every required symbol succeeded
    std::string library_path;   ///< the file dlopen found
    std::string load_error;     ///< dlerror() or the missing symbol, when !loaded
    int version = 0;            ///< ncclGetVersion: major*10000 + minor*100 + patch (2.9+)
};

/// Loads `library` (a soname or a path). Each call dlopens again (the handle stays loaded); the
/// process-wide instance is nccl().
nccl_state load_nccl(const std::string& library, nccl_api& api);

/// NCCL as the process finds it ("libnccl.so.2" on the loader's search path), loaded once,
/// thread-safe. `api` is valid when state.loaded.
struct nccl_library {
    nccl_state state;
    nccl_api api{};
};
const nccl_library& nccl();
/// The same for `library` (a soname or a path): loaded once per distinct name and kept for the
/// process's life (communicators made with it may outlive any caller). Thread-safe.
const nccl_library& nccl(const std::string& library);

}  // namespace ferry::shim
