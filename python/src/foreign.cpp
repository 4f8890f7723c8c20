// Python objects as memory: the buffer protocol (numpy, bytearray, mmap), DLPack (CuPy,
// PyTorch, JAX, numpy), the CUDA array interface (CuPy, Numba, PyTorch) and ferry.Array.
#include <Python.h>

#include <nanobind/stl/string.h>

#include <cstdint>
#include <cstring>
#include <string>

#include "bind.hpp"
#include "ferry/dlpack.hpp"
#include "ferry/error.hpp"

namespace ferry::python {

namespace {

bool interpreter_alive() {
#if PY_VERSION_HEX >= 0x030D0000
    return Py_IsInitialized() && !Py_IsFinalizing();
#else
    return Py_IsInitialized() && !_Py_IsFinalizing();
#endif
}

// A Py_buffer must be released with the GIL held, by whichever thread drops the last array.
struct held_buffer {
    Py_buffer view{};
    bool acquired = false;
};

std::shared_ptr<const void> hold_buffer(std::unique_ptr<held_buffer> b) {
    return std::shared_ptr<const void>(b.release(), [](const void* p) {
        auto* hb = static_cast<held_buffer*>(const_cast<void*>(p));
        if (hb->acquired && interpreter_alive()) {
            PyGILState_STATE st = PyGILState_Ensure();
            PyBuffer_Release(&hb->view);
            PyGILState_Release(st);
        }
        delete hb;
    });
}

std::vector<std::int64_t> c_strides(const std::vector<std::int64_t>& shape) {
    std::vector<std::int64_t> s(shape.size());
    std::int64_t step = 1;
    for (std::size_t i = shape.size(); i-- > 0;) {
        s[i] = step;
        step *= shape[i];
    }
    return s;
}

std::vector<std::int64_t> f_strides(const std::vector<std::int64_t>& shape) {
    std::vector<std::int64_t> s(shape.size());
    std::int64_t step = 1;
    for (std::size_t i = 0; i < shape.size(); ++i) {
        s[i] = step;
        step *= shape[i];
    }
    return s;
}

// Strides of a dimension of extent 1 (or of an empty array) say nothing about the layout.
bool same_layout(const std::vector<std::int64_t>& shape, const std::int64_t* strides,
                 const std::vector<std::int64_t>& want) {
    for (std::size_t i = 0; i < shape.size(); ++i) {
        if (shape[i] == 0) return true;
    }
    for (std::size_t i = 0; i < shape.size(); ++i) {
        if (shape[i] > 1 && strides[i] != want[i]) return false;
    }
    return true;
}

storage_order layout_from_strides(const std::vector<std::int64_t>& shape, const std::int64_t* strides,
                                  std::int64_t unit) {
    if (!strides) return storage_order::c;
    std::vector<std::int64_t> c = c_strides(shape), f = f_strides(shape);
    for (auto& v : c) v *= unit;
    for (auto& v : f) v *= unit;
    if (same_layout(shape, strides, c)) return storage_order::c;
    if (same_layout(shape, strides, f)) return storage_order::fortran;
    throw usage_error("ferry needs contiguous memory (C or Fortran order); this array is strided: "
                      "make a contiguous copy first");
}

// struct-module format codes (PEP 3118) that map onto ferry dtypes.
std::optional<typed_order> type_from_format(const char* format, Py_ssize_t itemsize) {
    if (!format) return typed_order{dtype::uint8, native_byte_order};
    byte_order order = native_byte_order;
    while (*format == '@' || *format == '=' || *format == '<' || *format == '>' || *format == '!') {
        if (*format == '<') order = byte_order::little;
        if (*format == '>' || *format == '!') order = byte_order::big;
        ++format;
    }
    std::string f = format;
    auto sized_int = [&](bool is_signed) -> std::optional<dtype> {
        switch (itemsize) {
            case 1: return is_signed ? dtype::int8 : dtype::uint8;
            case 2: return is_signed ? dtype::int16 : dtype::uint16;
            case 4: return is_signed ? dtype::int32 : dtype::uint32;
            case 8: return is_signed ? dtype::int64 : dtype::uint64;
        }
        return std::nullopt;
    };
    std::optional<dtype> t;
    if (f == "?") t = dtype::bool_;
    else if (f == "b") t = dtype::int8;
    else if (f == "B" || f == "c") t = dtype::uint8;
    else if (f == "h" || f == "i" || f == "l" || f == "q" || f == "n") t = sized_int(true);
    else if (f == "H" || f == "I" || f == "L" || f == "Q" || f == "N") t = sized_int(false);
    else if (f == "e") t = dtype::float16;
    else if (f == "f") t = dtype::float32;
    else if (f == "d") t = dtype::float64;
    else if (f == "Zf") t = dtype::complex64;
    else if (f == "Zd") t = dtype::complex128;
    if (!t || static_cast<Py_ssize_t>(size_of(*t)) != itemsize) return std::nullopt;
    return typed_order{*t, order};
}

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

std::size_t product_bytes(const std::vector<std::int64_t>& shape, std::size_t itemsize) {
    std::size_t n = itemsize;
    for (auto d : shape) n *= static_cast<std::size_t>(d);
    return n;
}

placement placement_of(void* data, memory_kind fallback, int device) {
    if (!data) return {fallback, device};
    memory_kind k = memory_kind_of(data);
    return {k, (k == memory_kind::device || k == memory_kind::managed) ? device : 0};
}

foreign_memory from_buffer(nb::handle obj, bool writable) {
    auto hb = std::make_unique<held_buffer>();
    int flags = PyBUF_STRIDES | (writable ? PyBUF_WRITABLE : 0);
    bool with_format = true;
    if (PyObject_GetBuffer(obj.ptr(), &hb->view, flags | PyBUF_FORMAT) != 0) {
        // Element types without a struct code (ml_dtypes' bfloat16) refuse a format but still
        // lend their bytes; the caller then names the type.
        PyErr_Clear();
        with_format = false;
        if (PyObject_GetBuffer(obj.ptr(), &hb->view, flags) != 0) throw nb::python_error();
    }
    hb->acquired = true;
    const Py_buffer& v = hb->view;
    foreign_memory m;
    m.data = v.buf;
    m.nbytes = static_cast<std::size_t>(v.len);
    m.readonly = v.readonly != 0;
    for (int i = 0; i < v.ndim; ++i) m.shape.push_back(v.shape ? v.shape[i] : 0);
    if (v.ndim == 0 && v.itemsize > 0 && v.len != v.itemsize) m.shape.push_back(v.len / v.itemsize);
    if (PyBuffer_IsContiguous(&v, 'C')) m.layout = storage_order::c;
    else if (PyBuffer_IsContiguous(&v, 'F')) m.layout = storage_order::fortran;
    else
        throw usage_error("ferry needs contiguous memory (C or Fortran order); this buffer is "
                          "strided: make a contiguous copy first");
    if (with_format) m.type = type_from_format(v.format, v.itemsize);
    m.where = placement_of(m.data, memory_kind::host, 0);
    m.owner = hold_buffer(std::move(hb));
    return m;
}

foreign_memory from_dlpack(nb::handle obj, bool writable) {
    using namespace nb::literals;
    nb::object dev = obj.attr("__dlpack_device__")();
    int dev_type = nb::cast<int>(dev[0]);
    int dev_id = nb::cast<int>(dev[1]);
    bool on_gpu = dev_type == dlpack::kDLCUDA || dev_type == dlpack::kDLCUDAManaged;
    // For a GPU producer, stream 1 (CUDA's legacy default stream) asks it to make its pending
    // work on the memory visible there; ferry then orders its access on that stream.
    nb::object stream_arg = on_gpu ? nb::object(nb::int_(1)) : nb::none();
    nb::object cap;
    try {
        cap = obj.attr("__dlpack__")("stream"_a = stream_arg, "max_version"_a = nb::make_tuple(1, 1));
    } catch (nb::python_error& e) {
        if (!e.matches(PyExc_TypeError)) throw;
        cap = obj.attr("__dlpack__")("stream"_a = stream_arg);
    }
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
        throw nb::type_error("__dlpack__ returned something that is not a DLPack capsule");
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
    switch (dev_type) {
        case dlpack::kDLCPU: m.where = placement_of(m.data, memory_kind::host, 0); break;
        case dlpack::kDLCUDAHost: m.where = placement::pinned(); break;
        case dlpack::kDLCUDA: m.where = placement::cuda(dev_id); break;
        case dlpack::kDLCUDAManaged: m.where = {memory_kind::managed, dev_id}; break;
        default:
            throw nb::type_error(("ferry cannot reach memory on DLPack device type " +
                                  std::to_string(dev_type)).c_str());
    }
    if (on_gpu) m.stream = nullptr;
    m.owner = hold_python(std::move(cap));
    return m;
}

foreign_memory from_cuda_array_interface(nb::handle obj, bool writable) {
    nb::dict cai = nb::cast<nb::dict>(obj.attr("__cuda_array_interface__"));
    nb::tuple data = nb::cast<nb::tuple>(cai["data"]);
    foreign_memory m;
    m.data = reinterpret_cast<void*>(nb::cast<std::uintptr_t>(data[0]));
    m.readonly = nb::cast<bool>(data[1]);
    if (writable && m.readonly) throw usage_error("cannot read into read-only memory (CUDA array interface)");
    for (nb::handle d : nb::cast<nb::tuple>(cai["shape"])) m.shape.push_back(nb::cast<std::int64_t>(d));
    std::string typestr = nb::cast<std::string>(cai["typestr"]);
    m.type = parse_numpy_descr(typestr);
    std::size_t itemsize = 1;
    if (m.type) {
        itemsize = size_of(m.type->type);
    } else {
        std::size_t i = typestr.find_first_of("0123456789");
        if (i != std::string::npos) itemsize = std::stoul(typestr.substr(i));
    }
    std::vector<std::int64_t> strides;
    if (cai.contains("strides") && !cai["strides"].is_none()) {
        for (nb::handle s : nb::cast<nb::tuple>(cai["strides"])) strides.push_back(nb::cast<std::int64_t>(s));
    }
    m.layout = layout_from_strides(m.shape, strides.empty() ? nullptr : strides.data(),
                                   static_cast<std::int64_t>(itemsize));
    m.nbytes = product_bytes(m.shape, itemsize);
    // The interface does not name the device; the pointer's kind is found through CUDA.
    m.where = placement_of(m.data, memory_kind::device, 0);
    if (cai.contains("stream") && !cai["stream"].is_none()) {
        std::uintptr_t s = nb::cast<std::uintptr_t>(cai["stream"]);
        // 1 is the legacy default stream (nullptr to the runtime); 2 the per-thread one.
        m.stream = s == 1 ? nullptr : reinterpret_cast<stream_t>(s);
    }
    m.owner = hold_python(nb::borrow(obj));
    return m;
}

}  // namespace

std::shared_ptr<const void> hold_python(nb::object o) {
    PyObject* p = o.release().ptr();
    return std::shared_ptr<const void>(p, [](const void* q) {
        if (!q || !interpreter_alive()) return;  // at exit: leak rather than touch a dying interpreter
        PyGILState_STATE st = PyGILState_Ensure();
        Py_DECREF(static_cast<PyObject*>(const_cast<void*>(q)));
        PyGILState_Release(st);
    });
}

foreign_memory import_memory(nb::handle obj, bool writable) {
    if (nb::isinstance<array>(obj)) {
        const array& a = nb::cast<const array&>(obj);
        foreign_memory m;
        m.data = a.data();
        m.nbytes = a.nbytes();
        m.type = typed_order{a.type(), a.endian()};
        m.shape = a.shape();
        m.layout = a.layout();
        m.where = a.where();
        m.owner = a.owner();
        return m;
    }
    bool has_dlpack = nb::hasattr(obj, "__dlpack__") && nb::hasattr(obj, "__dlpack_device__");
    bool has_cai = nb::hasattr(obj, "__cuda_array_interface__");
    // GPU arrays may offer the buffer protocol only to refuse it (CuPy raises TypeError from
    // its buffer hook): then their own protocols below apply.
    if (PyObject_CheckBuffer(obj.ptr())) {
        try {
            return from_buffer(obj, writable);
        } catch (nb::python_error&) {
            if (!has_dlpack && !has_cai) throw;
        }
    }
    // DLPack names the device and every dtype (bfloat16, float8), so it goes first.
    if (has_dlpack) {
        try {
            return from_dlpack(obj, writable);
        } catch (nb::python_error& e) {
            if (!has_cai || !e.matches(PyExc_BufferError)) throw;
        }
    }
    if (has_cai) return from_cuda_array_interface(obj, writable);
    throw nb::type_error(("ferry cannot reach the memory of a " +
                          std::string(nb::type_name(obj.type()).c_str()) +
                          ": expected a buffer (numpy array, bytearray), an object with "
                          "__dlpack__ or __cuda_array_interface__, or a ferry.Array").c_str());
}

array as_array(const foreign_memory& m, std::optional<typed_order> type) {
    std::optional<typed_order> t = type ? type : m.type;
    if (!t) throw usage_error("ferry does not know this array's element type");
    std::vector<std::int64_t> shape = m.shape;
    // A buffer may describe its elements with a different type than the caller asks for (a
    // numpy bfloat16 array exposes no format ferry knows): then treat it as a flat array.
    if (product_bytes(shape, size_of(t->type)) != m.nbytes) {
        if (m.nbytes % size_of(t->type) != 0)
            throw usage_error("the array's byte size is not a multiple of the element size");
        shape = {static_cast<std::int64_t>(m.nbytes / size_of(t->type))};
    }
    return array(m.owner, m.data, t->type, shape, m.where, m.layout, t->order);
}

void wait_for_producer(const foreign_memory& m) {
    if (!m.stream || !m.where.on_gpu() || m.nbytes == 0) return;
    // A synchronous copy on the legacy default stream waits for all work queued there,
    // which is where the producer was asked to make its pending work visible.
    unsigned char byte;
    copy_memory(&byte, m.data, 1);
}

std::string device_string(const placement& p) {
    switch (p.kind) {
        case memory_kind::host: return "cpu";
        case memory_kind::pinned: return "pinned";
        case memory_kind::device: return "cuda:" + std::to_string(p.device);
        case memory_kind::managed: return "managed:" + std::to_string(p.device);
    }
    return "cpu";
}

}  // namespace ferry::python
