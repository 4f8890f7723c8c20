// Python objects as memory: the buffer protocol (numpy, bytearray, mmap), DLPack (CuPy,
// PyTorch, JAX, numpy), the CUDA array interface (CuPy, Numba, PyTorch) and ferry.Array.
// This file chooses the protocol (import_memory) and holds what the protocols share; each
// protocol has its own file: foreign_buffer.cpp, foreign_dlpack.cpp,
// foreign_cuda_array_interface.cpp.
#include "foreign.hpp"

#include <Python.h>
#include <dlfcn.h>

#include <nanobind/stl/string.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>

#include "ferry/error.hpp"

namespace ferry::python {

namespace {

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

}  // namespace

bool interpreter_alive() {
#if defined(Py_LIMITED_API) && Py_LIMITED_API < 0x030D0000
    // The stable ABI gained Py_IsFinalizing in 3.13; a 3.12 interpreter exports it as
    // _Py_IsFinalizing. One module serves both (the abi3 wheel): ask the running interpreter.
    using is_finalizing_fn = int (*)();
    static const is_finalizing_fn is_finalizing = [] {
        void* f = dlsym(RTLD_DEFAULT, "Py_IsFinalizing");
        if (!f) f = dlsym(RTLD_DEFAULT, "_Py_IsFinalizing");
        return reinterpret_cast<is_finalizing_fn>(f);
    }();
    return Py_IsInitialized() && !(is_finalizing && is_finalizing());
#elif PY_VERSION_HEX >= 0x030D0000
    return Py_IsInitialized() && !Py_IsFinalizing();
#else
    return Py_IsInitialized() && !_Py_IsFinalizing();
#endif
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

std::shared_ptr<const void> hold_python(nb::object o) {
    PyObject* p = o.release().ptr();
    return std::shared_ptr<const void>(p, [](const void* q) {
        if (!q || !interpreter_alive()) return;  // at exit: leak rather than touch a dying interpreter
        PyGILState_STATE st = PyGILState_Ensure();
        Py_DECREF(static_cast<PyObject*>(const_cast<void*>(q)));
        PyGILState_Release(st);
    });
}

foreign_memory import_memory(nb::handle obj, bool writable, bool producer_synced) {
    if (nb::isinstance<array>(obj)) {
        const array& a = nb::cast<const array&>(obj);
        if (writable && a.read_only())
            throw usage_error("cannot read into read-only memory (a read-only ferry.Array)");
        foreign_memory m;
        m.readonly = a.read_only();
        m.data = a.data();
        m.nbytes = a.nbytes();
        m.type = typed_order{a.type(), a.endian()};
        m.shape = a.shape();
        m.layout = a.layout();
        m.where = a.where();
        m.owner = a.owner();
        return m;
    }
    // A capsule handed over by a caller that waited for its producer (ferry's own imports of
    // many PyTorch tensors: torch's __dlpack__ costs several microseconds a tensor in Python).
    if (PyCapsule_CheckExact(obj.ptr())) return from_dlpack_capsule(nb::borrow(obj), writable);
    bool has_dlpack = nb::hasattr(obj, "__dlpack__") && nb::hasattr(obj, "__dlpack_device__");
    // Asked only where needed: PyTorch builds the interface's whole dict to answer hasattr.
    auto has_cai = [&] { return nb::hasattr(obj, "__cuda_array_interface__"); };
    // GPU arrays may offer the buffer protocol only to refuse it (CuPy raises TypeError from
    // its buffer hook): then their own protocols below apply.
    if (PyObject_CheckBuffer(obj.ptr())) {
        try {
            return from_buffer(obj, writable);
        } catch (nb::python_error&) {
            if (!has_dlpack && !has_cai()) throw;
        }
    }
    // DLPack names the device and every dtype (bfloat16, float8), so it goes first.
    if (has_dlpack) {
        try {
            return from_dlpack(obj, writable, producer_synced);
        } catch (nb::python_error& e) {
            if (!e.matches(PyExc_BufferError) || !has_cai()) throw;
        }
    }
    if (has_cai()) return from_cuda_array_interface(obj, writable);
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
    array a(m.owner, m.data, t->type, shape, m.where, m.layout, t->order);
    return m.readonly ? a.as_read_only() : a;
}

void wait_for_producer(const foreign_memory& m) {
    if (!m.stream || !m.where.on_gpu() || m.nbytes == 0) return;
    // A synchronous copy on the legacy default stream waits for all work queued there,
    // which is where the producer was asked to make its pending work visible.
    unsigned char byte;
    copy_memory(&byte, m.data, 1);
}

void wait_for_producers(const std::vector<foreign_memory>& ms) {
    std::vector<int> waited;
    for (const foreign_memory& m : ms) {
        if (!m.stream || !m.where.on_gpu() || m.nbytes == 0) continue;
        if (std::find(waited.begin(), waited.end(), m.where.device) != waited.end()) continue;
        waited.push_back(m.where.device);
        wait_for_producer(m);
    }
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
