// The checkpoint planner (see plan.hpp).
//
// Route choice for a slice along a dimension other than the first, from two costs: a segment
// read costs about `segment_cost` of fixed overhead (one pread on one of the range reader's
// segment threads, run side by side), and bytes cost their transfer time at `read_bandwidth`.
// Reading each row segment costs rows * segment_cost more than reading the enclosing span, and
// the span costs the skipped bytes. Segments win when the bytes skipped per row take longer
// than one segment read: about 2.5 KB at these figures.
#include "checkpoint/plan.hpp"

#include <fnmatch.h>

#include <algorithm>
#include <regex>
#include <set>

#include "backend/location.hpp"
#include "ferry/convert.hpp"
#include "ferry/error.hpp"

namespace ferry::checkpoints {
namespace {

// A small pread from the page cache costs about 2 us on one thread and the segment readers run
// up to 16 at once; the aggregate read bandwidth it is weighed against is that of a hot load
// on a recent server (see docs/checkpoints.md). Estimates: the GPU benchmark's tp row checks
// them.
constexpr double request_cost_s = 2e-6 / 16;
constexpr double read_bandwidth = 20e9;
// A remote shard's segment is a ranged GET: a round trip, about 0.1 ms even over loopback and
// tens of milliseconds from object storage, 16 at once, against a few GB/s. Estimates, as above:
// skipping costs more than a request only past about 1 MB per row, so sliced rows of remote
// tensors are nearly always read as a span.
constexpr double remote_request_cost_s = 10e-3 / 16;
constexpr double remote_read_bandwidth = 2e9;
// Whole tensors up to this size read into a caller's host buffers are gathered through a slot
// (see make_plan); larger ones are read straight into place, where a copy would cost more than
// the request saved.
constexpr std::uint64_t small_into_bytes = 64 << 10;

// One bracket expression of an ASCII glob at p[i] ('['): whether it admits `c`, with i moved
// past its ']'. False with i unchanged when the bracket never closes (then '[' is literal).
bool bracket_admits(const std::string& p, std::size_t& i, unsigned char c, bool& closed) {
    std::size_t j = i + 1;
    bool negate = j < p.size() && (p[j] == '!' || p[j] == '^');
    if (negate) ++j;
    bool hit = false;
    bool first = true;
    while (j < p.size() && (first || p[j] != ']')) {
        first = false;
        unsigned char lo = static_cast<unsigned char>(p[j]);
        unsigned char hi = lo;
        if (j + 2 < p.size() && p[j + 1] == '-' && p[j + 2] != ']') {
            hi = static_cast<unsigned char>(p[j + 2]);
            j += 2;
        }
        if (lo <= c && c <= hi) hit = true;
        ++j;
    }
    closed = j < p.size();
    if (!closed) return false;
    i = j + 1;
    return hit != negate;
}

bool ascii(const std::string& s) {
    return std::all_of(s.begin(), s.end(), [](char ch) { return static_cast<unsigned char>(ch) < 0x80; });
}

}  // namespace

// fnmatch(3) with no flags, for ASCII patterns and names: libc's fnmatch converts both to wide
// characters in a UTF-8 locale (Python's), which made matching the slice rules against a large
// checkpoint's names cost milliseconds. Anything else (escapes, character classes, other
// bytes) is left to fnmatch.
bool glob_match(const std::string& pattern, const std::string& name) {
    if (!ascii(pattern) || !ascii(name) || pattern.find("[:") != std::string::npos ||
        pattern.find("[=") != std::string::npos || pattern.find("[.") != std::string::npos ||
        pattern.find('\\') != std::string::npos)
        return ::fnmatch(pattern.c_str(), name.c_str(), 0) == 0;
    const std::string& p = pattern;
    std::size_t i = 0, n = 0;
    std::size_t star = std::string::npos, resume = 0;  // after the last '*': where to retry
    while (n < name.size()) {
        if (i < p.size()) {
            const char c = p[i];
            if (c == '*') {
                star = ++i;
                resume = n;
                continue;
            }
            if (c == '?') {
                ++i, ++n;
                continue;
            }
            if (c == '[') {
                std::size_t k = i;
                bool closed = false;
                if (bracket_admits(p, k, static_cast<unsigned char>(name[n]), closed)) {
                    i = k, ++n;
                    continue;
                }
                if (!closed && name[n] == '[') {  // an unclosed '[' is itself
                    ++i, ++n;
                    continue;
                }
            } else if (c == name[n]) {
                ++i, ++n;
                continue;
            }
        }
        if (star == std::string::npos) return false;
        i = star;  // the last '*' takes one more character
        n = ++resume;
    }
    while (i < p.size() && p[i] == '*') ++i;
    return i == p.size();
}

std::vector<std::size_t> select(const checkpoint& c, const tensor_selection& s) {
    std::vector<std::size_t> out;
    using k = tensor_selection::kind;
    if (s.how == k::all) {
        for (std::size_t i = 0; i < c.tensors.size(); ++i) out.push_back(i);
        return out;
    }
    if (s.how == k::names) {
        std::set<std::size_t> picked;
        for (const auto& n : s.patterns) {
            const checkpoint_tensor* t = c.find(n);
            if (!t) throw checkpoint_error(c.source, n, "no such tensor in the checkpoint");
            picked.insert(static_cast<std::size_t>(t - c.tensors.data()));
        }
        return {picked.begin(), picked.end()};
    }
    std::vector<std::regex> res;
    if (s.how == k::regex) {
        for (const auto& p : s.patterns) {
            try {
                res.emplace_back(p, std::regex::ECMAScript);
            } catch (const std::regex_error& e) {
                throw usage_error("checkpoint: invalid regex '" + p + "': " + e.what());
            }
        }
    }
    for (std::size_t i = 0; i < c.tensors.size(); ++i) {
        const std::string& n = c.tensors[i].name;
        bool hit = false;
        if (s.how == k::glob)
            hit = std::any_of(s.patterns.begin(), s.patterns.end(), [&](auto& p) { return glob_match(p, n); });
        else
            hit = std::any_of(res.begin(), res.end(), [&](auto& r) { return std::regex_search(n, r); });
        if (hit) out.push_back(i);
    }
    return out;
}

namespace {

const tensor_slice* slice_for(const checkpoint_load_options& o, const std::string& name) {
    if (auto it = o.slices.find(name); it != o.slices.end()) return &it->second;
    for (const auto& [pattern, s] : o.slice_rules)
        if (glob_match(pattern, name)) return &s;
    return nullptr;
}

}  // namespace

namespace {

/// Destinations and slices against the checkpoint: with only_into, which destinations the
/// selection misses and which selected tensors have none (an error when strict); otherwise a
/// destination or slice of a tensor the checkpoint lacks is one.
void check_names(const checkpoint& c, const checkpoint_load_options& o, const std::vector<std::size_t>& chosen,
                 checkpoint_plan& plan) {
    if (o.only_into) {
        std::set<std::string> selected;
        for (std::size_t idx : chosen) {
            selected.insert(c.tensors[idx].name);
            if (!o.into.count(c.tensors[idx].name)) plan.unexpected.push_back(c.tensors[idx].name);
        }
        for (const auto& [name, a] : o.into)
            if (!selected.count(name)) plan.missing.push_back(name);
        if (o.strict_into && (!plan.missing.empty() || !plan.unexpected.empty())) {
            auto list = [](const std::vector<std::string>& v) {
                std::string s;
                for (std::size_t i = 0; i < v.size() && i < 20; ++i) s += (i ? ", " : "") + v[i];
                if (v.size() > 20) s += ", ... (" + std::to_string(v.size()) + " in all)";
                return s;
            };
            throw usage_error(c.source + ": destinations and checkpoint do not match: missing key(s) [" +
                              list(plan.missing) + "]; unexpected key(s) [" + list(plan.unexpected) + "]");
        }
    } else {
        for (const auto& [name, a] : o.into)
            if (!c.find(name))
                throw checkpoint_error(c.source, name, "a destination is given but the checkpoint has no such tensor");
    }
    for (const auto& [name, s] : o.slices)
        if (!c.find(name)) throw checkpoint_error(c.source, name, "a slice is given but the checkpoint has no such tensor");
}

/// The part of a tensor a load reads: [start, stop) of dimension `dim` (all of dimension 0
/// without a slice), and the tensor's layout around it (rows before the dimension, bytes per
/// index of it).
struct extent_of_slice {
    int dim = 0;
    std::int64_t start = 0, stop = 1;
    std::uint64_t rows = 1;   ///< prod(shape[:dim])
    std::uint64_t inner = 0;  ///< item * prod(shape[dim+1:])
    std::uint64_t extent = 1; ///< shape[dim]
    bool full() const { return start == 0 && static_cast<std::uint64_t>(stop) == extent; }
};

extent_of_slice slice_extent(const checkpoint_tensor& t, const tensor_slice* s, const std::string& file) {
    extent_of_slice e;
    e.stop = t.shape.empty() ? 1 : t.shape[0];
    if (s) {
        e.dim = s->dim < 0 ? s->dim + static_cast<int>(t.shape.size()) : s->dim;
        if (e.dim < 0 || e.dim >= static_cast<int>(t.shape.size()))
            throw checkpoint_error(file, t.name, "slice dimension " + std::to_string(s->dim) +
                                                     " outside a tensor of shape " + shape_to_string(t.shape));
        std::int64_t n = t.shape[e.dim];
        if (s->parts > 0) {
            if (s->part < 0 || s->part >= s->parts)
                throw checkpoint_error(file, t.name, "split part " + std::to_string(s->part) +
                                                         " outside 0.." + std::to_string(s->parts - 1));
            e.start = s->part * n / s->parts;
            e.stop = (s->part + 1) * n / s->parts;
        } else {
            e.start = s->start;
            e.stop = s->stop;
        }
        const std::string range = "slice [" + std::to_string(e.start) + ", " + std::to_string(e.stop) +
                                  ") of dimension " + std::to_string(e.dim);
        if (e.stop < e.start)
            throw checkpoint_error(file, t.name, range + " is reversed: its start comes after its stop");
        if (e.start < 0 || e.stop > n)
            throw checkpoint_error(file, t.name, range + " outside a tensor of shape " + shape_to_string(t.shape));
    }
    e.inner = size_of(t.type);
    for (int i = 0; i < e.dim; ++i) e.rows *= static_cast<std::uint64_t>(t.shape[i]);
    for (std::size_t i = e.dim + 1; i < t.shape.size(); ++i) e.inner *= static_cast<std::uint64_t>(t.shape[i]);
    e.extent = t.shape.empty() ? 1 : static_cast<std::uint64_t>(t.shape[e.dim]);
    return e;
}

/// The dtype a tensor lands in: asked for with `as`, or implied by a destination of another
/// float dtype. A destination that is read-only, or of the wrong shape, layout, device or dtype,
/// is refused by name.
dtype target_dtype(const checkpoint_tensor& t, const checkpoint_load_options& o, const array* into,
                   const std::vector<std::int64_t>& shape, std::uint64_t out_elems, const std::string& file) {
    dtype to = t.type;
    if (o.as && can_astype(t.type, *o.as) && is_floating(t.type)) to = *o.as;
    if (!into) return to;
    if (into->read_only())
        throw checkpoint_error(file, t.name, "destination is read-only (its memory was lent read-only)");
    if (into->type() != to) {
        if (is_floating(t.type) && is_floating(into->type()) && can_astype(t.type, into->type()))
            to = into->type();
        else
            throw checkpoint_error(file, t.name, "destination dtype " + std::string(to_string(into->type())) +
                                                     " does not match the tensor's " + std::string(to_string(to)));
    }
    if (into->shape() != shape)
        throw checkpoint_error(file, t.name, "destination shape " + shape_to_string(into->shape()) +
                                                 " does not match the planned " + shape_to_string(shape));
    if (!into->is_native() || (into->layout() != storage_order::c && !into->is_c_and_fortran()))
        throw checkpoint_error(file, t.name, "destination must be C-contiguous in native byte order");
    if (into->where().on_gpu() != o.where.on_gpu() || (o.where.on_gpu() && into->where().device != o.where.device))
        throw checkpoint_error(file, t.name, "destination is on " + to_string(into->where()) +
                                                 ", the load targets " + to_string(o.where));
    if (out_elems > 0 && into->data() == nullptr) throw checkpoint_error(file, t.name, "destination has no storage");
    return to;
}

/// The byte ranges of the tensor's part and the route that reads them: one range (the whole
/// tensor, or a slice of its outermost non-trivial dimension), or rows read as segments or as
/// their enclosing span, whichever the costs at the top of this file favour.
void place_ranges(const checkpoint_tensor& t, const extent_of_slice& e, bool sliced, std::uint64_t out_elems,
                  const checkpoint_load_options& o, const std::string& file, tensor_plan& p, geometry& g) {
    const std::size_t item = size_of(t.type);
    if (e.rows == 1 || e.full() || out_elems == 0) {
        std::uint64_t len = e.full() ? t.bytes : (e.stop - e.start) * e.inner;
        if (out_elems == 0) len = 0;
        g.offset = t.offset + (e.full() ? 0 : e.start * e.inner);
        g.rows = 1;
        g.row_bytes = g.seg_bytes = len;
        p.route = read_route::whole;
        p.reason = e.full() ? (e.dim == 0 && t.shape.size() > 0 && sliced ? "slice covers the dimension" : "whole tensor")
                            : "slice along the outermost dimension: one byte range";
        p.code = !e.full()                                                ? reason_code::outermost_slice
                 : e.dim == 0 && t.shape.size() > 0 && sliced ? reason_code::slice_covers_dimension
                                                                          : reason_code::whole_tensor;
        if (p.convert) {
            // Converted in pieces of whole elements: rows of one element.
            g.rows = len / item;
            g.row_bytes = g.seg_bytes = item;
            g.staged = true;
        }
        return;
    }
    g.offset = t.offset + e.start * e.inner;
    g.rows = e.rows;
    g.row_bytes = e.extent * e.inner;
    g.seg_bytes = (e.stop - e.start) * e.inner;
    const bool remote = detail::location(file).is_url();
    double skipped_s = static_cast<double>(g.row_bytes - g.seg_bytes) / (remote ? remote_read_bandwidth : read_bandwidth);
    bool segments = skipped_s > (remote ? remote_request_cost_s : request_cost_s);
    if (o.route == route_choice::segments) segments = true;
    if (o.route == route_choice::span) segments = false;
    p.route = segments ? read_route::segments : read_route::span;
    char why[200];
    std::snprintf(why, sizeof why, "%llu segments of %llu bytes, %llu skipped between them: %s",
                  static_cast<unsigned long long>(e.rows), static_cast<unsigned long long>(g.seg_bytes),
                  static_cast<unsigned long long>(g.row_bytes - g.seg_bytes),
                  o.route != route_choice::automatic ? "route forced"
                  : segments ? "skipping costs more than a request, read each segment"
                             : "a request costs more than the skipped bytes, read the span and gather");
    p.reason = why;
    p.code = o.route != route_choice::automatic ? reason_code::route_forced
             : segments                         ? reason_code::segments_cheaper
                                                : reason_code::span_cheaper;
    // Without conversion the rows land in place (gathers: io/scheduler.hpp); only a
    // conversion needs temporaries.
    g.staged = p.convert;
}

/// A staged tensor's pieces: as many rows as two pieces fit in the budget (one row at least),
/// their temporary memory, and the largest pieces of the plan so far.
void size_pieces(const checkpoint_tensor& t, const std::string& file, std::uint64_t budget_cap, tensor_plan& p,
                 geometry& g, detailed_plan& d) {
    std::uint64_t per_row_host = p.route == read_route::span ? g.row_bytes : g.seg_bytes;
    std::uint64_t per_row_dev = g.where.on_gpu() && p.convert ? g.seg_bytes : 0;
    std::uint64_t target = std::min(piece_target, budget_cap / 2);
    g.rows_per_piece = std::max<std::uint64_t>(1, target / std::max<std::uint64_t>(1, per_row_host + per_row_dev));
    g.rows_per_piece = std::min(g.rows_per_piece, g.rows);
    std::uint64_t host = p.route == read_route::span ? (g.rows_per_piece - 1) * g.row_bytes + g.seg_bytes
                                                     : g.rows_per_piece * g.seg_bytes;
    std::uint64_t dev = g.rows_per_piece * per_row_dev;
    host = (host + 255) / 256 * 256;  // pieces sit at 256-byte offsets in a slot
    dev = (dev + 255) / 256 * 256;
    p.temp_bytes = host + dev;
    d.staging_piece = std::max(d.staging_piece, host);
    d.device_piece = std::max(d.device_piece, dev);
    if (host + dev > budget_cap)
        throw checkpoint_error(file, t.name, "one piece needs " + std::to_string(host + dev) +
                                                 " bytes of temporary memory, above the checkpoint memory budget of " +
                                                 std::to_string(budget_cap));
}

}  // namespace

detailed_plan make_plan(const checkpoint& c, const checkpoint_load_options& o, std::uint64_t budget_cap) {
    detailed_plan d;
    std::vector<std::size_t> chosen = select(c, o.select);
    check_names(c, o, chosen, d.plan);
    d.plan.tensors.reserve(chosen.size());
    d.tensors.reserve(chosen.size());
    for (std::size_t idx : chosen) {
        const checkpoint_tensor& t = c.tensors[idx];
        const std::string& file = c.shards[t.shard].path;
        auto into_it = o.into.find(t.name);
        const array* into = into_it == o.into.end() ? nullptr : &into_it->second;
        if (o.only_into && !into) continue;

        tensor_plan p;
        p.name = t.name;
        p.tensor = idx;
        p.shape = t.shape;
        const tensor_slice* const s = slice_for(o, t.name);
        const extent_of_slice e = slice_extent(t, s, file);
        if (s) p.shape[e.dim] = e.stop - e.start;
        const std::uint64_t out_elems = element_count(p.shape);
        const dtype to = target_dtype(t, o, into, p.shape, out_elems, file);
        p.type = to;
        p.convert = to != t.type;
        p.into = into != nullptr;

        geometry g;
        g.file = t.shard;
        g.from = t.type;
        g.to = to;
        g.into = into;
        g.where = into ? into->where() : o.where;
        place_ranges(t, e, s != nullptr, out_elems, o, file, p, g);
        // A small whole tensor read into a caller's host memory goes through a slot, so that a
        // run of them adjacent in the file is one read and a copy each: as requests of their
        // own, 100,000 destinations of 1 KiB were as many preads (4 us a tensor, CPU machine).
        if (into && !g.where.on_gpu() && p.route == read_route::whole && !p.convert && g.seg_bytes > 0 &&
            g.seg_bytes <= small_into_bytes)
            g.staged = true;
        g.out_seg_bytes = g.seg_bytes / size_of(t.type) * size_of(to);
        p.bytes_read = p.route == read_route::span ? (g.rows - 1) * g.row_bytes + g.seg_bytes : g.rows * g.seg_bytes;
        if (g.staged) size_pieces(t, file, budget_cap, p, g, d);

        g.plan = d.plan.tensors.size();
        d.plan.bytes_read += p.bytes_read;
        d.plan.bytes_out += out_elems * size_of(to);
        d.plan.tensors.push_back(std::move(p));
        d.tensors.push_back(g);
    }
    d.plan.largest_piece = d.staging_piece + d.device_piece;
    if (d.plan.largest_piece > budget_cap)
        throw checkpoint_error(c.source, "", "pieces need " + std::to_string(d.plan.largest_piece) +
                                                 " bytes of temporary memory, above the checkpoint memory budget of " +
                                                 std::to_string(budget_cap));
    return d;
}

}  // namespace ferry::checkpoints

namespace ferry {

std::string_view to_string(read_route r) noexcept {
    switch (r) {
        case read_route::whole: return "whole";
        case read_route::segments: return "segments";
        case read_route::span: return "span";
    }
    return "?";
}

}  // namespace ferry
