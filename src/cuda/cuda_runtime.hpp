// The boundary between ferry and the CUDA runtime (linked statically): availability, error
// conversion and the few helpers the engine needs. Code outside src/ never sees cudart.
#pragma once

#include <cuda_runtime_api.h>

#include <string>

#include "ferry/error.hpp"
#include "ferry/memory.hpp"

namespace ferry::detail {

/// True when a driver and at least one device are usable. Cached; never throws.
bool cuda_available();

/// Throws cuda_error (with cudaGetErrorString) unless `e` is cudaSuccess.
void cuda_check(cudaError_t e, const char* what, const io_context& where = {});

/// Device of a device or managed pointer (cudaPointerGetAttributes).
int device_of(const void* p);

/// Makes `device` current on this thread (cheap when it already is).
void set_device(int device);

}  // namespace ferry::detail
