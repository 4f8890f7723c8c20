// What every loader (npy, safetensors, raw) does with the bytes once they land.
#pragma once

#include "ferry/export.hpp"

#include <optional>

#include "ferry/array.hpp"
#include "ferry/dtype.hpp"
#include "ferry/integrity.hpp"
#include "ferry/memory.hpp"

namespace ferry {

/// Options shared by load_npy, load_safetensors and fromfile.
struct FERRY_EXPORT load_options {
    /// Where the arrays go. For a GPU the payload is read straight into device memory and
    /// deserialized there by kernels; the CPU never touches it.
    placement where = placement::host();
    /// Convert floating-point arrays to this dtype after loading (float16, bfloat16, float64
    /// <-> float32). Integer, boolean and complex arrays are left as they are. A floating
    /// dtype with no conversion to `as` (e.g. float8 -> float32) is an error for .npy and raw
    /// files; in a safetensors load such tensors are left as they are.
    std::optional<dtype> as;
    /// Keep the file's byte order instead of converting to native (ignored when `as` converts).
    bool keep_byte_order = false;
    /// Return Fortran-order arrays in C order (a transpose, on the GPU for device arrays);
    /// otherwise they stay Fortran-strided, without a copy.
    bool c_order = false;
    /// The stream kernels run on; loaders synchronize it before returning.
    stream_t stream = nullptr;
    /// safetensors: check the CRC-32C checksums the file records (ferry/integrity.hpp), on the
    /// GPU for a GPU load; a mismatch throws integrity_error and returns no tensor.
    verify_mode verify = verify_mode::automatic;
};

}  // namespace ferry
