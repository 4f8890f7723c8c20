// What the Python memory protocols share (python/src/foreign*.cpp): one function per protocol
// that turns an object into foreign_memory, and the helpers they use.
#pragma once

#include <Python.h>

#include <cstdint>
#include <vector>

#include "bind.hpp"

namespace ferry::python {

/// The buffer protocol (numpy, bytearray, mmap). Throws nb::python_error when refused.
foreign_memory from_buffer(nb::handle obj, bool writable);
/// DLPack (__dlpack__ and __dlpack_device__). `producer_synced`: the caller already waited for
/// the producer's GPU work, so it is asked for none (stream -1) and none is waited for.
foreign_memory from_dlpack(nb::handle obj, bool writable, bool producer_synced = false);
/// A DLPack capsule itself ("dltensor" or "dltensor_versioned", e.g. torch.utils.dlpack's
/// to_dlpack): its producer's work on the memory is the caller's to have waited for. The device
/// is the capsule's own. Throws nb::type_error for anything else.
foreign_memory from_dlpack_capsule(nb::object cap, bool writable);
/// The CUDA array interface (__cuda_array_interface__).
foreign_memory from_cuda_array_interface(nb::handle obj, bool writable);

/// False while (or after) the interpreter shuts down: then nothing may touch Python objects.
bool interpreter_alive();
/// C or Fortran order from element or byte strides (`unit` bytes per stride step); strided
/// memory is refused with usage_error. No strides: C order.
storage_order layout_from_strides(const std::vector<std::int64_t>& shape, const std::int64_t* strides,
                                  std::int64_t unit);
/// Bytes of a dense array of `shape` with elements of `itemsize`.
std::size_t product_bytes(const std::vector<std::int64_t>& shape, std::size_t itemsize);
/// Where `data` lives (asked of CUDA); `fallback` and `device` when data is null.
placement placement_of(void* data, memory_kind fallback, int device);

}  // namespace ferry::python
