// Python objects as memory through the buffer protocol (numpy, bytearray, mmap).
#include <Python.h>

#include <memory>
#include <optional>
#include <string>

#include "ferry/error.hpp"
#include "foreign.hpp"

namespace ferry::python {

namespace {

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

}  // namespace

foreign_memory from_buffer(nb::handle obj, bool writable) {
    auto hb = std::make_unique<held_buffer>();
    // Asked for without PyBUF_WRITABLE and checked below: a read-only exporter then gets
    // ferry's error, not the exporter's own BufferError text.
    int flags = PyBUF_STRIDES;
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
    if (writable && v.readonly)
        throw usage_error("cannot read into read-only memory (a " +
                          std::string(nb::type_name(obj.type()).c_str()) + " buffer)");
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

}  // namespace ferry::python
