// Checkpoints from Python: describe, load (selection, slices, caller destinations, progress)
// and save. ferry/_checkpoint.py resolves Python-only conveniences (callables, torch modules,
// tensor-parallel rules) into these plain arguments.
#include <Python.h>

#include <nanobind/stl/function.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <chrono>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "bind.hpp"
#include "ferry/checkpoint.hpp"
#include "ferry/error.hpp"

namespace ferry::python {
namespace {

using namespace nb::literals;

// (pattern, dim, start, stop, parts, part)
using slice_tuple = std::tuple<std::string, int, std::int64_t, std::int64_t, std::int64_t, std::int64_t>;

checkpoint open_source(const std::vector<std::string>& sources) {
    if (sources.size() == 1) return open_checkpoint(sources[0]);
    return open_checkpoint(sources);
}

nb::dict info(const std::vector<std::string>& sources) {
    checkpoint c;
    {
        nb::gil_scoped_release nogil;
        c = open_source(sources);
    }
    nb::dict out;
    out["source"] = c.source;
    out["index"] = c.index_path.empty() ? nb::object(nb::none()) : nb::object(nb::str(c.index_path.c_str()));
    out["metadata"] = c.metadata;
    out["bytes"] = c.total_bytes();
    nb::list shards;
    for (const auto& s : c.shards) {
        nb::dict d;
        d["path"] = s.path;
        d["size"] = s.file_size;
        d["metadata"] = s.header.metadata;
        shards.append(d);
    }
    out["shards"] = shards;
    nb::list tensors;
    for (const auto& t : c.tensors) {
        nb::list shape;
        for (auto x : t.shape) shape.append(x);
        tensors.append(nb::make_tuple(t.name, std::string(to_string(t.type)), nb::tuple(shape), t.shard, t.offset, t.bytes));
    }
    out["tensors"] = tensors;
    return out;
}

nb::dict plan_entry(const tensor_plan& tp) {
    nb::dict d;
    d["name"] = tp.name;
    d["route"] = std::string(to_string(tp.route));
    d["reason"] = tp.reason;
    d["reason_code"] = std::string(to_string(tp.code));
    d["bytes_read"] = tp.bytes_read;
    d["convert"] = tp.convert;
    d["into"] = tp.into;
    return d;
}

// A host load's fresh tensors as places in their one block, for the caller to wrap in bulk
// (numpy views made in a loop cost a tenth of one Array object and one conversion call per
// tensor, which decided the load of 100,000 small tensors): `block` a uint8 Array over the
// tensors' bytes, and per tensor (name, dtype, shape, offset) where views(dtype) is true, else
// (name, Array).
void view_entries(const std::vector<named_array>& tensors, const nb::object& views, nb::object& block,
                  nb::list& entries) {
    const unsigned char* lo = nullptr;
    const unsigned char* hi = nullptr;
    std::shared_ptr<const void> owner;
    for (const auto& t : tensors) {
        if (t.value.nbytes() == 0) continue;
        const auto* p = static_cast<const unsigned char*>(t.value.data());
        if (!lo || p < lo) lo = p;
        if (!hi || p + t.value.nbytes() > hi) hi = p + t.value.nbytes();
        owner = t.value.owner();
    }
    if (lo)
        block = nb::cast(array(owner, const_cast<unsigned char*>(lo), dtype::uint8,
                               {static_cast<std::int64_t>(hi - lo)}, placement::host()));
    std::map<dtype, std::pair<bool, nb::str>> kinds;
    for (const auto& t : tensors) {
        auto it = kinds.find(t.value.type());
        if (it == kinds.end()) {
            nb::str name(std::string(to_string(t.value.type())).c_str());
            it = kinds.emplace(t.value.type(), std::make_pair(nb::cast<bool>(views(name)), name)).first;
        }
        if (!it->second.first) {
            entries.append(nb::make_tuple(t.name, nb::cast(t.value)));
            continue;
        }
        const auto& shape = t.value.shape();
        nb::object dims = nb::steal(PyTuple_New(static_cast<Py_ssize_t>(shape.size())));
        for (std::size_t i = 0; i < shape.size(); ++i)
            PyTuple_SET_ITEM(dims.ptr(), static_cast<Py_ssize_t>(i), PyLong_FromLongLong(shape[i]));
        const std::int64_t offset =
            t.value.nbytes() == 0 ? -1 : static_cast<const unsigned char*>(t.value.data()) - lo;
        entries.append(nb::make_tuple(t.name, it->second.second, dims, offset));
    }
}

nb::tuple load(const std::vector<std::string>& sources, const std::string& device, const std::string& kind,
               const std::vector<std::string>& patterns, const std::vector<slice_tuple>& slices,
               std::optional<std::string> as, const std::vector<std::pair<std::string, const array*>>& into,
               bool only_into, bool strict, const std::string& route, nb::object progress, nb::object allocate,
               nb::object convert, nb::object prepare, nb::object views, const std::string& verify) {
    checkpoint_load_options o;
    o.where = parse_placement(device);
    o.verify = parse_verify_mode(verify);
    if (as) o.as = parse_dtype(*as).type;
    using k = tensor_selection::kind;
    if (kind == "names") o.select = {k::names, patterns};
    else if (kind == "glob") o.select = {k::glob, patterns};
    else if (kind == "regex") o.select = {k::regex, patterns};
    else if (kind != "all") throw usage_error("load_checkpoint: unknown selection kind '" + kind + "'");
    for (const auto& [pattern, dim, start, stop, parts, part] : slices) {
        tensor_slice s{dim, start, stop, parts, part};
        if (pattern.find_first_of("*?[") != std::string::npos) o.slice_rules.push_back({pattern, s});
        else o.slices[pattern] = s;
    }
    for (const auto& [name, a] : into) {
        if (!a) throw usage_error("load_checkpoint: destination for '" + name + "' is None");
        o.into[name] = *a;
    }
    o.only_into = only_into;
    o.strict_into = strict;
    if (route == "segments") o.route = route_choice::segments;
    else if (route == "span") o.route = route_choice::span;
    else if (route != "auto") throw usage_error("load_checkpoint: route is auto, segments or span");
    if (!progress.is_none()) {
        o.progress = [progress](std::uint64_t done, std::uint64_t total) {
            nb::gil_scoped_acquire gil;
            progress(done, total);
        };
    }
    if (!allocate.is_none()) {
        // The block from the caller's library (its pool): uint8 memory of at least `bytes`.
        o.allocate = [allocate](std::uint64_t bytes, const placement&) {
            foreign_memory mem;
            array a;
            {
                nb::gil_scoped_acquire gil;
                mem = import_memory(allocate(bytes), true);
                a = as_array(mem, typed_order{dtype::uint8, native_byte_order});
            }
            wait_for_producer(mem);
            return a;
        };
    }
    // The result's Python objects (each tensor wrapped by `convert`, the plan's dicts) are
    // made while the reads run: they need only the tensors' places. They are handed out only
    // after the load returned, so nothing reads the bytes before they are complete.
    nb::list arrays;
    nb::list plan;
    nb::object block = nb::none();
    o.while_reading = [&](const std::vector<named_array>& tensors, const checkpoint_plan& p) {
        nb::gil_scoped_acquire gil;
        if (!views.is_none()) view_entries(tensors, views, block, arrays);
        else
            for (const auto& t : tensors) {
                nb::object a = nb::cast(t.value);
                arrays.append(nb::make_tuple(t.name, convert.is_none() ? a : convert(a)));
            }
        for (const auto& tp : p.tensors) plan.append(plan_entry(tp));
    };
    checkpoint c;
    double open_seconds = 0;
    {
        auto t0 = std::chrono::steady_clock::now();
        c = interruptible([&] { return open_source(sources); });
        open_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
    // The modules `convert` will need for these element types (ml_dtypes for bfloat16 into
    // numpy: 1.2 s the first time in a process, for a load of 92 KB) are imported here, once
    // the headers named the types, and timed apart: `seconds` is the load's own.
    double import_seconds = 0;
    if (!prepare.is_none()) {
        auto t0 = std::chrono::steady_clock::now();
        std::set<std::string> types;
        for (const auto& t : c.tensors) types.insert(std::string(to_string(t.type)));
        if (o.as) types.insert(std::string(to_string(*o.as)));
        prepare(std::vector<std::string>(types.begin(), types.end()));
        import_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
    checkpoint_load l = interruptible([&] { return load_checkpoint(c, o); });
    nb::dict stats;
    stats["bytes_read"] = l.stats.bytes_read;
    stats["bytes_out"] = l.stats.bytes_out;
    stats["tensors"] = l.stats.tensors;
    stats["files"] = l.stats.files;
    stats["requests"] = l.stats.requests;
    stats["seconds"] = l.stats.seconds;
    // Reading and checking the index and the headers, before `seconds` starts: a call takes both.
    stats["open_seconds"] = open_seconds;
    stats["import_seconds"] = import_seconds;
    stats["first_read_seconds"] = l.stats.first_read_seconds;
    stats["peak_temp_bytes"] = l.stats.peak_temp_bytes;
    stats["device_temp_bytes"] = l.stats.device_temp_bytes;
    stats["budget_peak_bytes"] = l.stats.budget_peak_bytes;
    stats["plan"] = plan;
    stats["missing_keys"] = l.plan.missing;
    stats["unexpected_keys"] = l.plan.unexpected;
    if (!views.is_none()) return nb::make_tuple(nb::make_tuple(block, arrays), stats);
    return nb::make_tuple(arrays, stats);
}

}  // namespace

void bind_checkpoint(nb::module_& m) {
    m.def("checkpoint_info", &info, "sources"_a,
          "Shards, tensors (name, dtype, shape, shard, offset, bytes) and metadata of a checkpoint.");
    m.def("load_checkpoint", &load, "sources"_a, "device"_a = "cpu", "kind"_a = "all",
          "patterns"_a = std::vector<std::string>{}, "slices"_a = std::vector<slice_tuple>{},
          "dtype"_a = nb::none(), "into"_a = std::vector<std::pair<std::string, const array*>>{},
          "only_into"_a = false, "strict"_a = false, "route"_a = "auto", "progress"_a = nb::none(),
          "allocate"_a = nb::none(), "convert"_a = nb::none(), "prepare"_a = nb::none(), "views"_a = nb::none(),
          "verify"_a = "auto",
          "Loads a checkpoint in one plan. Returns ([(name, Array)], stats). `allocate(n)`, when\n"
          "given, returns the uint8 array of at least n bytes the fresh tensors share. `convert(a)`,\n"
          "when given, wraps each Array while the reads run (it must not read the bytes); the list\n"
          "then holds what it returned. `prepare(dtypes)`, when given, is called with the element\n"
          "types of the result once the headers are read, before the load's own timing starts.\n"
          "`views(dtype) -> bool`, when given (host loads without into), makes the result\n"
          "((block, entries), stats): block a uint8 Array over the fresh tensors (None when they\n"
          "hold no byte), entries (name, dtype, shape, offset in block or -1 when empty) for the\n"
          "tensors of the dtypes views() accepts and (name, Array) for the others.");
    m.def(
        "save_checkpoint",
        [](const std::string& folder, const std::vector<std::pair<std::string, const array*>>& arrays,
           std::uint64_t max_shard_size, const std::map<std::string, std::string>& metadata, bool checksums) {
            std::vector<named_array> v;
            for (const auto& [name, a] : arrays) {
                if (!a) throw usage_error("save_checkpoint: '" + name + "' is None, not an array");
                v.push_back({name, *a});
            }
            return interruptible([&] { return save_checkpoint(folder, v, max_shard_size, metadata, checksums); });
        },
        "folder"_a, "arrays"_a, "max_shard_size"_a, "metadata"_a = std::map<std::string, std::string>{},
        "checksums"_a = true);
    m.def("set_checkpoint_memory_budget", &set_checkpoint_memory_budget, "bytes"_a);
    m.def("checkpoint_memory_budget", &checkpoint_memory_budget);
    m.def("checkpoint_memory_peak", &checkpoint_memory_peak);
}

}  // namespace ferry::python
