// Python objects as memory through DLPack (CuPy, PyTorch, JAX, numpy).
#include <Python.h>

#include <nanobind/stl/string.h>

#include <optional>
#include <string>

#include "ferry/dlpack.hpp"
#include "ferry/error.hpp"
#include "foreign.hpp"

namespace ferry::python {

namespace {

std::optional<dtype> type_from_dlpack(const dlpack::DLDataType& t) {
    if (t.lanes != 1) return std::nullopt;
    switch (t.code) {
        case dlpack::kDLInt:
            switch (t.bits) {
                case 8: return dtype::int8;
                case 16: return dtype::int16;
                case 32: return dtype::int32;
                case 64: return dtype::int64;
            }
            break;
        case dlpack::kDLUInt:
            switch (t.bits) {
                case 8: return dtype::uint8;
                case 16: return dtype::uint16;
                case 32: return dtype::uint32;
                case 64: return dtype::uint64;
            }
            break;
        case dlpack::kDLFloat:
            switch (t.bits) {
                case 16: return dtype::float16;
                case 32: return dtype::float32;
                case 64: return dtype::float64;
            }
            break;
        case dlpack::kDLBfloat:
            if (t.bits == 16) return dtype::bfloat16;
            break;
        case dlpack::kDLComplex:
            if (t.bits == 64) return dtype::complex64;
            if (t.bits == 128) return dtype::complex128;
            break;
        case dlpack::kDLBool:
            if (t.bits == 8) return dtype::bool_;
            break;
        case dlpack::kDLFloat8_e4m3fn:
            if (t.bits == 8) return dtype::float8_e4m3fn;
            break;
        case dlpack::kDLFloat8_e5m2:
            if (t.bits == 8) return dtype::float8_e5m2;
            break;
    }
    return std::nullopt;
}

}  // namespace

foreign_memory from_dlpack(nb::handle obj, bool writable, bool producer_synced) {
    using namespace nb::literals;
    nb::object dev = obj.attr("__dlpack_device__")();
    int dev_type = nb::cast<int>(dev[0]);
    bool on_gpu = dev_type == dlpack::kDLCUDA || dev_type == dlpack::kDLCUDAManaged;
    // For a GPU producer, stream 1 (CUDA's legacy default stream) asks it to make its pending
    // work on the memory visible there; ferry then orders its access on that stream.
    // Stream -1: the caller synchronized with the producer, which then does no stream work
    // (PyTorch's export builds stream and event objects for any other stream).
    nb::object stream_arg = on_gpu ? nb::object(nb::int_(producer_synced ? -1 : 1)) : nb::none();
    nb::object cap;
    try {
        cap = obj.attr("__dlpack__")("stream"_a = stream_arg, "max_version"_a = nb::make_tuple(1, 1));
    } catch (nb::python_error& e) {
        if (!e.matches(PyExc_TypeError)) throw;
        cap = obj.attr("__dlpack__")("stream"_a = stream_arg);
    }
    foreign_memory m = from_dlpack_capsule(std::move(cap), writable);
    if (on_gpu && !producer_synced) m.stream = nullptr;
    return m;
}

foreign_memory from_dlpack_capsule(nb::object cap, bool writable) {
    const dlpack::DLTensor* t = nullptr;
    bool readonly = false;
    if (PyCapsule_IsValid(cap.ptr(), "dltensor_versioned")) {
        auto* mt = static_cast<dlpack::DLManagedTensorVersioned*>(
            PyCapsule_GetPointer(cap.ptr(), "dltensor_versioned"));
        t = &mt->dl_tensor;
        readonly = (mt->flags & dlpack::flag_read_only) != 0;
    } else if (PyCapsule_IsValid(cap.ptr(), "dltensor")) {
        t = &static_cast<dlpack::DLManagedTensor*>(PyCapsule_GetPointer(cap.ptr(), "dltensor"))->dl_tensor;
    } else {
        throw nb::type_error("not a DLPack capsule (or one already consumed)");
    }
    if (writable && readonly) throw usage_error("cannot read into read-only memory (DLPack flag)");
    foreign_memory m;
    m.data = static_cast<char*>(t->data) + t->byte_offset;
    m.readonly = readonly;
    m.shape.assign(t->shape, t->shape + t->ndim);
    std::optional<dtype> type = type_from_dlpack(t->dtype);
    std::size_t itemsize = type ? size_of(*type) : (t->dtype.bits * t->dtype.lanes + 7) / 8;
    if (type) m.type = typed_order{*type, native_byte_order};
    m.layout = layout_from_strides(m.shape, t->strides, 1);
    m.nbytes = product_bytes(m.shape, itemsize);
    const int dev_id = t->device.device_id;
    switch (t->device.device_type) {
        case dlpack::kDLCPU: m.where = placement_of(m.data, memory_kind::host, 0); break;
        case dlpack::kDLCUDAHost: m.where = placement::pinned(); break;
        case dlpack::kDLCUDA: m.where = placement::cuda(dev_id); break;
        case dlpack::kDLCUDAManaged: m.where = {memory_kind::managed, dev_id}; break;
        default:
            throw nb::type_error(("ferry cannot reach memory on DLPack device type " +
                                  std::to_string(static_cast<int>(t->device.device_type))).c_str());
    }
    m.owner = hold_python(std::move(cap));
    return m;
}

}  // namespace ferry::python
