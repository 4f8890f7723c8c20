// Distributed checkpoint loads from Python: the group plan (ferry::plan_group, the one
// implementation, called by ferry/_group_plan.py), and an opened checkpoint kept across the
// many small loads of one group load (ferry/_distributed.py reads one chunk's pieces per call).
// Opening reads and validates every shard header; doing that once per chunk cost 5-17 ms a call
// on the development machine, more than reading a 64 MiB chunk from a hot page cache takes.
#include <Python.h>

#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "bind.hpp"
#include "ferry/checkpoint.hpp"
#include "ferry/convert.hpp"
#include "ferry/dtype.hpp"
#include "ferry/distributed.hpp"
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

// (name, shape, file, offset, nbytes): one tensor of a table the caller made (headers, or a test)
using entry_tuple = std::tuple<std::string, std::vector<std::int64_t>, std::string, std::uint64_t, std::uint64_t>;

// The plan of ferry::plan_group over a tensor table, as plain tuples (_group_plan.py names them).
nb::tuple plan(const std::vector<entry_tuple>& entries, int world,
               const std::vector<std::pair<std::string, int>>& rules,
               const std::optional<std::vector<int>>& node_of_rank, const std::map<std::string, int>& file_node,
               std::uint64_t chunk_bytes, const std::string& reads) {
    checkpoint c;
    c.source = "plan_group";
    std::vector<std::string> files;
    for (const auto& e : entries) files.push_back(std::get<2>(e));
    std::sort(files.begin(), files.end());
    files.erase(std::unique(files.begin(), files.end()), files.end());
    for (const auto& f : files) c.shards.push_back({f, 0, {}});
    for (const auto& [name, shape, file, offset, nbytes] : entries) {
        checkpoint_tensor t;
        t.name = name;
        t.shape = shape;
        t.shard = static_cast<std::size_t>(std::lower_bound(files.begin(), files.end(), file) - files.begin());
        t.offset = offset;
        t.bytes = nbytes;
        c.tensors.push_back(std::move(t));
    }
    std::stable_sort(c.tensors.begin(), c.tensors.end(),
                     [](const checkpoint_tensor& a, const checkpoint_tensor& b) { return a.name < b.name; });
    group_plan_options o;
    o.world = world;
    for (const auto& [pattern, dim] : rules) o.tp.push_back({pattern, dim});
    if (node_of_rank) o.layout = group_layout{*node_of_rank, file_node};
    o.chunk_bytes = chunk_bytes;
    if (reads == "group") o.reads = replicated_reads::once_per_group;
    else if (reads == "node") o.reads = replicated_reads::once_per_node;
    else throw usage_error("plan_group: replicated is 'group' or 'node', not '" + reads + "'");
    group_plan p;
    {
        nb::gil_scoped_release nogil;
        p = plan_group(c, o);
    }
    auto names = [&](const std::vector<std::size_t>& v) {
        nb::list l;
        for (std::size_t i : v) l.append(c.tensors[i].name);
        return nb::tuple(l);
    };
    auto ints = [](const auto& v) {
        nb::list l;
        for (auto x : v) l.append(x);
        return nb::tuple(l);
    };
    nb::list chunks;
    for (const auto& ch : p.chunks) {
        nb::list pieces, casts;
        for (const auto& pc : ch.pieces)
            pieces.append(nb::make_tuple(c.tensors[pc.tensor].name, pc.dim, pc.start, pc.stop, pc.offset, pc.bytes,
                                         pc.reader));
        for (const auto& b : ch.broadcasts) casts.append(nb::make_tuple(b.piece, b.root, b.subgroup, b.stage));
        chunks.append(nb::make_tuple(c.shards[ch.shard].path, ch.bytes, ints(ch.readers), nb::tuple(pieces),
                                     nb::tuple(casts)));
    }
    std::vector<std::uint64_t> read, slice, received, sent, other;
    for (const auto& r : p.ranks) {
        read.push_back(r.replicated_bytes);
        slice.push_back(r.slice_bytes);
        received.push_back(r.bytes_received);
        sent.push_back(r.bytes_sent);
        other.push_back(r.bytes_from_other_nodes);
    }
    nb::list subgroups;
    for (const auto& g : p.subgroups) subgroups.append(ints(g));
    return nb::make_tuple(p.world, names(p.sliced), names(p.replicated), nb::tuple(chunks), p.replicated_bytes,
                          ints(read), nb::tuple(subgroups), p.collectives, ints(slice), ints(received), ints(sent),
                          ints(other));
}

}  // namespace

void bind_distributed(nb::module_& m) {
    m.def("plan_group", &plan, "entries"_a, "world"_a, "rules"_a, "node_of_rank"_a, "file_node"_a, "chunk_bytes"_a,
          "reads"_a, "The group plan (ferry::plan_group) over a tensor table, as tuples.");
    m.def(
        "converted_dtype",
        [](const std::string& file_dtype, const std::string& as) {
            // The loader's rule (checkpoint_load_options::as): floating tensors convert where a
            // conversion exists, the others keep their dtype.
            std::optional<dtype> from = dtype_from_name(file_dtype);
            if (!from) throw usage_error("converted_dtype: unknown dtype '" + file_dtype + "'");
            dtype to = parse_dtype(as).type;
            return std::string(to_string(is_floating(*from) && can_astype(*from, to) ? to : *from));
        },
        "file_dtype"_a, "to"_a, "The dtype a tensor of file_dtype loads as under dtype=to.");
    m.def("group_split_dim", &group_split_dim, "shape"_a,
          "The dimension a replicated tensor is cut along (-1: none).");
    nb::class_<open_checkpoint_handle>(m, "OpenCheckpoint",
                                       "A checkpoint whose headers were read and validated once.")
        .def(nb::init<const std::vector<std::string>&>(), "sources"_a)
        .def("load", &open_checkpoint_handle::load, "ranges"_a, "into"_a, "route"_a = "auto",
             "Reads tensors (or row ranges of them) into caller buffers. Returns stats.");
}

}  // namespace ferry::python
