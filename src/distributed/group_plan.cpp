// The group plan of a distributed checkpoint load: which rank reads which bytes, and which
// broadcasts complete the replicated tensors (see include/ferry/distributed.hpp).
//
// A pure function of the checkpoint's tensor table (headers only), the world, the
// tensor-parallel rules, the layout and the chunk size; it costs O(tensors + chunks x world)
// and runs once per load on every rank, so the ranks agree on it without exchanging a byte.
//
// Replicated tensors are taken per file in file order, so that a rank's share of a chunk is one
// file byte range (one request after the loader coalesces), and cut into chunks of about
// chunk_bytes. Each chunk is water-filled over its readers: the readers that have read least so
// far (their slices included) take its bytes until all stand at one level, so bytes per rank
// stay balanced over the whole load even when chunks are small or uneven. Shares are cut at row
// granularity (a row: one index of the first dimension longer than 1), so every piece is one
// byte range of the file and one contiguous run of the tensor. All arithmetic is on integers:
// the Python package calls this same function, and a plan must not depend on rounding.
#include "distributed/group_plan.hpp"

#include <algorithm>
#include <limits>
#include <numeric>
#include <set>

#include "checkpoint/plan.hpp"
#include "ferry/error.hpp"

namespace ferry {

int group_split_dim(const std::vector<std::int64_t>& shape) noexcept {
    for (std::size_t d = 0; d < shape.size(); ++d)
        if (shape[d] > 1) return static_cast<int>(d);
    return -1;
}

namespace distributed {

const tp_rule* rule_for(const std::vector<tp_rule>& rules, const std::string& name) {
    for (const auto& r : rules)
        if (r.pattern == name) return &r;
    for (const auto& r : rules)
        if (checkpoints::glob_match(r.pattern, name)) return &r;
    return nullptr;
}

std::uint64_t row_bytes(const checkpoint_tensor& t, int dim) noexcept {
    if (dim < 0) return t.bytes;
    std::int64_t n = t.shape[static_cast<std::size_t>(dim)];
    return n > 0 ? t.bytes / static_cast<std::uint64_t>(n) : 0;
}

}  // namespace distributed

std::string_view to_string(replicated_reads r) noexcept {
    switch (r) {
        case replicated_reads::once_per_group: return "once_per_group";
        case replicated_reads::once_per_node: return "once_per_node";
    }
    return "?";
}

group_layout group_layout::uniform(int world, int ranks_per_node) {
    if (ranks_per_node < 1)
        throw usage_error("group layout: ranks per node " + std::to_string(ranks_per_node) + " is not positive");
    if (world < 0) throw usage_error("group layout: world size " + std::to_string(world) + " is negative");
    group_layout l;
    for (int r = 0; r < world; ++r) l.node_of_rank.push_back(r / ranks_per_node);
    return l;
}

namespace {

using distributed::row_bytes;

// Rows [start, stop) along dim of one replicated tensor, as a chunk holds them.
struct run_item {
    std::size_t tensor;
    int dim;
    std::int64_t start;
    std::int64_t stop;
};
using run = std::vector<run_item>;

std::uint64_t item_bytes(const checkpoint& c, const run_item& it) {
    const checkpoint_tensor& t = c.tensors[it.tensor];
    if (it.dim < 0) return t.bytes;
    return row_bytes(t, it.dim) * static_cast<std::uint64_t>(it.stop - it.start);
}

// Runs of one file's replicated tensors (in file order) of about chunk_bytes; a tensor larger
// than that is cut into row ranges, each its own chunk.
std::vector<run> chunks_of(const checkpoint& c, const std::vector<std::size_t>& entries, std::uint64_t chunk_bytes) {
    std::vector<run> out;
    run cur;
    std::uint64_t cur_bytes = 0;
    for (std::size_t idx : entries) {
        const checkpoint_tensor& t = c.tensors[idx];
        int dim = group_split_dim(t.shape);
        std::int64_t rows = dim >= 0 ? t.shape[static_cast<std::size_t>(dim)] : 1;
        std::uint64_t row = row_bytes(t, dim);
        if (t.bytes > chunk_bytes && dim >= 0 && rows > 1) {
            if (!cur.empty()) {
                out.push_back(std::move(cur));
                cur.clear();
                cur_bytes = 0;
            }
            auto per = static_cast<std::int64_t>(std::max<std::uint64_t>(1, chunk_bytes / std::max<std::uint64_t>(row, 1)));
            for (std::int64_t a = 0; a < rows; a += per) out.push_back({{idx, dim, a, std::min(rows, a + per)}});
            continue;
        }
        if (!cur.empty() && cur_bytes + t.bytes > chunk_bytes) {
            out.push_back(std::move(cur));
            cur.clear();
            cur_bytes = 0;
        }
        cur.push_back({idx, dim, 0, rows});
        cur_bytes += t.bytes;
    }
    if (!cur.empty()) out.push_back(std::move(cur));
    return out;
}

// Readers sorted by (bytes read so far, rank): the least loaded first.
std::vector<int> by_load(std::vector<int> readers, const std::vector<std::uint64_t>& loads) {
    std::sort(readers.begin(), readers.end(), [&](int a, int b) {
        return loads[a] != loads[b] ? loads[a] < loads[b] : a < b;
    });
    return readers;
}

// Shares of `total` bytes that bring the least-loaded readers up to a common level first:
// reader r gets level - loads[r] (never negative), the shares summing to total. Indexed by rank.
std::vector<std::uint64_t> water_fill(const std::vector<int>& order, const std::vector<std::uint64_t>& loads,
                                      std::uint64_t total) {
    std::vector<std::uint64_t> shares(loads.size(), 0);
    if (total == 0 || order.empty()) return shares;
    // The k least loaded reach the level (total + their loads) / k, which must not pass the
    // next reader's load (else that reader joins them).
    std::uint64_t acc = 0;
    std::size_t k = order.size();
    for (std::size_t i = 0; i < order.size(); ++i) {
        acc += loads[order[i]];
        std::uint64_t cnt = i + 1;
        if (i + 1 == order.size() || total + acc <= loads[order[i + 1]] * cnt) {
            k = cnt;
            break;
        }
    }
    std::uint64_t level = (total + acc) / k, rem = (total + acc) % k;
    for (std::size_t j = 0; j < k; ++j) shares[order[j]] = level - loads[order[j]] + (j < rem ? 1 : 0);
    return shares;
}

// Cuts a chunk into pieces over `readers`: consecutive byte ranges of the chunk, least loaded
// reader first, each reader taking about its water-filled share in whole rows.
void fill(const checkpoint& c, const run& items, const std::vector<int>& readers, std::vector<std::uint64_t>& loads,
          std::vector<group_piece>& out) {
    std::uint64_t total = 0;
    for (const auto& it : items) total += item_bytes(c, it);
    std::vector<int> sorted = by_load(readers, loads);
    std::vector<std::uint64_t> shares = water_fill(sorted, loads, total);
    std::vector<int> order;
    for (int r : sorted)
        if (shares[r] > 0) order.push_back(r);
    std::size_t ri = 0;
    auto share_of = [&](std::size_t i) { return static_cast<std::int64_t>(shares[order[i]]); };
    std::int64_t left = order.empty() ? 0 : share_of(0);
    for (const auto& it : items) {
        const checkpoint_tensor& t = c.tensors[it.tensor];
        auto row = static_cast<std::int64_t>(row_bytes(t, it.dim));
        if (it.dim < 0 || row == 0) {  // not cut: all of it to the current reader
            int r = order.empty() ? readers.front() : order[std::min(ri, order.size() - 1)];
            out.push_back({it.tensor, it.dim, 0, it.dim < 0 ? 1 : 0, t.offset, t.bytes, r});
            loads[r] += t.bytes;
            left -= static_cast<std::int64_t>(t.bytes);
            while (left <= 0 && ri + 1 < order.size()) left += share_of(++ri);
            continue;
        }
        std::int64_t pos = it.start;
        while (pos < it.stop) {
            int r = order[std::min(ri, order.size() - 1)];
            bool last = ri + 1 >= order.size();
            // Whole rows nearest the share (half a row rounds up); the last reader takes the rest.
            std::int64_t n = it.stop - pos;
            if (!last) n = std::min(n, std::max<std::int64_t>(1, (2 * left + row) / (2 * row)));
            std::uint64_t bytes = static_cast<std::uint64_t>(n * row);
            out.push_back({it.tensor, it.dim, pos, pos + n, t.offset + static_cast<std::uint64_t>(pos * row), bytes, r});
            loads[r] += bytes;
            left -= n * row;
            pos += n;
            while (2 * left <= row && ri + 1 < order.size()) left += share_of(++ri);
        }
    }
}

std::string base_name(const std::string& path) {
    auto slash = path.find_last_of('/');
    return slash == std::string::npos ? path : path.substr(slash + 1);
}

}  // namespace

namespace {

void check_options(const group_plan_options& o) {
    const int world = o.world;
    if (world < 1) throw usage_error("plan_group: world size " + std::to_string(world) + " is not positive");
    if (o.chunk_bytes < 1) throw usage_error("plan_group: chunk_bytes 0 is not positive");
    if (!o.layout) return;
    const auto& n = o.layout->node_of_rank;
    if (n.size() != static_cast<std::size_t>(world))
        throw usage_error("group layout: node_of_rank has " + std::to_string(n.size()) + " entries for a world of " +
                          std::to_string(world));
    for (std::size_t r = 0; r < n.size(); ++r)
        if (n[r] < 0)
            throw usage_error("group layout: node_of_rank[" + std::to_string(r) + "] is " + std::to_string(n[r]) +
                              ", not a node id (>= 0)");
}

/// The ranks' nodes and the subgroups the broadcasts use: nodes densely numbered in the order of
/// their ids (one node holds all without a layout), each rank's index within its node, and
/// whether replicated bytes go once per node or in two stages (across nodes by local index, then
/// within each node).
struct topology {
    std::vector<int> node, local;
    std::vector<std::vector<int>> node_ranks;
    std::map<int, std::size_t> dense;
    bool per_node = false, two_stage = false;
    std::vector<std::size_t> node_group, rail_group;

    std::size_t nodes() const { return node_ranks.size(); }

    topology(const group_plan_options& o, group_plan& p) {
        const int world = o.world;
        node.assign(static_cast<std::size_t>(world), 0);
        if (o.layout) {
            std::set<int> ids(o.layout->node_of_rank.begin(), o.layout->node_of_rank.end());
            for (int id : ids) dense.emplace(id, dense.size());
            for (int r = 0; r < world; ++r) node[r] = static_cast<int>(dense.at(o.layout->node_of_rank[r]));
        }
        node_ranks.resize(o.layout ? dense.size() : 1);
        for (int r = 0; r < world; ++r) node_ranks[node[r]].push_back(r);
        local.assign(static_cast<std::size_t>(world), 0);
        for (const auto& ranks : node_ranks)
            for (std::size_t i = 0; i < ranks.size(); ++i) local[ranks[i]] = static_cast<int>(i);
        bool equal_nodes = std::all_of(node_ranks.begin(), node_ranks.end(),
                                       [&](const auto& v) { return v.size() == node_ranks[0].size(); });
        per_node = o.reads == replicated_reads::once_per_node && nodes() > 1;
        two_stage = !per_node && nodes() > 1 && equal_nodes;

        // Subgroups: 0 is the whole group; a rank set equal to it is subgroup 0.
        auto subgroup = [&](const std::vector<int>& ranks) -> std::size_t {
            for (std::size_t i = 0; i < p.subgroups.size(); ++i)
                if (p.subgroups[i] == ranks) return i;
            p.subgroups.push_back(ranks);
            return p.subgroups.size() - 1;
        };
        node_group.assign(nodes(), 0);
        if (per_node || two_stage)
            for (std::size_t m = 0; m < nodes(); ++m) node_group[m] = subgroup(node_ranks[m]);
        if (two_stage) {
            for (std::size_t l = 0; l < node_ranks[0].size(); ++l) {
                std::vector<int> rail;
                for (const auto& ranks : node_ranks) rail.push_back(ranks[l]);
                std::sort(rail.begin(), rail.end());
                rail_group.push_back(subgroup(rail));
            }
        }
    }

    std::string collectives(int world) const {
        if (world == 1) return "one rank: no collectives";
        if (per_node)
            return std::to_string(nodes()) + " nodes, replicated bytes read once per node: each piece is broadcast "
                                             "from its reader within its node only";
        if (two_stage)
            return std::to_string(nodes()) + " nodes of " + std::to_string(node_ranks[0].size()) +
                   " ranks: each piece goes from its reader to the ranks of the same local index on the other "
                   "nodes (one subgroup per local index), then from each of those to the rest of its node";
        if (nodes() > 1) {
            std::string sizes;
            for (const auto& v : node_ranks) sizes += (sizes.empty() ? "" : ", ") + std::to_string(v.size());
            return "nodes of unequal size (" + sizes + " ranks): each piece is broadcast from its reader to the "
                   "whole group";
        }
        return "one node: each piece is broadcast from its reader to the whole group";
    }

    /// The ranks that read a shard's replicated bytes: the ranks of the node the layout places
    /// the file on, else every rank.
    std::vector<int> readers_of(const group_plan_options& o, const std::string& path, const std::vector<int>& all) const {
        if (!o.layout || per_node) return all;
        auto it = o.layout->file_node.find(path);
        if (it == o.layout->file_node.end()) it = o.layout->file_node.find(base_name(path));
        if (it == o.layout->file_node.end()) return all;
        auto d = dense.find(it->second);
        return d == dense.end() ? all : node_ranks[d->second];
    }

    /// The broadcasts that complete a chunk: each piece from its reader to its node (per node),
    /// to its rail and then from each rail member to its node (two stages), or to everyone.
    void add_broadcasts(group_chunk& ch, int world) const {
        std::vector<group_broadcast> relays;
        for (std::size_t i = 0; i < ch.pieces.size(); ++i) {
            const group_piece& pc = ch.pieces[i];
            if (pc.bytes == 0 || world == 1) continue;
            int r = pc.reader;
            if (per_node) {
                if (node_ranks[node[r]].size() > 1) ch.broadcasts.push_back({i, r, node_group[node[r]], 0});
            } else if (two_stage) {
                ch.broadcasts.push_back({i, r, rail_group[local[r]], 0});
                if (node_ranks[0].size() > 1)
                    for (std::size_t m = 0; m < nodes(); ++m)
                        relays.push_back({i, node_ranks[m][local[r]], node_group[m], 1});
            } else {
                ch.broadcasts.push_back({i, r, 0, 0});
            }
        }
        ch.broadcasts.insert(ch.broadcasts.end(), relays.begin(), relays.end());
    }
};

/// Splits the tensors the rules name among the ranks (each rank's slices seed its load) and
/// lists the others as replicated.
void assign_slices(const checkpoint& c, const group_plan_options& o, group_plan& p, std::vector<std::uint64_t>& loads) {
    const int world = o.world;
    for (std::size_t idx : checkpoints::select(c, o.select)) {
        const checkpoint_tensor& t = c.tensors[idx];
        const tp_rule* rule = distributed::rule_for(o.tp, t.name);
        if (!rule) {
            p.replicated.push_back(idx);
            continue;
        }
        int ndim = static_cast<int>(t.shape.size());
        int dim = rule->dim < 0 ? rule->dim + ndim : rule->dim;
        if (dim < 0 || dim >= ndim)
            throw checkpoint_error(c.shards[t.shard].path, t.name,
                                   "tensor-parallel rule '" + rule->pattern + "' splits dimension " +
                                       std::to_string(rule->dim) + " of a tensor of shape " + shape_to_string(t.shape));
        p.sliced.push_back(idx);
        std::int64_t n = t.shape[static_cast<std::size_t>(dim)];
        std::uint64_t row = row_bytes(t, dim);
        for (int r = 0; r < world; ++r) {
            std::int64_t a = r * n / world, b = (r + 1) * n / world;
            group_slice_read s{idx, tensor_slice::range(dim, a, b), row * static_cast<std::uint64_t>(b - a)};
            p.ranks[r].slices.push_back(s);
            p.ranks[r].slice_bytes += s.bytes;
            loads[r] += s.bytes;
        }
    }
}

/// Each rank's bytes read, sent, received and received from other nodes for one chunk.
void count_traffic(const group_chunk& ch, const topology& tp, group_plan& p) {
    for (const auto& pc : ch.pieces) p.ranks[pc.reader].replicated_bytes += pc.bytes;
    for (const auto& b : ch.broadcasts) {
        std::uint64_t bytes = ch.pieces[b.piece].bytes;
        for (int m : p.subgroups[b.subgroup]) {
            group_rank_plan& rp = p.ranks[m];
            if (m == b.root) {
                rp.bytes_sent += bytes;
                continue;
            }
            rp.bytes_received += bytes;
            if (tp.node[m] != tp.node[b.root]) rp.bytes_from_other_nodes += bytes;
        }
    }
}

}  // namespace

group_plan plan_group(const checkpoint& c, const group_plan_options& o) {
    check_options(o);
    const int world = o.world;
    group_plan p;
    p.world = world;
    p.ranks.resize(static_cast<std::size_t>(world));
    std::vector<int> all(static_cast<std::size_t>(world));
    std::iota(all.begin(), all.end(), 0);
    p.subgroups.push_back(all);
    const topology tp(o, p);
    p.collectives = tp.collectives(world);

    std::vector<std::uint64_t> loads(static_cast<std::size_t>(world), 0);
    assign_slices(c, o, p, loads);

    // Replicated tensors per file, in file order (ties in name order).
    std::map<std::size_t, std::vector<std::size_t>> by_file;
    for (std::size_t idx : p.replicated) by_file[c.tensors[idx].shard].push_back(idx);
    for (auto& [shard, entries] : by_file) {
        std::stable_sort(entries.begin(), entries.end(),
                         [&](std::size_t a, std::size_t b) { return c.tensors[a].offset < c.tensors[b].offset; });
        const std::vector<int> readers = tp.readers_of(o, c.shards[shard].path, all);
        for (const run& items : chunks_of(c, entries, o.chunk_bytes)) {
            group_chunk ch;
            ch.shard = shard;
            for (const auto& it : items) ch.bytes += item_bytes(c, it);
            if (tp.per_node) {
                ch.readers = all;
                for (const auto& ranks : tp.node_ranks) fill(c, items, ranks, loads, ch.pieces);
            } else {
                ch.readers = readers;
                fill(c, items, readers, loads, ch.pieces);
            }
            tp.add_broadcasts(ch, world);
            count_traffic(ch, tp, p);
            p.replicated_bytes += ch.bytes;
            p.chunks.push_back(std::move(ch));
        }
    }
    return p;
}

}  // namespace ferry
