// Many small files from Python (ferry/_many.py): ferry::read_whole_files reads and parses them
// on the library's threads, without the GIL, and here their arrays become numpy views of the
// blocks in one loop (host loads); ferry::read_whole_files_to_device puts them in GPU memory,
// native and C-ordered, and here they become the caller's library's arrays through DLPack
// capsules, block by block while later blocks are read (GPU loads, ferry/_many_device.py).
#include <Python.h>

#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
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

/// read_whole_files_to_device from Python: the files read into pinned blocks, copied and made
/// native and C-ordered on the device by the library's threads, and each file's arrays made
/// into the caller's library's arrays on this thread as their block's copy is queued, while
/// later blocks are read. `allocate(nbytes)` gives device memory of the caller's library (used
/// on `stream`, a CUDA stream handle, where the copies run), `viewable(dtype name)` says whether
/// the library takes that element type, `make(capsule)` makes an array from a DLPack capsule
/// of one array's place. Returns (results, later, stats) as read_whole_files does without
/// dtype_of: `later` lists the files left None (failed, needing ferry.load, of a type the
/// library lacks, or not aligned to their items).
///
/// `view`, where the library has a cheaper way than a capsule, is (new, base_of, dtype_of):
/// each array is then `new(shape, dtype_of(dtype name), base_of(device memory) + offset)`,
/// base_of called once per allocation (CuPy: its ndarray over a MemoryPointer, where its
/// from_dlpack took 4 µs an array).
nb::tuple read_files_to_device(const std::vector<std::string>& paths, std::optional<std::string> raw_dtype,
                               std::optional<std::vector<std::int64_t>> raw_shape, unsigned threads,
                               bool stop_at_failure, int device, std::optional<std::uintptr_t> stream,
                               nb::object allocate, nb::object viewable, nb::object make, nb::object view) {
    whole_files_options o;
    if (raw_dtype) o.raw_type = parse_dtype(*raw_dtype).type;
    o.raw_shape = std::move(raw_shape);
    o.threads = threads;
    o.stop_at_failure = stop_at_failure;
    whole_files_device_options d;
    d.device = device;
    if (stream) d.stream = reinterpret_cast<stream_t>(*stream);
    // With `view`: each allocation's start, length and base_of(it), for the arrays made in it (a
    // deque: the reading threads add to it, under the GIL, while this thread holds an element).
    struct allocation {
        std::uintptr_t at;
        std::uint64_t bytes;
        nb::object base;
    };
    std::deque<allocation> allocations;
    nb::object view_new, view_base, view_dtype;
    if (!view.is_none()) {
        auto t = nb::cast<nb::tuple>(view);
        if (t.size() != 3) throw nb::value_error("view must be (new, base_of, dtype_of)");
        view_new = t[0], view_base = t[1], view_dtype = t[2];
        if (allocate.is_none()) throw nb::value_error("view needs allocate");
    }
    if (!allocate.is_none()) {
        d.allocate = [&](std::uint64_t bytes) {
            nb::gil_scoped_acquire gil;
            nb::object got = allocate(bytes);
            array a = as_array(import_memory(got, true), typed_order{dtype::uint8, native_byte_order});
            if (view_new.is_valid())
                allocations.push_back({reinterpret_cast<std::uintptr_t>(a.data()), a.nbytes(), view_base(got)});
            return a;
        };
    }
    // Blocks whose files have their places, queued by the reading threads for this thread.
    std::mutex m;
    std::vector<std::pair<array, std::vector<std::size_t>>> ready;
    // The files' descriptions: the list's storage, which stays where it is as the result moves
    // out of the library's call into `got` (the vector object itself does not, and the last
    // step runs after that call has returned).
    const whole_file* all = nullptr;
    std::function<void()> wake_up;
    d.on_block = [&](const array& block, const std::vector<std::size_t>& files, const std::vector<whole_file>& a) {
        {
            std::lock_guard lock(m);
            all = a.data();
            ready.emplace_back(block, files);
        }
        wake_up();
    };
    const std::size_t n = paths.size();
    nb::list results;
    for (std::size_t i = 0; i < n; ++i) results.append(nb::none());
    std::vector<bool> made(n, false);
    std::map<dtype, bool> takes;
    std::map<dtype, nb::object> dtypes;  // with `view`: dtype_of(name) by type
    double view_seconds = 0;
    // The allocation a block's place lies in (the latest, mostly), for `view`.
    auto allocation_of = [&](const void* p) -> const allocation& {
        const auto at = reinterpret_cast<std::uintptr_t>(p);
        for (auto it = allocations.rbegin(); it != allocations.rend(); ++it)
            if (at >= it->at && at < it->at + it->bytes) return *it;
        throw std::logic_error("load_many: a block's place lies in no allocation");
    };
    auto step = [&] {
        std::vector<std::pair<array, std::vector<std::size_t>>> batch;
        {
            std::lock_guard lock(m);
            batch.swap(ready);
        }
        const auto t0 = std::chrono::steady_clock::now();
        for (const auto& [block, files] : batch) {
            auto* base = static_cast<unsigned char*>(block.data());
            const allocation* in = view_new.is_valid() ? &allocation_of(base) : nullptr;
            for (std::size_t i : files) {
                const whole_file& f = all[i];
                if (!placeable(f)) continue;
                bool ok = true;
                for (const auto& a : f.arrays) {
                    auto it = takes.find(a.type.type);
                    if (it == takes.end())
                        it = takes.emplace(a.type.type, nb::cast<bool>(viewable(std::string(to_string(a.type.type))))).first;
                    if (!it->second || a.offset % size_of(a.type.type) != 0) ok = false;
                }
                if (!ok) continue;
                auto value = [&](const whole_file_array& a) -> nb::object {
                    if (!in)
                        return make(dlpack_capsule(array(block.owner(), base + a.offset, a.type.type, a.shape, block.where())));
                    auto dt = dtypes.find(a.type.type);
                    if (dt == dtypes.end())
                        dt = dtypes.emplace(a.type.type, view_dtype(std::string(to_string(a.type.type)))).first;
                    nb::object shape = shape_tuple(a.shape);
                    nb::object offset = nb::steal(PyLong_FromUnsignedLongLong(
                        reinterpret_cast<std::uintptr_t>(base) - in->at + a.offset));
                    nb::object at = nb::steal(PyNumber_Add(in->base.ptr(), offset.ptr()));
                    if (!at.is_valid()) throw nb::python_error();
                    PyObject* args[] = {shape.ptr(), dt->second.ptr(), at.ptr()};
                    nb::object v = nb::steal(PyObject_Vectorcall(view_new.ptr(), args, 3, nullptr));
                    if (!v.is_valid()) throw nb::python_error();
                    return v;
                };
                // An array the library will not take as described (its import refuses it) leaves
                // the file to ferry.load, which says what is wrong, or converts as it would.
                try {
                    if (f.format == file_format::safetensors) {
                        nb::dict out;
                        for (const auto& a : f.arrays) out[nb::str(a.name.data(), a.name.size())] = value(a);
                        results[i] = out;
                    } else {
                        results[i] = value(f.arrays.front());
                    }
                    made[i] = true;
                } catch (nb::python_error& e) {
                    if (e.matches(PyExc_KeyboardInterrupt)) throw;
                    results[i] = nb::none();  // nothing of the file is handed out
                }
            }
        }
        view_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    };
    whole_files got;
    const auto t0 = std::chrono::steady_clock::now();
    run_interruptible_stepping(
        [&](const std::function<void()>& wake) {
            wake_up = wake;
            got = read_whole_files_to_device(paths, o, d);
        },
        step);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::vector<std::size_t> later;
    for (std::size_t i = 0; i < n; ++i)
        if (!made[i] || got.files[i].error) {
            results[i] = nb::none();
            later.push_back(i);
        }
    nb::dict stats;
    stats["seconds"] = seconds;
    stats["views_while_reading"] = view_seconds;
    stats["blocks"] = got.blocks.size();
    stats["pinned_made"] = got.pinned_made;
    stats["pinned_reused"] = got.pinned_reused;
    return nb::make_tuple(results, later, stats);
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
    m.def("read_whole_files_to_device", &read_files_to_device, "paths"_a, "raw_dtype"_a = nb::none(),
          "raw_shape"_a = nb::none(), "threads"_a = 0, "stop_at_failure"_a = true, "device"_a = 0,
          "stream"_a = nb::none(), "allocate"_a = nb::none(), "viewable"_a, "make"_a, "view"_a = nb::none(),
          "Reads every file of `paths` whole into GPU memory `device` (ferry::read_whole_files_to_device:\n"
          "pinned blocks copied on `stream` as they complete, arrays made native and C-ordered there)\n"
          "and returns (results, later, stats): each result is what ferry.load gives, made by\n"
          "`make(capsule)` from a DLPack capsule of each array while later files are read; `later` lists\n"
          "the files left None (failed, needing ferry.load, of a type `viewable(name)` refuses, or not\n"
          "aligned to their items). `allocate(nbytes)` gives the device memory (uint8, used on `stream`).\n"
          "`view`, where given, is (new, base_of, dtype_of): each array is made as new(shape,\n"
          "dtype_of(name), base_of(memory allocated) + offset) instead.");
}

}  // namespace ferry::python
