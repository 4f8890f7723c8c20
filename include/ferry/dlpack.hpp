// The DLPack exchange ABI (version 1.1), declared from the DLPack specification so that ferry's
// public headers need no third-party header. The layouts and enumerator values are the ABI: they
// must match every other DLPack producer and consumer bit for bit. The names live in
// ferry::dlpack, so they cannot collide with a dlpack.h a user includes; the structs are
// layout-compatible and may be reinterpret_cast to the user's DLManagedTensor(Versioned).
#pragma once

#include <cstdint>

namespace ferry::dlpack {

inline constexpr std::uint32_t major_version = 1;
inline constexpr std::uint32_t minor_version = 1;

/// DLManagedTensorVersioned::flags bits.
inline constexpr std::uint64_t flag_read_only = 1ULL << 0;
inline constexpr std::uint64_t flag_is_copied = 1ULL << 1;

extern "C" {

struct DLPackVersion {
    std::uint32_t major;
    std::uint32_t minor;
};

enum DLDeviceType : std::int32_t {
    kDLCPU = 1,
    kDLCUDA = 2,
    kDLCUDAHost = 3,
    kDLCUDAManaged = 13,
};

struct DLDevice {
    DLDeviceType device_type;
    std::int32_t device_id;
};

enum DLDataTypeCode : std::uint8_t {
    kDLInt = 0,
    kDLUInt = 1,
    kDLFloat = 2,
    kDLOpaqueHandle = 3,
    kDLBfloat = 4,
    kDLComplex = 5,
    kDLBool = 6,
    kDLFloat8_e4m3fn = 10,
    kDLFloat8_e5m2 = 12,
};

struct DLDataType {
    std::uint8_t code;
    std::uint8_t bits;
    std::uint16_t lanes;
};

struct DLTensor {
    void* data;
    DLDevice device;
    std::int32_t ndim;
    DLDataType dtype;
    std::int64_t* shape;
    std::int64_t* strides;  ///< in elements; may be null for a compact C-order tensor
    std::uint64_t byte_offset;
};

/// The unversioned (DLPack 0.x) managed tensor, still what many consumers take.
struct DLManagedTensor {
    DLTensor dl_tensor;
    void* manager_ctx;
    void (*deleter)(DLManagedTensor* self);
};

/// The versioned managed tensor (DLPack >= 1.0).
struct DLManagedTensorVersioned {
    DLPackVersion version;
    void* manager_ctx;
    void (*deleter)(DLManagedTensorVersioned* self);
    std::uint64_t flags;
    DLTensor dl_tensor;
};

}  // extern "C"

}  // namespace ferry::dlpack
