// ferry.Array: a ferry::array seen from Python. It exports its memory zero-copy through DLPack
// (__dlpack__, __dlpack_device__) and, on a GPU, the CUDA array interface, so CuPy, PyTorch,
// JAX and numpy take it without a copy.
#include <Python.h>

#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/vector.h>

#include <string>

#include "bind.hpp"
#include "ferry/convert.hpp"
#include "ferry/dlpack.hpp"
#include "ferry/error.hpp"

namespace ferry::python {

nb::object shape_tuple(const std::vector<std::int64_t>& shape) {
    nb::object t = nb::steal(PyTuple_New(static_cast<Py_ssize_t>(shape.size())));
    for (std::size_t i = 0; i < shape.size(); ++i)
        if (PyTuple_SetItem(t.ptr(), static_cast<Py_ssize_t>(i), PyLong_FromLongLong(shape[i])) != 0)
            throw nb::python_error();
    return t;
}

namespace {

using namespace nb::literals;

void dltensor_capsule_destructor(PyObject* cap);

}  // namespace

nb::object dlpack_capsule(const array& a) {
    dlpack::DLManagedTensor* t = a.to_dlpack();
    PyObject* cap = PyCapsule_New(t, "dltensor", dltensor_capsule_destructor);
    if (!cap) {
        t->deleter(t);
        throw nb::python_error();
    }
    return nb::steal(cap);
}

namespace {

// DLPack's rule: the capsule's destructor frees the tensor only if no consumer took it (a
// consumer renames the capsule to "used_dltensor" and calls the deleter itself).
void dltensor_capsule_destructor(PyObject* cap) {
    if (PyCapsule_IsValid(cap, "dltensor")) {
        auto* t = static_cast<dlpack::DLManagedTensor*>(PyCapsule_GetPointer(cap, "dltensor"));
        if (t && t->deleter) t->deleter(t);
    }
}

void dltensor_versioned_capsule_destructor(PyObject* cap) {
    if (PyCapsule_IsValid(cap, "dltensor_versioned")) {
        auto* t = static_cast<dlpack::DLManagedTensorVersioned*>(
            PyCapsule_GetPointer(cap, "dltensor_versioned"));
        if (t && t->deleter) t->deleter(t);
    }
}

std::pair<int, int> dlpack_device(const array& a) {
    switch (a.where().kind) {
        case memory_kind::host: return {dlpack::kDLCPU, 0};
        case memory_kind::pinned: return {dlpack::kDLCUDAHost, 0};
        case memory_kind::device: return {dlpack::kDLCUDA, a.where().device};
        case memory_kind::managed: return {dlpack::kDLCUDAManaged, a.where().device};
    }
    return {dlpack::kDLCPU, 0};
}

// numpy's type string for the CUDA array interface; bfloat16 and float8 have none.
std::string typestr(const array& a) {
    if (!has_numpy_descr(a.type()))
        throw nb::attribute_error((std::string(to_string(a.type())) +
                                   " has no CUDA array interface type string; use DLPack").c_str());
    return numpy_descr(a.type(), a.endian());
}

nb::object dlpack_export(const array& self, nb::object stream, nb::object max_version,
                         nb::object dl_device, nb::object copy) {
    (void)stream;  // ferry's arrays are complete when they reach Python: no stream to wait on
    array a = self;
    bool copied = false;
    if (!dl_device.is_none()) {
        auto want = nb::cast<std::pair<int, int>>(dl_device);
        if (want != dlpack_device(self)) {
            if (!copy.is_none() && !nb::cast<bool>(copy))
                throw nb::buffer_error("the requested DLPack device differs and copy=False");
            if (want.first == dlpack::kDLCPU) {
                nb::gil_scoped_release nogil;
                a = self.copy_to(placement::host());
            } else if (want.first == dlpack::kDLCUDA) {
                nb::gil_scoped_release nogil;
                a = self.copy_to(placement::cuda(want.second));
            } else {
                throw nb::buffer_error("ferry cannot export to that DLPack device");
            }
            copied = true;
        }
    }
    if (!copied && !copy.is_none() && nb::cast<bool>(copy)) {
        nb::gil_scoped_release nogil;
        a = self.clone();
        copied = true;
    }
    if (!a.is_native())
        throw nb::buffer_error("DLPack has no byte order: convert the array to native byte order "
                               "first (ferry returns native arrays unless asked to keep the file's)");
    bool versioned = false;
    if (!max_version.is_none()) versioned = nb::cast<int>(max_version[0]) >= 1;
    PyObject* cap = nullptr;
    if (versioned) {
        dlpack::DLManagedTensorVersioned* t = a.to_dlpack_versioned();
        if (copied) t->flags |= dlpack::flag_is_copied;
        cap = PyCapsule_New(t, "dltensor_versioned", dltensor_versioned_capsule_destructor);
        if (!cap) {
            t->deleter(t);
            throw nb::python_error();
        }
    } else {
        return dlpack_capsule(a);
    }
    return nb::steal(cap);
}

nb::dict cuda_array_interface(const array& a) {
    if (!a.where().on_gpu())
        throw nb::attribute_error("__cuda_array_interface__: this ferry.Array is in host memory");
    nb::dict d;
    d["shape"] = shape_tuple(a.shape());
    d["typestr"] = typestr(a);
    d["data"] = nb::make_tuple(reinterpret_cast<std::uintptr_t>(a.data()), a.read_only());
    d["version"] = 3;
    if (a.layout() == storage_order::c || a.is_c_and_fortran()) {
        d["strides"] = nb::none();
    } else {
        nb::list s;
        for (auto v : a.strides()) s.append(v * static_cast<std::int64_t>(a.itemsize()));
        d["strides"] = nb::tuple(s);
    }
    d["stream"] = nb::none();  // the elements are complete: nothing to wait for
    return d;
}

// The bytes of a host array as a 1-d uint8 numpy array sharing its memory; the Python layer
// views them with the right dtype, byte order and shape.
nb::object host_bytes(const array& a) {
    if (a.where().on_gpu())
        throw usage_error("the array is in GPU memory: copy it to the host first (to_device('cpu'))");
    auto* keep = new array(a);
    nb::capsule owner(keep, [](void* p) noexcept { delete static_cast<array*>(p); });
    std::size_t n = a.nbytes();
    if (a.read_only()) {  // numpy's view stays read-only too
        nb::ndarray<nb::numpy, const std::uint8_t, nb::ndim<1>> bytes(a.data(), {n}, owner);
        return nb::cast(bytes, nb::rv_policy::reference);
    }
    nb::ndarray<nb::numpy, std::uint8_t, nb::ndim<1>> bytes(a.data(), {n}, owner);
    return nb::cast(bytes, nb::rv_policy::reference);
}

std::string repr(const array& a) {
    std::string r = "ferry.Array(shape=" + shape_to_string(a.shape()) + ", dtype=" +
                    std::string(to_string(a.type()));
    if (!a.is_native()) r += ", byteorder=" + std::string(to_string(a.endian()));
    if (a.layout() == storage_order::fortran && !a.is_c_and_fortran()) r += ", order=F";
    return r + ", device=" + device_string(a.where()) + ")";
}

}  // namespace

void bind_array(nb::module_& m) {
    nb::class_<array>(m, "Array",
                      "An array in host, pinned or GPU memory, made by ferry.\n\n"
                      "It exports its memory without a copy through DLPack (``__dlpack__``) and,\n"
                      "on a GPU, the CUDA array interface, so ``cupy.from_dlpack(a)``,\n"
                      "``torch.from_dlpack(a)`` and ``jax.dlpack.from_dlpack(a)`` share it.")
        .def_prop_ro("shape", [](const array& a) { return shape_tuple(a.shape()); })
        .def_prop_ro("ndim", [](const array& a) { return a.ndim(); })
        .def_prop_ro("size", [](const array& a) { return a.size(); })
        .def_prop_ro("nbytes", [](const array& a) { return a.nbytes(); })
        .def_prop_ro("itemsize", [](const array& a) { return a.itemsize(); })
        .def_prop_ro("dtype", [](const array& a) { return std::string(to_string(a.type())); },
                     "The element type's numpy name: 'float32', 'bfloat16', ...")
        .def_prop_ro("byteorder",
                     [](const array& a) {
                         if (size_of(a.type()) == 1) return std::string("|");
                         return std::string(a.endian() == byte_order::little ? "<" : ">");
                     },
                     "'<' little-endian, '>' big-endian, '|' single-byte elements.")
        .def_prop_ro("order",
                     [](const array& a) {
                         return std::string(a.layout() == storage_order::c ? "C" : "F");
                     },
                     "'C' (row-major) or 'F' (column-major).")
        .def_prop_ro("device", [](const array& a) { return device_string(a.where()); },
                     "'cpu', 'pinned', 'cuda:N' or 'managed:N'.")
        .def_prop_ro("data_ptr", [](const array& a) { return reinterpret_cast<std::uintptr_t>(a.data()); })
        .def_prop_ro("readonly", [](const array& a) { return a.read_only(); },
                     "True when the array views memory lent read-only (a read-only numpy array,\n"
                     "a DLPack or CUDA array interface export marked read-only): ferry writes\n"
                     "nothing into it (out=, into=, File.read refuse it), and its own exports\n"
                     "say read-only.")
        .def("__len__",
             [](const array& a) {
                 if (a.ndim() == 0) throw nb::type_error("len() of a 0-d array");
                 return a.shape()[0];
             })
        .def("__repr__", &repr)
        .def("__dlpack__", &dlpack_export, nb::kw_only(), "stream"_a = nb::none(),
             "max_version"_a = nb::none(), "dl_device"_a = nb::none(), "copy"_a = nb::none(),
             "Exports the array through DLPack (a capsule), without a copy unless a copy is\n"
             "asked for or another device is requested.")
        .def("__dlpack_device__", &dlpack_device)
        .def_prop_ro("__cuda_array_interface__", &cuda_array_interface)
        .def("_host_bytes", &host_bytes)
        .def(
            "to_device",
            [](const array& a, const std::string& device) {
                placement p = parse_placement(device);
                nb::gil_scoped_release nogil;
                return a.copy_to(p);
            },
            "device"_a, "A copy at `device` ('cpu', 'pinned', 'cuda', 'cuda:N').")
        .def(
            "to_native",
            [](const array& a) {
                nb::gil_scoped_release nogil;
                return to_native(a);
            },
            "The elements in this machine's byte order (the array itself when they already are).")
        .def(
            "to_c_order",
            [](const array& a) {
                nb::gil_scoped_release nogil;
                return to_c_order(a);
            },
            "The array in C order (itself when it already is).")
        .def(
            "astype",
            [](const array& a, const std::string& type) {
                dtype t = parse_dtype(type).type;
                nb::gil_scoped_release nogil;
                return ferry::astype(a, t);
            },
            "dtype"_a,
            "A converted copy: float16, bfloat16 and float64 to and from float32 (the array\n"
            "itself when nothing changes).");

    m.def(
        "as_array",
        [](nb::handle obj, std::optional<std::string> type, bool writable) {
            foreign_memory mem = import_memory(obj, writable);
            std::optional<typed_order> t;
            if (type) t = parse_dtype(*type);
            array a = as_array(mem, t);
            nb::gil_scoped_release nogil;
            wait_for_producer(mem);
            return a;
        },
        "obj"_a, "dtype"_a = nb::none(), "writable"_a = false,
        "A ferry.Array viewing the memory of `obj` (no copy); `obj` stays alive as long as the\n"
        "view. `dtype` (a numpy name or type string such as '>f4') overrides the element type.\n"
        "`writable`: the view will be written (read-only memory is refused); otherwise a view\n"
        "of read-only memory is a read-only ferry.Array.");

    m.def(
        "as_arrays",
        [](nb::list objs, bool writable, bool producer_synced) {
            std::vector<foreign_memory> mems;
            std::vector<array> out;
            mems.reserve(nb::len(objs));
            out.reserve(nb::len(objs));
            for (nb::handle obj : objs) {
                mems.push_back(import_memory(obj, writable, producer_synced));
                out.push_back(as_array(mems.back()));
            }
            nb::gil_scoped_release nogil;
            wait_for_producers(mems);
            return out;
        },
        "objs"_a, "writable"_a = false, "producer_synced"_a = false,
        "as_array for many objects at once, waiting once per device for their producers' work\n"
        "instead of once per object. `writable`: the views will be written (read-only memory is\n"
        "refused). `producer_synced`: the caller already waited for the producers' GPU work\n"
        "(DLPack exports are asked for no stream work, and none is waited for).");
}

}  // namespace ferry::python
