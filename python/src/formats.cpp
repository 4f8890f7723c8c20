// File formats from Python: raw fromfile/tofile, .npy and safetensors load and save, and a
// header-only description, each stopped by Ctrl-C (run_interruptible). The Python layer (ferry/_api.py) turns the arrays into numpy, CuPy,
// PyTorch or JAX arrays.
#include <Python.h>

#include <nanobind/stl/filesystem.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <filesystem>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "bind.hpp"
#include "ferry/error.hpp"
#include "ferry/formats.hpp"
#include "ferry/integrity.hpp"
#include "ferry/raw.hpp"

namespace ferry::python {

namespace {

using namespace nb::literals;

nb::object describe(const std::filesystem::path& path, std::optional<std::string> format) {
    std::optional<file_format> f;
    if (format) f = parse_file_format(*format);
    std::string p = path.string();
    std::string text;
    run_interruptible([&] { text = to_json(describe_file(p, f), p); });
    return nb::module_::import_("json").attr("loads")(text);
}

}  // namespace

void bind_formats(nb::module_& m) {
    m.def(
        "fromfile",
        [](const std::filesystem::path& path, const std::string& type, std::int64_t count,
           std::uint64_t offset, std::vector<std::int64_t> shape, const std::string& device,
           bool keep_byte_order) {
            typed_order t = parse_dtype(type);
            load_options o;
            o.where = parse_placement(device);
            o.keep_byte_order = keep_byte_order;
            std::string p = path.string();
            return interruptible([&] { return fromfile(p, t, count, offset, shape, o); });
        },
        "path"_a, "dtype"_a, "count"_a = -1, "offset"_a = 0,
        "shape"_a = std::vector<std::int64_t>{}, "device"_a = "cpu", "keep_byte_order"_a = false,
        "Reads `count` items of `dtype` (a numpy name or type string, e.g. '>f4') starting\n"
        "`offset` bytes into the file, into `device` memory.");

    m.def(
        "fromfile_into",
        [](const std::filesystem::path& path, const std::string& type, const array& out, std::int64_t count,
           std::uint64_t offset, bool keep_byte_order) {
            typed_order t = parse_dtype(type);
            load_options o;
            o.keep_byte_order = keep_byte_order;
            std::string p = path.string();
            return interruptible([&] { return fromfile_into(p, t, out, count, offset, o); });
        },
        "path"_a, "dtype"_a, "out"_a, "count"_a = -1, "offset"_a = 0, "keep_byte_order"_a = false,
        "Reads the items of `out` (count -1: all of them) starting `offset` bytes into the file,\n"
        "into out's own memory (no allocation); returns a view of it.");

    m.def(
        "load",
        [](const std::filesystem::path& path, const std::string& device,
           std::vector<std::string> names, std::optional<std::string> as,
           std::optional<std::string> format, bool keep_byte_order, bool c_order, const std::string& verify) {
            any_load_options o;
            o.load.where = parse_placement(device);
            o.load.verify = parse_verify_mode(verify);
            if (as) o.load.as = parse_dtype(*as).type;
            o.load.keep_byte_order = keep_byte_order;
            o.load.c_order = c_order;
            if (format) o.format = parse_file_format(*format);
            o.tensors = std::move(names);
            std::string p = path.string();
            loaded_file f = interruptible([&] { return load_any(p, o); });
            nb::list arrays;
            for (auto& a : f.arrays) arrays.append(nb::make_tuple(a.name, nb::cast(std::move(a.value))));
            return nb::make_tuple(std::string(to_string(f.format)), arrays, f.metadata);
        },
        "path"_a, "device"_a = "cpu", "names"_a = std::vector<std::string>{}, "dtype"_a = nb::none(),
        "format"_a = nb::none(), "keep_byte_order"_a = false, "c_order"_a = false,
        "verify"_a = "auto",
        "Loads every array of a .npy or safetensors file (or the tensors in `names`).\n"
        "Returns (format, [(name, Array)], metadata).");

    m.def(
        "save",
        [](const std::filesystem::path& path, const std::string& format,
           const std::vector<std::pair<std::string, const array*>>& arrays,
           const std::map<std::string, std::string>& metadata, bool checksums) {
            file_format f = parse_file_format(format);
            std::vector<named_array> v;
            for (const auto& [name, a] : arrays) {
                if (!a) throw usage_error("save: '" + name + "' is None, not an array");
                v.push_back({name, *a});
            }
            std::string p = path.string();
            run_interruptible([&] { save_any(p, f, v, metadata, checksums); });
        },
        "path"_a, "format"_a, "arrays"_a, "metadata"_a = std::map<std::string, std::string>{},
        "checksums"_a = true,
        "Saves ferry.Arrays as 'npy' (one array), 'safetensors' or 'raw', atomically.");

    m.def(
        "tofile",
        [](const array& a, const std::filesystem::path& path) {
            std::string p = path.string();
            run_interruptible([&] { tofile(a, p); });
        },
        "array"_a, "path"_a,
        "Writes the elements in C order and the array's byte order, nothing else, atomically.");

    m.def(
        "verify",
        [](const std::string& path, bool record, unsigned threads) {
            std::string text;
            run_interruptible([&] { text = to_json(verify_path(path, record, threads)); });
            return nb::module_::import_("json").attr("loads")(text);
        },
        "path"_a, "record"_a = false, "threads"_a = 0,
        "Checks a file or checkpoint against its recorded checksums; the report as a dict.");

    m.def("describe", &describe, "path"_a, "format"_a = nb::none(),
          "What a file holds, from its header alone, as `ferry info --json` prints it.");

    m.def(
        "detect_format",
        [](const std::filesystem::path& path) {
            return std::string(to_string(detect_format(path.string())));
        },
        "path"_a);
    m.def(
        "format_from_extension",
        [](const std::filesystem::path& path) {
            return std::string(to_string(format_from_extension(path.string())));
        },
        "path"_a);
}

}  // namespace ferry::python
