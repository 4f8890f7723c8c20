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

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <optional>
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

/// stats["plan"]: the load's plan, each tensor's entry made a dict when it is asked for. Made
/// for every tensor up front, the dicts cost 0.15 s of a load of 100,000 tensors on the CPU
/// machine (more than the reads), for a list most callers never look at.
struct plan_entries {
    std::shared_ptr<const checkpoint_plan> plan;
};

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

// The cycle collector's pass over the young objects a load just made (a few per tensor), run
// while the reads are still in flight. The caller pauses the collector during the load
// (ferry/_checkpoint.py); its first allocation after the call would otherwise start that pass,
// 4.4 ms for 50,000 torch tensors on an H100, after the last byte arrived. A small result's
// pass is left to the collector.
void collect_young(std::size_t made) {
    if (made >= 1000) nb::module_::import_("gc").attr("collect")(0);
}

// A load's fresh tensors as the library hands them to places_while_reading: each planned
// tensor's name, dtype, shape and first byte, in the plan's order, and the block they share.
struct fresh_tensors {
    const checkpoint_plan& plan;
    const std::vector<unsigned char*>& at;
    const array& block;
    std::vector<std::uint64_t> bytes;  ///< each tensor's, counted once

    fresh_tensors(const checkpoint_plan& p, const std::vector<unsigned char*>& places, const array& b)
        : plan(p), at(places), block(b) {
        bytes.reserve(at.size());
        for (std::size_t i = 0; i < at.size(); ++i) bytes.push_back(element_count(p.tensors[i].shape) * size_of(p.tensors[i].type));
    }

    std::size_t size() const { return at.size(); }
    const tensor_plan& operator[](std::size_t i) const { return plan.tensors[i]; }
    std::uint64_t nbytes(std::size_t i) const { return bytes[i]; }
    std::int64_t offset(std::size_t i) const { return at[i] - static_cast<const unsigned char*>(block.data()); }
    bool any_bytes() const {
        return std::any_of(bytes.begin(), bytes.end(), [](std::uint64_t b) { return b != 0; });
    }
    /// An Array of tensor i (for a tensor the caller's library cannot view).
    array value(std::size_t i) const {
        return array(block.owner(), at[i], plan.tensors[i].type, plan.tensors[i].shape, block.where(), storage_order::c,
                     byte_order::little);
    }
};

// A host load's fresh tensors as numpy arrays over their one block, in `out` by name, made
// here in one loop: per tensor one ndarray(shape, dtype, buffer, offset) call and one dict
// entry. Through a tuple per tensor and a loop in Python they cost 2 us a tensor on the CPU
// machine, Array objects and a conversion call each about 9. `numpy_dtype(name)` gives the
// numpy dtype of a ferry dtype once per type, None where numpy has none: those tensors go to
// `convert` as Arrays.
void numpy_views(const fresh_tensors& f, const nb::object& numpy_dtype, const nb::object& convert, nb::object& out) {
    nb::object buffer = f.any_bytes() ? nb::cast(f.block).attr("_host_bytes")() : nb::none();
    nb::module_ np = nb::module_::import_("numpy");
    nb::object ndarray = np.attr("ndarray");
    nb::object empty = np.attr("empty");
    std::map<dtype, nb::object> kinds;
    std::vector<nb::object> values(f.size());
    std::vector<std::size_t> placed;  // tensors viewed over the buffer, in block order below
    placed.reserve(f.size());
    for (std::size_t i = 0; i < f.size(); ++i) {
        const tensor_plan& t = f[i];
        auto it = kinds.find(t.type);
        if (it == kinds.end())
            it = kinds.emplace(t.type, numpy_dtype(nb::str(std::string(to_string(t.type)).c_str()))).first;
        if (it->second.is_none()) values[i] = convert(nb::cast(f.value(i)));
        else if (f.nbytes(i) == 0) values[i] = empty(shape_tuple(t.shape), it->second);
        else placed.push_back(i);
    }
    auto in_block = [&](std::size_t x, std::size_t y) { return f.at[x] < f.at[y]; };
    if (!std::is_sorted(placed.begin(), placed.end(), in_block)) std::sort(placed.begin(), placed.end(), in_block);
    // A run of tensors of one dtype and shape (of one dimension or more) that follow one
    // another is one ndarray of one more dimension, whose rows numpy hands out as views at C
    // speed: 0.15 us a tensor, against 0.7 for an ndarray call each.
    for (std::size_t k = 0; k < placed.size();) {
        const tensor_plan& first = f[placed[k]];
        const std::uint64_t each = f.nbytes(placed[k]);
        std::size_t j = k + 1;
        if (!first.shape.empty())
            while (j < placed.size() && f[placed[j]].type == first.type && f[placed[j]].shape == first.shape &&
                   f.at[placed[j]] == f.at[placed[k]] + (j - k) * each)
                ++j;
        std::vector<std::int64_t> shape = first.shape;
        if (j - k > 1) shape.insert(shape.begin(), static_cast<std::int64_t>(j - k));
        nb::object dims = shape_tuple(shape);
        nb::object offset = nb::steal(PyLong_FromSsize_t(f.offset(placed[k])));
        PyObject* args[] = {dims.ptr(), kinds[first.type].ptr(), buffer.ptr(), offset.ptr()};
        nb::object a = nb::steal(PyObject_Vectorcall(ndarray.ptr(), args, 4, nullptr));
        if (!a.is_valid()) throw nb::python_error();
        if (j - k == 1) {
            values[placed[k]] = std::move(a);
        } else {
            nb::object rows = nb::steal(PySequence_List(a.ptr()));
            if (!rows.is_valid()) throw nb::python_error();
            for (std::size_t r = k; r < j; ++r)
                values[placed[r]] = nb::borrow(PyList_GetItem(rows.ptr(), static_cast<Py_ssize_t>(r - k)));
        }
        k = j;
    }
    for (std::size_t i = 0; i < f.size(); ++i) {
        nb::str name(f[i].name.data(), f[i].name.size());
        if (PyDict_SetItem(out.ptr(), name.ptr(), values[i].ptr()) != 0) throw nb::python_error();
    }
}

// A load's fresh tensors wrapped in bulk by the caller (PyTorch's views of one block), into
// `out` by name. bulk(block, entries) gets `block`, a uint8 Array over the load's block (None
// when no tensor holds a byte), and one entry per run of neighbours of one dtype and shape lying
// one after the other in the block (an MoE model's scales, its experts' matrices): (dtype,
// shape, offset of the first, nbytes of each, count), which it makes into views by one unbind;
// an empty tensor is (dtype, shape, -1, 0, 1); a tensor views(dtype) gives None for, or whose
// place is not aligned to its items, is (Array,). It returns one item per entry: the sequence
// of a run's `count` tensors, or the tensor itself where count is 1. The names go into `out`
// here, in the plan's order, so the per-tensor work in Python is the view alone: 50,000 scales
// took 1.1 us each in a Python loop over one entry apiece.
void bulk_views(const fresh_tensors& f, const nb::object& views, const nb::object& bulk, nb::object& out) {
    nb::object block = f.any_bytes() ? nb::cast(f.block) : nb::none();
    std::map<dtype, std::pair<bool, nb::str>> kinds;
    auto viewable = [&](dtype type) -> const std::pair<bool, nb::str>& {
        auto it = kinds.find(type);
        if (it == kinds.end()) {
            nb::str name(std::string(to_string(type)).c_str());
            it = kinds.emplace(type, std::make_pair(!views(name).is_none(), name)).first;
        }
        return it->second;
    };
    nb::list entries;
    std::vector<std::size_t> counts;  // tensors per entry
    const std::size_t n = f.size();
    for (std::size_t i = 0; i < n;) {
        const tensor_plan& v = f[i];
        const auto& kind = viewable(v.type);
        const std::uint64_t nbytes = f.nbytes(i);
        const bool aligned = nbytes == 0 || f.offset(i) % static_cast<std::int64_t>(size_of(v.type)) == 0;
        if (!kind.first || !aligned) {
            entries.append(nb::make_tuple(nb::cast(f.value(i))));
            counts.push_back(1);
            ++i;
            continue;
        }
        std::size_t j = i + 1;
        if (nbytes != 0)
            while (j < n && f[j].type == v.type && f[j].shape == v.shape && f.at[j] == f.at[i] + (j - i) * nbytes) ++j;
        const std::int64_t offset = nbytes == 0 ? -1 : f.offset(i);
        entries.append(nb::make_tuple(kind.second, shape_tuple(v.shape), offset, nbytes, j - i));
        counts.push_back(j - i);
        i = j;
    }
    // The limited API's calls (the abi3 wheel): borrowed items of a list and of tuples.
    nb::object made = bulk(block, entries);
    if (!PyList_Check(made.ptr()) || PyList_Size(made.ptr()) != static_cast<Py_ssize_t>(counts.size()))
        throw nb::type_error("load_checkpoint: bulk must return a list with one item per entry");
    auto put = [&](std::size_t t, PyObject* value) {
        nb::str name(f[t].name.data(), f[t].name.size());
        if (PyDict_SetItem(out.ptr(), name.ptr(), value) != 0) throw nb::python_error();
    };
    std::size_t t = 0;
    for (std::size_t e = 0; e < counts.size(); ++e) {
        PyObject* item = PyList_GetItem(made.ptr(), static_cast<Py_ssize_t>(e));
        if (!item) throw nb::python_error();
        if (counts[e] == 1) {
            put(t++, item);
            continue;
        }
        nb::object run = nb::steal(PySequence_Tuple(item));  // unbind's tuple itself
        if (!run.is_valid()) throw nb::python_error();
        if (PyTuple_Size(run.ptr()) != static_cast<Py_ssize_t>(counts[e]))
            throw nb::type_error("load_checkpoint: bulk gave a run of the wrong length");
        for (std::size_t k = 0; k < counts[e]; ++k) {
            PyObject* value = PyTuple_GetItem(run.ptr(), static_cast<Py_ssize_t>(k));
            if (!value) throw nb::python_error();
            put(t++, value);
        }
    }
}

nb::tuple load(const std::vector<std::string>& sources, const std::string& device, const std::string& kind,
               const std::vector<std::string>& patterns, const std::vector<slice_tuple>& slices,
               std::optional<std::string> as, const std::vector<std::pair<std::string, const array*>>& into,
               bool only_into, bool strict, const std::string& route, nb::object progress, nb::object allocate,
               nb::object convert, nb::object prepare, nb::object views, nb::object bulk,
               const std::string& verify, nb::object result) {
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
    // Into the map in name order, each at its end: inserted in a model's order, 100,000
    // destinations each walked the tree comparing long common prefixes.
    std::vector<const std::pair<std::string, const array*>*> by_name;
    by_name.reserve(into.size());
    for (const auto& p : into) {
        if (!p.second) throw usage_error("load_checkpoint: destination for '" + p.first + "' is None");
        by_name.push_back(&p);
    }
    std::stable_sort(by_name.begin(), by_name.end(), [](auto* x, auto* y) { return x->first < y->first; });
    for (const auto* p : by_name) {
        if (!o.into.empty() && std::prev(o.into.end())->first == p->first)
            std::prev(o.into.end())->second = *p->second;  // a name given twice: the last one holds
        else
            o.into.emplace_hint(o.into.end(), p->first, *p->second);
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
    nb::object viewed;
    double wrap_seconds = 0;
    // Under the GIL, timed: the wrapping of `made` tensors, then the collector's pass over them.
    auto wrapping = [&wrap_seconds](std::size_t made, const auto& wrap) {
        nb::gil_scoped_acquire gil;
        auto t0 = std::chrono::steady_clock::now();
        wrap();
        collect_young(made);
        wrap_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    };
    if (!views.is_none()) {
        // The result made from the tensors' places, without an Array per tensor.
        if (!into.empty() || only_into) throw usage_error("load_checkpoint: views come with fresh tensors only");
        o.places_while_reading = [&](const checkpoint_plan& plan, const std::vector<unsigned char*>& at,
                                     const array& block) {
            wrapping(at.size(), [&] {
                viewed = result.is_none() ? nb::dict() : result();
                const fresh_tensors f{plan, at, block};
                if (!bulk.is_none()) bulk_views(f, views, bulk, viewed);
                else numpy_views(f, views, convert, viewed);
            });
        };
    } else {
        o.while_reading = [&](const std::vector<named_array>& tensors, const checkpoint_plan&) {
            wrapping(tensors.size(), [&] {
                for (const auto& t : tensors) {
                    nb::object a = nb::cast(t.value);
                    arrays.append(nb::make_tuple(t.name, convert.is_none() ? a : convert(a)));
                }
            });
        };
    }
    // The modules `convert` will need for these element types (ml_dtypes for bfloat16 into
    // numpy: 1.2 s the first time in a process, for a load of 92 KB) are imported once the
    // headers named the types, and timed apart: `seconds` is the load's own. The open and the
    // load are one call, so that a load of every tensor reads while the open still checks the
    // headers against the index.
    double import_seconds = 0;
    auto opened = [&](const checkpoint& c) {
        if (prepare.is_none()) return;
        auto t0 = std::chrono::steady_clock::now();
        // Neighbours mostly share a type: a set of names per tensor took milliseconds for 50,000.
        std::set<std::string> types;
        std::optional<dtype> last;
        for (const auto& t : c.tensors)
            if (t.type != last) {
                last = t.type;
                types.insert(std::string(to_string(t.type)));
            }
        if (o.as) types.insert(std::string(to_string(*o.as)));
        {
            nb::gil_scoped_acquire gil;
            prepare(std::vector<std::string>(types.begin(), types.end()));
        }
        import_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    };
    checkpoint_load l = interruptible([&] { return open_and_load_checkpoint(sources, o, opened); });
    const double open_seconds = l.stats.open_seconds;
    nb::dict stats;
    stats["bytes_read"] = l.stats.bytes_read;
    stats["bytes_out"] = l.stats.bytes_out;
    stats["tensors"] = l.stats.tensors;
    stats["files"] = l.stats.files;
    stats["requests"] = l.stats.requests;
    stats["seconds"] = l.stats.seconds;
    // Of `seconds`, the making of the result's Python objects (while the reads ran).
    stats["wrap_seconds"] = wrap_seconds;
    // Reading and checking the index and the headers, before `seconds` starts: a call takes both.
    stats["open_seconds"] = open_seconds;
    stats["import_seconds"] = import_seconds;
    stats["first_read_seconds"] = l.stats.first_read_seconds;
    stats["headers_seconds"] = l.stats.headers_seconds;
    stats["reads_began"] = l.stats.reads_began;
    stats["peak_temp_bytes"] = l.stats.peak_temp_bytes;
    stats["device_temp_bytes"] = l.stats.device_temp_bytes;
    stats["budget_peak_bytes"] = l.stats.budget_peak_bytes;
    stats["missing_keys"] = l.plan.missing;
    stats["unexpected_keys"] = l.plan.unexpected;
    stats["plan"] = plan_entries{std::make_shared<const checkpoint_plan>(std::move(l.plan))};
    if (!views.is_none()) return nb::make_tuple(viewed, stats);
    return nb::make_tuple(arrays, stats);
}

}  // namespace

void bind_checkpoint(nb::module_& m) {
    nb::class_<plan_entries>(m, "CheckpointPlan",
                             "A load's plan: a sequence of one dict per tensor (name, route, reason, "
                             "reason_code, bytes_read, convert, into), made when read.")
        .def("__len__", [](const plan_entries& p) { return p.plan->tensors.size(); })
        .def("__getitem__", [](const plan_entries& p, std::int64_t i) {
            const auto n = static_cast<std::int64_t>(p.plan->tensors.size());
            if (i < 0) i += n;
            if (i < 0 || i >= n) throw nb::index_error("plan index out of range");
            return plan_entry(p.plan->tensors[static_cast<std::size_t>(i)]);
        })
        .def("__repr__", [](const plan_entries& p) {
            return "<ferry checkpoint plan of " + std::to_string(p.plan->tensors.size()) + " tensors>";
        });
    m.def("checkpoint_info", &info, "sources"_a,
          "Shards, tensors (name, dtype, shape, shard, offset, bytes) and metadata of a checkpoint.");
    m.def("load_checkpoint", &load, "sources"_a, "device"_a = "cpu", "kind"_a = "all",
          "patterns"_a = std::vector<std::string>{}, "slices"_a = std::vector<slice_tuple>{},
          "dtype"_a = nb::none(), "into"_a = std::vector<std::pair<std::string, const array*>>{},
          "only_into"_a = false, "strict"_a = false, "route"_a = "auto", "progress"_a = nb::none(),
          "allocate"_a = nb::none(), "convert"_a = nb::none(), "prepare"_a = nb::none(), "views"_a = nb::none(),
          "bulk"_a = nb::none(), "verify"_a = "auto", "result"_a = nb::none(),
          "Loads a checkpoint in one plan. Returns ([(name, Array)], stats). `allocate(n)`, when\n"
          "given, returns the uint8 array of at least n bytes the fresh tensors share. `convert(a)`,\n"
          "when given, wraps each Array while the reads run (it must not read the bytes); the list\n"
          "then holds what it returned. `prepare(dtypes)`, when given, is called with the element\n"
          "types of the result once the headers are read, before the load's own timing starts.\n"
          "`views(dtype)`, when given (host loads without into), makes the result (dict, stats):\n"
          "the dict maps each name to a numpy array over the fresh tensors' one block, views(dtype)\n"
          "giving the numpy dtype of a ferry dtype, or None where numpy has none: those tensors are\n"
          "passed to `convert` as Arrays, and the dict holds what it returned. With `bulk` too, the\n"
          "dict holds what bulk(block, entries) returns, made while the reads run: block a uint8\n"
          "Array over the fresh tensors (None when they hold no byte), entries (dtype, shape, offset\n"
          "in block or -1 when empty, nbytes of each, count) for a run of count tensors one after the\n"
          "other, or (Array,) for a dtype views() gives None for or a tensor not aligned to its items\n"
          "in the block; bulk returns a list of one item per entry, a run's sequence of count\n"
          "tensors or the one tensor. `result()`, when given, makes that\n"
          "dict (of a dict subclass).");
    m.def(
        "save_checkpoint",
        [](const std::string& folder, const std::vector<std::string>& names, nb::list values,
           std::uint64_t max_shard_size, const std::map<std::string, std::string>& metadata, bool checksums) {
            if (names.size() != nb::len(values))
                throw usage_error("save_checkpoint: " + std::to_string(names.size()) + " names for " +
                                  std::to_string(nb::len(values)) + " arrays");
            // Imported here, one after the other, without a Python object of ferry's per array:
            // through as_ferry and a list of (name, Array) a save of 100,000 small tensors
            // spent more in Python than in writing.
            std::vector<foreign_memory> mems;
            std::vector<named_array> v;
            mems.reserve(names.size());
            v.reserve(names.size());
            std::size_t i = 0;
            for (nb::handle obj : values) {
                if (obj.is_none()) throw usage_error("save_checkpoint: '" + names[i] + "' is None, not an array");
                mems.push_back(import_memory(obj, false));
                v.push_back({names[i++], as_array(mems.back())});
            }
            return interruptible([&] {
                wait_for_producers(mems);
                return save_checkpoint(folder, v, max_shard_size, metadata, checksums);
            });
        },
        "folder"_a, "names"_a, "arrays"_a, "max_shard_size"_a, "metadata"_a = std::map<std::string, std::string>{},
        "checksums"_a = true,
        "Saves arrays[i] (any array ferry imports: ferry.Array, buffer protocol, DLPack, CUDA array\n"
        "interface) under names[i], with checksums recorded unless checksums is false.");
    m.def("set_checkpoint_memory_budget", &set_checkpoint_memory_budget, "bytes"_a);
    m.def("checkpoint_memory_budget", &checkpoint_memory_budget);
    m.def("checkpoint_memory_peak", &checkpoint_memory_peak);
}

}  // namespace ferry::python
