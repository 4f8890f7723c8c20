// Many small files from Python (ferry/_many.py): ferry::read_whole_files reads and parses them
// on the library's threads, without the GIL, and here their arrays become numpy views of the
// blocks in one loop (host loads) or places in the blocks (GPU loads, viewed by the Python layer
// after the blocks' copies); then the arrays a GPU library cannot view as they lie (big-endian,
// Fortran order) are made native and C-ordered on the device in one batch.
#include <Python.h>

#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "bind.hpp"
#include "ferry/convert.hpp"
#include "ferry/many.hpp"

namespace ferry::python {

namespace {

using namespace nb::literals;

bool is_fortran(const whole_file_array& a) {
    if (a.layout != storage_order::fortran) return false;
    int big = 0;
    for (auto d : a.shape) big += d > 1;
    return big > 1;  // C and Fortran order coincide otherwise
}

/// numpy views of the arrays of every file read, each file's value as ferry.load gives it (an
/// array, or a dict by name for safetensors), in the file's byte order and layout as np.load
/// keeps them. `dtype_of(name, order)` gives the numpy dtype, None where numpy has none: such a
/// file, one that failed and one that needs ferry.load are left None and listed in `later`.
nb::tuple host_views(const whole_files& got, const nb::object& dtype_of) {
    nb::module_ np = nb::module_::import_("numpy");
    nb::object ndarray = np.attr("ndarray");
    nb::object empty = np.attr("empty");
    std::map<std::pair<dtype, byte_order>, nb::object> kinds;
    auto kind = [&](const typed_order& t) -> const nb::object& {
        auto key = std::make_pair(t.type, size_of(t.type) == 1 ? native_byte_order : t.order);
        auto it = kinds.find(key);
        if (it == kinds.end()) {
            const char order = key.second == byte_order::big ? '>' : '<';
            it = kinds.emplace(key, dtype_of(nb::str(std::string(to_string(t.type)).c_str()), nb::str(&order, 1))).first;
        }
        return it->second;
    };
    std::vector<nb::object> buffers(got.blocks.size());
    nb::list results;
    std::vector<std::size_t> later;
    nb::str order_f("F");
    nb::object kw_order = nb::make_tuple("order");
    for (std::size_t i = 0; i < got.files.size(); ++i) {
        const whole_file& f = got.files[i];
        bool ok = !f.error && !f.needs_load && (!f.arrays.empty() || f.format == file_format::safetensors);
        for (const auto& a : f.arrays)
            if (ok && kind(a.type).is_none()) ok = false;
        if (!ok) {
            results.append(nb::none());
            later.push_back(i);
            continue;
        }
        nb::object& buffer = buffers[f.block];
        if (!buffer.is_valid()) buffer = nb::cast(got.blocks[f.block]).attr("_host_bytes")();
        auto view = [&](const whole_file_array& a) -> nb::object {
            const nb::object& dt = kind(a.type);
            nb::object shape = shape_tuple(a.shape);
            if (a.nbytes == 0)
                return is_fortran(a) ? empty(shape, dt, "order"_a = order_f) : empty(shape, dt);
            nb::object offset = nb::steal(PyLong_FromUnsignedLongLong(a.offset));
            nb::object v;
            if (is_fortran(a)) {
                PyObject* args[] = {shape.ptr(), dt.ptr(), buffer.ptr(), offset.ptr(), order_f.ptr()};
                v = nb::steal(PyObject_Vectorcall(ndarray.ptr(), args, 4, kw_order.ptr()));
            } else {
                PyObject* args[] = {shape.ptr(), dt.ptr(), buffer.ptr(), offset.ptr()};
                v = nb::steal(PyObject_Vectorcall(ndarray.ptr(), args, 4, nullptr));
            }
            if (!v.is_valid()) throw nb::python_error();
            return v;
        };
        if (f.format == file_format::safetensors) {
            nb::dict d;
            for (const auto& a : f.arrays) d[nb::str(a.name.data(), a.name.size())] = view(a);
            results.append(d);
        } else {
            results.append(view(f.arrays.front()));
        }
    }
    return nb::make_tuple(results, later);
}

bool placeable(const whole_file& f) {
    return !f.error && !f.needs_load && (!f.arrays.empty() || f.format == file_format::safetensors);
}

/// Where the arrays of a file read lie, for a GPU load: None (a file for ferry.load) or
/// (block, [(name, dtype, byte order '<' or '>', fortran, shape, offset, nbytes), ...], is_dict).
nb::object place_of(const whole_file& f) {
    if (!placeable(f)) return nb::none();
    nb::list arrays;
    for (const auto& a : f.arrays) {
        const bool big = size_of(a.type.type) > 1 && a.type.order == byte_order::big;
        arrays.append(nb::make_tuple(nb::str(a.name.data(), a.name.size()), std::string(to_string(a.type.type)),
                                     big ? ">" : "<", is_fortran(a), shape_tuple(a.shape), a.offset, a.nbytes));
    }
    return nb::make_tuple(f.block, arrays, f.format == file_format::safetensors);
}

/// Per file of the list, its place_of (None for a file listed in `later`, which ferry.load
/// reads again or raises for). With `handed`, the places already went to on_block as each
/// block was complete, and the files that can be placed are None here and not in `later`.
nb::tuple places(const whole_files& got, bool handed) {
    nb::list results;
    std::vector<std::size_t> later;
    for (std::size_t i = 0; i < got.files.size(); ++i) {
        const whole_file& f = got.files[i];
        if (!placeable(f)) later.push_back(i);
        results.append(handed ? nb::none() : place_of(f));
    }
    return nb::make_tuple(results, later);
}

nb::tuple read_files(const std::vector<std::string>& paths, std::optional<std::string> raw_dtype,
                     std::optional<std::vector<std::int64_t>> raw_shape, unsigned threads, bool stop_at_failure,
                     nb::object dtype_of, nb::object allocate, nb::object on_block) {
    whole_files_options o;
    if (raw_dtype) o.raw_type = parse_dtype(*raw_dtype).type;
    o.raw_shape = std::move(raw_shape);
    o.threads = threads;
    o.stop_at_failure = stop_at_failure;
    if (!allocate.is_none()) {
        // Pinned memory from the caller's library for a GPU load: uint8, at least `bytes`.
        o.allocate = [&allocate](std::uint64_t bytes) {
            nb::gil_scoped_acquire gil;
            return as_array(import_memory(allocate(bytes), true), typed_order{dtype::uint8, native_byte_order});
        };
    }
    if (!on_block.is_none()) {
        // Each file's place goes with its block, so that the caller makes the views while
        // later blocks are read.
        o.on_block = [&on_block](std::size_t b, const std::vector<std::size_t>& files,
                                 const std::vector<whole_file>& all) {
            nb::gil_scoped_acquire gil;
            nb::list placed;
            for (std::size_t i : files) placed.append(nb::make_tuple(i, place_of(all[i])));
            on_block(b, placed);
        };
    }
    whole_files got = interruptible([&] { return read_whole_files(paths, o); });
    return dtype_of.is_none() ? places(got, !on_block.is_none()) : host_views(got, dtype_of);
}

/// The arrays a GPU library cannot view as they lie, made native and C-ordered on the device
/// in one batch: each item (block index, dtype, byte order, fortran, shape, offset) of the
/// device blocks (uint8 GPU arrays of the caller's library, written by this call only) becomes
/// an Array: swapped in place where only the byte order differs, transposed into memory of
/// ferry's own where the layout does.
std::vector<array> native_c(const std::vector<nb::object>& blocks,
                            const std::vector<std::tuple<std::size_t, std::string, std::string, bool,
                                                         std::vector<std::int64_t>, std::uint64_t>>& items) {
    std::vector<array> mem;
    mem.reserve(blocks.size());
    for (const auto& b : blocks)
        mem.push_back(as_array(import_memory(b, true), typed_order{dtype::uint8, native_byte_order}));
    std::vector<array> in;
    in.reserve(items.size());
    for (const auto& [b, type, order, fortran, shape, offset] : items) {
        if (b >= mem.size()) throw usage_error("native_c: block " + std::to_string(b) + " out of range");
        typed_order t{parse_dtype(type).type, order == ">" ? byte_order::big : byte_order::little};
        if (offset + element_count(shape, size_of(t.type)) * size_of(t.type) > mem[b].nbytes())
            throw usage_error("native_c: an array ends past its block");
        in.emplace_back(mem[b].owner(), static_cast<unsigned char*>(mem[b].data()) + offset, t.type, shape,
                        mem[b].where(), fortran ? storage_order::fortran : storage_order::c, t.order);
    }
    nb::gil_scoped_release nogil;
    return to_native_c_many(in);
}

}  // namespace

void bind_many(nb::module_& m) {
    m.def("read_whole_files", &read_files, "paths"_a, "raw_dtype"_a = nb::none(), "raw_shape"_a = nb::none(),
          "threads"_a = 0, "stop_at_failure"_a = true, "dtype_of"_a = nb::none(), "allocate"_a = nb::none(),
          "on_block"_a = nb::none(),
          "Reads every file of `paths` whole into shared blocks on the library's threads and parses its\n"
          "header (ferry::read_whole_files). Returns (results, later): with `dtype_of(name, order)`\n"
          "(numpy dtype or None) each result is what ferry.load gives in host memory, as numpy views of\n"
          "the blocks; without it, where each file's arrays lie (block, [(name, dtype, order, fortran,\n"
          "shape, offset, nbytes)], is_dict). `later` lists the files left None: failed, needing\n"
          "ferry.load, or of a dtype numpy lacks. `allocate(nbytes)` gives each block's memory\n"
          "(pinned, for a GPU load) and `on_block(b, [(file, place), ...])` is called once block b\n"
          "is complete, with the place of each of its files (None: a file for ferry.load); with\n"
          "on_block the results hold None for them, their places having gone there.");
    m.def("native_c_on_device", &native_c, "blocks"_a, "items"_a,
          "Arrays of the GPU `blocks` at (block, dtype, order, fortran, shape, offset), made native\n"
          "and C-ordered on the device in one batch (ferry::to_native_c_many).");
}

}  // namespace ferry::python
