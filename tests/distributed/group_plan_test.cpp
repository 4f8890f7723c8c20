// The group plan as tables (the same cases as python/tests/test_distributed.py, which calls this
// same plan through the Python package), plus its invariants over many random checkpoints,
// worlds and layouts: every replicated byte read once across the group (or once per node), every
// piece one byte range, every broadcast sent by a rank that holds the piece, every rank ending
// with every byte, and bytes per rank balanced.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "distributed/group_plan.hpp"
#include "ferry/distributed.hpp"

namespace ferry {
namespace {

struct spec {
    std::string name;
    std::vector<std::int64_t> shape;
    std::string file = "a";
    std::size_t itemsize = 2;
};

// A checkpoint made from a table: tensors laid out per file in the order given, from offset 8
// (the safetensors length prefix), shards in order of first appearance, tensors sorted by name.
checkpoint table(const std::vector<spec>& specs) {
    checkpoint c;
    c.source = "table";
    std::map<std::string, std::uint64_t> next;
    std::map<std::string, std::size_t> shard;
    for (const auto& s : specs) {
        if (!shard.count(s.file)) {
            shard[s.file] = c.shards.size();
            c.shards.push_back({s.file, 0, {}});
            next[s.file] = 8;
        }
        checkpoint_tensor t;
        t.name = s.name;
        t.shape = s.shape;
        t.type = s.itemsize == 4 ? dtype::float32 : s.itemsize == 8 ? dtype::float64 : dtype::bfloat16;
        t.shard = shard[s.file];
        t.bytes = s.itemsize;
        for (auto d : s.shape) t.bytes *= static_cast<std::uint64_t>(d);
        t.offset = next[s.file];
        next[s.file] += t.bytes;
        c.tensors.push_back(std::move(t));
    }
    std::stable_sort(c.tensors.begin(), c.tensors.end(), [](auto& a, auto& b) { return a.name < b.name; });
    return c;
}

std::vector<spec> file_of(const std::vector<std::pair<std::string, std::vector<std::int64_t>>>& v,
                          const std::string& file = "a") {
    std::vector<spec> out;
    for (const auto& [n, s] : v) out.push_back({n, s, file});
    return out;
}

std::vector<std::string> names(const checkpoint& c, const std::vector<std::size_t>& idx) {
    std::vector<std::string> out;
    for (auto i : idx) out.push_back(c.tensors[i].name);
    return out;
}

std::uint64_t max_row(const checkpoint& c, const group_plan& p) {
    std::uint64_t m = 0;
    for (auto i : p.replicated) {
        const auto& t = c.tensors[i];
        m = std::max(m, distributed::row_bytes(t, group_split_dim(t.shape)));
    }
    return m;
}

// Every piece is one byte range of its tensor; the pieces of each reader set cover every
// replicated byte exactly once (once per node with once_per_node); the chunk sizes, per-rank
// counters and the totals agree. Then the broadcasts, replayed stage by stage: a root always
// holds what it sends, and every rank ends up holding every byte of every chunk.
void check_plan(const checkpoint& c, const group_plan& p, std::size_t copies = 1) {
    std::map<std::size_t, std::vector<std::pair<std::uint64_t, std::uint64_t>>> seen;
    std::vector<std::uint64_t> read(static_cast<std::size_t>(p.world), 0);
    std::uint64_t total = 0;
    for (const auto& ch : p.chunks) {
        std::uint64_t chunk_bytes = 0;
        std::set<std::size_t> tensors;
        for (const auto& pc : ch.pieces) {
            const auto& t = c.tensors[pc.tensor];
            ASSERT_EQ(t.shard, ch.shard) << t.name;
            std::uint64_t row = distributed::row_bytes(t, pc.dim);
            if (pc.dim >= 0) {
                EXPECT_EQ(pc.bytes, static_cast<std::uint64_t>(pc.stop - pc.start) * row) << t.name;
                EXPECT_EQ(pc.offset, t.offset + static_cast<std::uint64_t>(pc.start) * row) << t.name;
            } else {
                EXPECT_EQ(pc.bytes, t.bytes);
                EXPECT_EQ(pc.offset, t.offset);
            }
            EXPECT_TRUE(std::find(ch.readers.begin(), ch.readers.end(), pc.reader) != ch.readers.end());
            seen[pc.tensor].push_back({pc.offset, pc.offset + pc.bytes});
            read[pc.reader] += pc.bytes;
            chunk_bytes += pc.bytes;
            tensors.insert(pc.tensor);
        }
        EXPECT_EQ(chunk_bytes, copies * ch.bytes);
        total += ch.bytes;

        // Replay: who holds which piece (by byte range: with once_per_node the pieces of
        // different nodes hold the same bytes under other cuts).
        std::vector<std::set<std::size_t>> holds(static_cast<std::size_t>(p.world));
        for (std::size_t i = 0; i < ch.pieces.size(); ++i) holds[ch.pieces[i].reader].insert(i);
        int stage = 0;
        for (const auto& b : ch.broadcasts) {
            ASSERT_GE(b.stage, stage) << "stage 0 comes first";
            stage = b.stage;
            ASSERT_LT(b.subgroup, p.subgroups.size());
            const auto& members = p.subgroups[b.subgroup];
            ASSERT_TRUE(std::find(members.begin(), members.end(), b.root) != members.end());
            ASSERT_TRUE(holds[b.root].count(b.piece)) << "rank " << b.root << " sends a piece it lacks";
            EXPECT_GT(ch.pieces[b.piece].bytes, 0u);
            for (int m : members) holds[m].insert(b.piece);
        }
        for (int r = 0; r < p.world; ++r) {
            for (std::size_t t : tensors) {
                std::vector<std::pair<std::uint64_t, std::uint64_t>> have;
                std::uint64_t lo = UINT64_MAX, hi = 0;
                for (std::size_t i = 0; i < ch.pieces.size(); ++i) {
                    const auto& pc = ch.pieces[i];
                    if (pc.tensor != t) continue;
                    lo = std::min(lo, pc.offset);
                    hi = std::max(hi, pc.offset + pc.bytes);
                    if (holds[r].count(i) || pc.bytes == 0) have.push_back({pc.offset, pc.offset + pc.bytes});
                }
                std::sort(have.begin(), have.end());
                std::uint64_t at = lo;
                for (auto [a, e] : have) {
                    if (a <= at) at = std::max(at, e);
                }
                EXPECT_EQ(at, hi) << "rank " << r << " misses bytes of " << c.tensors[t].name;
            }
        }
    }
    for (std::size_t i : p.replicated) {
        const auto& t = c.tensors[i];
        auto ranges = seen[i];
        std::sort(ranges.begin(), ranges.end());
        ASSERT_FALSE(ranges.empty()) << t.name;
        // Per copy, the ranges tile [offset, offset + bytes).
        std::uint64_t covered = 0;
        for (auto [a, e] : ranges) covered += e - a;
        EXPECT_EQ(covered, copies * t.bytes) << t.name;
        EXPECT_EQ(ranges.front().first, t.offset) << t.name;
        EXPECT_EQ(ranges.back().second, t.offset + t.bytes) << t.name;
        if (copies == 1) {
            for (std::size_t k = 1; k < ranges.size(); ++k) EXPECT_EQ(ranges[k - 1].second, ranges[k].first) << t.name;
        }
    }
    std::uint64_t expect = 0;
    for (std::size_t i : p.replicated) expect += c.tensors[i].bytes;
    EXPECT_EQ(total, expect);
    EXPECT_EQ(p.replicated_bytes, expect);
    for (int r = 0; r < p.world; ++r) EXPECT_EQ(p.ranks[r].replicated_bytes, read[r]) << r;
}

group_plan plan(const checkpoint& c, int world, std::vector<tp_rule> tp = {}, std::uint64_t chunk = 64ull << 20,
                std::optional<group_layout> layout = std::nullopt,
                replicated_reads reads = replicated_reads::once_per_group) {
    group_plan_options o;
    o.world = world;
    o.tp = std::move(tp);
    o.chunk_bytes = chunk;
    o.layout = std::move(layout);
    o.reads = reads;
    return plan_group(c, o);
}

TEST(GroupPlan, SplitDimIsTheFirstDimensionLongerThanOne) {
    std::vector<std::pair<std::vector<std::int64_t>, int>> cases = {
        {{}, -1}, {{1}, -1}, {{1, 1, 5}, 2}, {{4, 3}, 0}, {{1, 7, 2}, 1}, {{0, 5}, 1}};
    for (const auto& [shape, dim] : cases) EXPECT_EQ(group_split_dim(shape), dim) << shape_to_string(shape);
}

TEST(GroupPlan, ReadsEveryReplicatedByteOnceBalanced) {
    std::vector<std::pair<std::string, std::vector<std::int64_t>>> v = {{"embed", {1000, 64}}};
    for (int i = 0; i < 10; ++i) v.push_back({"norm" + std::to_string(i), {64}});
    v.push_back({"bias", {3}});
    v.push_back({"scalar", {}});
    v.push_back({"w", {1, 500}});
    checkpoint c = table(file_of(v));
    for (int world : {1, 2, 3, 4, 8}) {
        group_plan p = plan(c, world, {}, 1 << 20);
        check_plan(c, p);
        double ideal = static_cast<double>(p.replicated_bytes) / world;
        for (const auto& r : p.ranks)  // within one row of the largest tensor (128 bytes) and a small tensor
            EXPECT_LE(std::abs(static_cast<double>(r.replicated_bytes) - ideal), 2 * 128 + 1000) << world;
        EXPECT_EQ(p.collectives, world == 1 ? "one rank: no collectives"
                                            : "one node: each piece is broadcast from its reader to the whole group");
    }
}

TEST(GroupPlan, SlicedAndReplicatedByRule) {
    checkpoint c = table(file_of({{"a.q_proj.weight", {8, 4}}, {"a.norm", {4}}, {"b.o_proj.weight", {4, 8}}}));
    struct row {
        int world;
        std::vector<tp_rule> rules;
        std::vector<std::string> sliced, replicated;
    };
    std::vector<row> cases = {
        {2, {}, {}, {"a.norm", "a.q_proj.weight", "b.o_proj.weight"}},
        {2, {{"*.q_proj.weight", 0}, {"*.o_proj.weight", -1}}, {"a.q_proj.weight", "b.o_proj.weight"}, {"a.norm"}},
        {1, {{"a.norm", 0}}, {"a.norm"}, {"a.q_proj.weight", "b.o_proj.weight"}},
    };
    for (const auto& r : cases) {
        group_plan p = plan(c, r.world, r.rules);
        EXPECT_EQ(names(c, p.sliced), r.sliced);
        EXPECT_EQ(names(c, p.replicated), r.replicated);
        check_plan(c, p);
    }
}

TEST(GroupPlan, EachRankReadsItsSliceAndSlicesSeedTheBalance) {
    // Two column-split weights of 10 rows over 4 ranks (rows 2, 3, 2, 3) and a row split of 6
    // columns; the replicated bytes fill the ranks with less slice bytes first.
    checkpoint c = table(file_of({{"q", {10, 4}}, {"o", {4, 6}}, {"norm", {64}}}));
    group_plan p = plan(c, 4, {{"q", 0}, {"o", 1}});
    ASSERT_EQ(p.ranks.size(), 4u);
    std::uint64_t slice_total = 0;
    for (int r = 0; r < 4; ++r) {
        const auto& rp = p.ranks[r];
        ASSERT_EQ(rp.slices.size(), 2u);
        const auto& o = rp.slices[0];  // by name: "o" before "q"
        EXPECT_EQ(c.tensors[o.tensor].name, "o");
        EXPECT_EQ(o.slice.dim, 1);
        EXPECT_EQ(o.slice.start, r * 6 / 4);
        EXPECT_EQ(o.slice.stop, (r + 1) * 6 / 4);
        EXPECT_EQ(o.bytes, static_cast<std::uint64_t>(o.slice.stop - o.slice.start) * 4 * 2);
        const auto& q = rp.slices[1];
        EXPECT_EQ(q.slice.dim, 0);
        EXPECT_EQ(q.slice.stop - q.slice.start, (r + 1) * 10 / 4 - r * 10 / 4);
        slice_total += rp.slice_bytes;
    }
    EXPECT_EQ(slice_total, c.find("q")->bytes + c.find("o")->bytes);
    check_plan(c, p);
    // Totals per rank (slices + replicated share) as even as 2-byte rows allow.
    std::vector<std::uint64_t> totals;
    for (const auto& rp : p.ranks) totals.push_back(rp.slice_bytes + rp.replicated_bytes);
    EXPECT_LE(*std::max_element(totals.begin(), totals.end()) - *std::min_element(totals.begin(), totals.end()), 2u);
    // A rule whose dimension a tensor lacks names the tensor.
    try {
        plan(c, 2, {{"norm", 1}});
        FAIL() << "expected checkpoint_error";
    } catch (const checkpoint_error& e) {
        EXPECT_EQ(e.tensor(), "norm");
        EXPECT_NE(std::string(e.what()).find("dimension 1"), std::string::npos) << e.what();
    }
}

TEST(GroupPlan, SplitsLargeTensorsIntoRowChunks) {
    checkpoint c = table(file_of({{"embed", {1024, 256}}}));  // 512 KiB of bf16, 512-byte rows
    group_plan p = plan(c, 4, {}, 64 << 10);
    ASSERT_EQ(p.chunks.size(), 8u);
    for (const auto& ch : p.chunks) {
        EXPECT_EQ(ch.bytes, 64u << 10);
        std::vector<int> readers;
        for (const auto& pc : ch.pieces) {
            readers.push_back(pc.reader);
            EXPECT_EQ(pc.bytes, 16u << 10);
        }
        std::sort(readers.begin(), readers.end());
        EXPECT_EQ(readers, (std::vector<int>{0, 1, 2, 3}));  // each chunk split four ways
        EXPECT_EQ(ch.broadcasts.size(), 4u);                  // each piece one broadcast
    }
    check_plan(c, p);
    for (const auto& r : p.ranks) {
        EXPECT_EQ(r.replicated_bytes, 128u << 10);
        EXPECT_EQ(r.bytes_received, 384u << 10);
        EXPECT_EQ(r.bytes_sent, 128u << 10);
    }
}

TEST(GroupPlan, GivesSmallChunksToTheLeastLoadedRank) {
    std::vector<std::pair<std::string, std::vector<std::int64_t>>> v;
    for (int i = 0; i < 10; ++i) v.push_back({"n" + std::to_string(i), {2}});
    checkpoint c = table(file_of(v));
    group_plan p = plan(c, 3, {}, 4);
    ASSERT_EQ(p.chunks.size(), 10u);
    std::vector<std::uint64_t> read;
    for (const auto& r : p.ranks) read.push_back(r.replicated_bytes);
    std::sort(read.begin(), read.end());
    EXPECT_EQ(read, (std::vector<std::uint64_t>{12, 14, 14}));  // as even as 2-byte rows allow
    check_plan(c, p);
}

TEST(GroupPlan, PrefersTheNodeThatOwnsTheFile) {
    std::vector<spec> specs;
    for (int i = 0; i < 4; ++i) specs.push_back({"a" + std::to_string(i), {64, 8}, "/ckpt/s1.safetensors"});
    for (int i = 0; i < 4; ++i) specs.push_back({"b" + std::to_string(i), {64, 8}, "/ckpt/s2.safetensors"});
    checkpoint c = table(specs);
    group_layout l{{0, 0, 1, 1}, {{"s1.safetensors", 0}, {"/ckpt/s2.safetensors", 1}}};
    group_plan p = plan(c, 4, {}, 64ull << 20, l);
    for (const auto& ch : p.chunks) {
        std::vector<int> want = c.shards[ch.shard].path == "/ckpt/s1.safetensors" ? std::vector<int>{0, 1}
                                                                                  : std::vector<int>{2, 3};
        EXPECT_EQ(ch.readers, want);
        std::set<int> got;
        for (const auto& pc : ch.pieces) got.insert(pc.reader);
        EXPECT_EQ(got, std::set<int>(want.begin(), want.end()));
    }
    for (const auto& r : p.ranks) EXPECT_EQ(r.replicated_bytes, 2048u);
    check_plan(c, p);
    // A file no node owns is read by all ranks.
    group_plan q = plan(c, 4, {}, 64ull << 20, group_layout{{0, 0, 1, 1}, {{"s1.safetensors", 0}}});
    EXPECT_EQ(q.chunks.back().readers, (std::vector<int>{0, 1, 2, 3}));
    check_plan(c, q);
}

TEST(GroupPlan, IsTheSameForTheSameInputsInAnyOrder) {
    std::vector<spec> specs;
    for (int i = 0; i < 20; ++i) specs.push_back({"x" + std::to_string(i), {17 + i, 3}, "f1"});
    for (int i = 0; i < 7; ++i) specs.push_back({"y" + std::to_string(i), {5, 11 + i}, "f0"});
    checkpoint c1 = table(specs);
    std::reverse(specs.begin(), specs.end());
    checkpoint c2 = table(specs);  // other offsets: the same tensors in reverse file order
    group_plan p1 = plan(c1, 3, {}, 500), again = plan(c1, 3, {}, 500);
    ASSERT_EQ(p1.chunks.size(), again.chunks.size());
    for (std::size_t i = 0; i < p1.chunks.size(); ++i) {
        ASSERT_EQ(p1.chunks[i].pieces.size(), again.chunks[i].pieces.size());
        for (std::size_t k = 0; k < p1.chunks[i].pieces.size(); ++k) {
            const auto& a = p1.chunks[i].pieces[k];
            const auto& b = again.chunks[i].pieces[k];
            EXPECT_TRUE(a.tensor == b.tensor && a.start == b.start && a.stop == b.stop && a.reader == b.reader);
        }
    }
    check_plan(c1, p1);
    check_plan(c2, plan(c2, 3, {}, 500));
    std::vector<std::uint64_t> read;
    for (const auto& r : p1.ranks) read.push_back(r.replicated_bytes);
    EXPECT_LE(*std::max_element(read.begin(), read.end()) - *std::min_element(read.begin(), read.end()), 2u * 66);
}

TEST(GroupPlan, RejectsABadWorldChunkAndLayout) {
    checkpoint c = table(file_of({{"a", {4}}}));
    EXPECT_THROW(plan(c, 0), usage_error);
    EXPECT_THROW(plan(c, 2, {}, 0), usage_error);
    try {
        plan(c, 2, {}, 1024, group_layout{{0}, {}});
        FAIL() << "expected usage_error";
    } catch (const usage_error& e) {
        EXPECT_NE(std::string(e.what()).find("node_of_rank"), std::string::npos) << e.what();
    }
    EXPECT_THROW(plan(c, 2, {}, 1024, group_layout{{0, -1}, {}}), usage_error);
    EXPECT_THROW(group_layout::uniform(4, 0), usage_error);
    EXPECT_EQ(group_layout::uniform(5, 2).node_of_rank, (std::vector<int>{0, 0, 1, 1, 2}));
}

TEST(GroupPlan, TwoNodesBroadcastAcrossNodesOncePerNodeThenWithin) {
    std::vector<std::pair<std::string, std::vector<std::int64_t>>> v = {{"embed", {512, 64}}};
    for (int i = 0; i < 6; ++i) v.push_back({"norm" + std::to_string(i), {96}});
    checkpoint c = table(file_of(v));
    group_plan p = plan(c, 4, {}, 16 << 10, group_layout::uniform(4, 2));
    // Subgroups: the group, node 0, node 1, local index 0 (ranks 0 and 2), local index 1.
    EXPECT_EQ(p.subgroups, (std::vector<std::vector<int>>{{0, 1, 2, 3}, {0, 1}, {2, 3}, {0, 2}, {1, 3}}));
    EXPECT_NE(p.collectives.find("2 nodes of 2 ranks"), std::string::npos) << p.collectives;
    check_plan(c, p);
    for (const auto& ch : p.chunks) {
        for (const auto& b : ch.broadcasts) {
            const auto& pc = ch.pieces[b.piece];
            if (b.stage == 0) {
                EXPECT_EQ(b.root, pc.reader);
                EXPECT_GE(b.subgroup, 3u);  // a rail: across nodes
            } else {
                EXPECT_TRUE(b.subgroup == 1 || b.subgroup == 2);  // within a node
            }
        }
    }
    // Each byte enters each node once: a node's ranks receive from the other node exactly the
    // bytes the other node read; each rank receives every byte it did not read once.
    for (int node = 0; node < 2; ++node) {
        std::uint64_t own = p.ranks[2 * node].replicated_bytes + p.ranks[2 * node + 1].replicated_bytes;
        std::uint64_t across = p.ranks[2 * node].bytes_from_other_nodes + p.ranks[2 * node + 1].bytes_from_other_nodes;
        EXPECT_EQ(across, p.replicated_bytes - own) << node;
    }
    for (const auto& r : p.ranks) EXPECT_EQ(r.bytes_received, p.replicated_bytes - r.replicated_bytes);
}

TEST(GroupPlan, OncePerNodeReadsEverythingOnEachNodeAndNothingCrosses) {
    std::vector<std::pair<std::string, std::vector<std::int64_t>>> v = {{"embed", {300, 32}}};
    for (int i = 0; i < 5; ++i) v.push_back({"norm" + std::to_string(i), {50}});
    checkpoint c = table(file_of(v));
    // Interleaved nodes: ranks 0 and 2 on node 7, 1 and 3 on node 3 (ids need not be dense).
    group_plan p = plan(c, 4, {}, 4096, group_layout{{7, 3, 7, 3}, {}}, replicated_reads::once_per_node);
    check_plan(c, p, 2);
    EXPECT_EQ(p.subgroups, (std::vector<std::vector<int>>{{0, 1, 2, 3}, {1, 3}, {0, 2}}));
    std::uint64_t node_a = p.ranks[0].replicated_bytes + p.ranks[2].replicated_bytes;
    std::uint64_t node_b = p.ranks[1].replicated_bytes + p.ranks[3].replicated_bytes;
    EXPECT_EQ(node_a, p.replicated_bytes);
    EXPECT_EQ(node_b, p.replicated_bytes);
    for (const auto& r : p.ranks) {
        EXPECT_EQ(r.bytes_from_other_nodes, 0u);
        EXPECT_EQ(r.bytes_received, p.replicated_bytes - r.replicated_bytes);
    }
}

TEST(GroupPlan, NodesOfUnequalSizeBroadcastOverTheWholeGroup) {
    checkpoint c = table(file_of({{"embed", {90, 16}}, {"norm", {16}}}));
    group_plan p = plan(c, 3, {}, 1024, group_layout{{0, 0, 1}, {}});
    EXPECT_EQ(p.subgroups.size(), 1u);
    EXPECT_NE(p.collectives.find("unequal"), std::string::npos) << p.collectives;
    check_plan(c, p);
    // One rank per node: the rails are the whole group and nothing is relayed.
    group_plan q = plan(c, 3, {}, 1024, group_layout::uniform(3, 1));
    for (const auto& ch : q.chunks)
        for (const auto& b : ch.broadcasts) EXPECT_EQ(b.stage, 0);
    check_plan(c, q);
}

TEST(GroupPlan, RandomCheckpointsWorldsAndLayoutsKeepTheInvariants) {
    std::mt19937_64 rng(20261201);
    auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
    for (int trial = 0; trial < 300; ++trial) {
        std::vector<spec> specs;
        int files = pick(1, 3), n = pick(1, 25);
        for (int i = 0; i < n; ++i) {
            spec s;
            s.name = "t" + std::to_string(i);
            s.file = "/c/f" + std::to_string(pick(0, files - 1));
            s.itemsize = std::size_t{1} << pick(1, 3);
            int nd = pick(0, 3);
            for (int d = 0; d < nd; ++d) s.shape.push_back(pick(0, 9) == 0 ? 1 : pick(1, 40));
            if (pick(0, 30) == 0 && nd) s.shape[0] = 0;  // empty tensors too
            specs.push_back(s);
        }
        checkpoint c = table(specs);
        int world = pick(1, 9);
        std::vector<tp_rule> tp;
        if (pick(0, 2) == 0) tp.push_back({"t1*", 0});
        std::optional<group_layout> layout;
        replicated_reads reads = replicated_reads::once_per_group;
        int k = pick(1, world);
        if (pick(0, 1)) {
            layout = group_layout::uniform(world, k);
            if (pick(0, 1)) layout->file_node["f0"] = 0;
            if (pick(0, 2) == 0) reads = replicated_reads::once_per_node;
        }
        std::uint64_t chunk = static_cast<std::uint64_t>(pick(1, 3000));
        group_plan p;
        try {
            p = plan(c, world, tp, chunk, layout, reads);
        } catch (const checkpoint_error& e) {
            // Only a rule on a tensor without dimension 0 may refuse.
            EXPECT_FALSE(tp.empty()) << e.what();
            continue;
        }
        SCOPED_TRACE("trial " + std::to_string(trial) + ", world " + std::to_string(world));
        std::size_t nodes = layout ? static_cast<std::size_t>((world + k - 1) / k) : 1;
        bool per_node = reads == replicated_reads::once_per_node && nodes > 1;
        check_plan(c, p, per_node ? nodes : 1);
        for (const auto& r : p.ranks) EXPECT_EQ(r.bytes_received, p.replicated_bytes - r.replicated_bytes);
        if (!layout && tp.empty() && !p.chunks.empty()) {
            std::vector<std::uint64_t> read;
            for (const auto& r : p.ranks) read.push_back(r.replicated_bytes);
            std::uint64_t spread = *std::max_element(read.begin(), read.end()) - *std::min_element(read.begin(), read.end());
            EXPECT_LE(spread, 2 * max_row(c, p) + 8) << "balanced within about two rows";
        }
    }
}

}  // namespace
}  // namespace ferry
