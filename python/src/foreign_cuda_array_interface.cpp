// Python objects as memory through the CUDA array interface (CuPy, Numba, PyTorch).
#include <Python.h>

#include <nanobind/stl/string.h>

#include <cstdint>
#include <string>
#include <vector>

#include "ferry/error.hpp"
#include "foreign.hpp"

namespace ferry::python {

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

}  // namespace ferry::python
