// Distributed checkpoint loads from Python: an opened checkpoint kept across the many small
// loads of one group load (ferry/_distributed.py reads one chunk's pieces per call). Opening
// reads and validates every shard header; doing that once per chunk cost 5-17 ms a call on the
// development machine, more than reading a 64 MiB chunk from a hot page cache takes.
#include <Python.h>

#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "bind.hpp"
#include "ferry/checkpoint.hpp"
#include "ferry/error.hpp"

namespace ferry::python {
namespace {

using namespace nb::literals;

// (name, dim, start, stop): one row range of one tensor
using range_tuple = std::tuple<std::string, int, std::int64_t, std::int64_t>;

struct open_checkpoint_handle {
    checkpoint c;

    explicit open_checkpoint_handle(const std::vector<std::string>& sources) {
        nb::gil_scoped_release nogil;
        c = sources.size() == 1 ? open_checkpoint(sources[0]) : open_checkpoint(sources);
    }

    // Reads the named tensors (whole, or the row range given for them) into `into`, one plan.
    nb::dict load(const std::vector<range_tuple>& ranges,
                  const std::vector<std::pair<std::string, const array*>>& into,
                  const std::string& route) const {
        checkpoint_load_options o;
        o.select.how = tensor_selection::kind::names;
        for (const auto& [name, a] : into) {
            if (!a) throw usage_error("load: destination for '" + name + "' is None");
            o.select.patterns.push_back(name);
            o.into[name] = *a;
        }
        // The destinations say where the load goes (the loader checks that they agree).
        if (!into.empty()) o.where = into.front().second->where();
        for (const auto& [name, dim, start, stop] : ranges)
            o.slices[name] = tensor_slice::range(dim, start, stop);
        o.only_into = true;
        if (route == "segments") o.route = route_choice::segments;
        else if (route == "span") o.route = route_choice::span;
        else if (route != "auto") throw usage_error("load: route is auto, segments or span");
        checkpoint_load l;
        {
            nb::gil_scoped_release nogil;
            l = load_checkpoint(c, o);
        }
        nb::dict stats;
        stats["bytes_read"] = l.stats.bytes_read;
        stats["requests"] = l.stats.requests;
        stats["seconds"] = l.stats.seconds;
        return stats;
    }
};

}  // namespace

void bind_distributed(nb::module_& m) {
    nb::class_<open_checkpoint_handle>(m, "OpenCheckpoint",
                                       "A checkpoint whose headers were read and validated once.")
        .def(nb::init<const std::vector<std::string>&>(), "sources"_a)
        .def("load", &open_checkpoint_handle::load, "ranges"_a, "into"_a, "route"_a = "auto",
             "Reads tensors (or row ranges of them) into caller buffers. Returns stats.");
}

}  // namespace ferry::python
