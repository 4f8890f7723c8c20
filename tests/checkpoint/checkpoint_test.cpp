// Checkpoints: sharded layout, index checks, selection, slices and their routes, bytes read,
// caller destinations, the memory budget, I/O errors mid-load, and saving.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <thread>
#include <atomic>
#include <algorithm>

#include <nlohmann/json.hpp>

#include "ferry/checkpoint.hpp"
#include "ferry/registered_file.hpp"
#include "ferry/convert.hpp"
#include "ferry/error.hpp"
#include "ferry/safetensors.hpp"
#include "ferry/stats.hpp"
#include "ferry/stop.hpp"
#include "os/fault_hook.hpp"
#include "test_util.hpp"

namespace ferry {
namespace {

namespace fs = std::filesystem;

array iota(std::vector<std::int64_t> shape, float base) {
    array a(dtype::float32, shape);
    auto* p = static_cast<float*>(a.data());
    for (std::size_t i = 0; i < a.size(); ++i) p[i] = base + static_cast<float>(i);
    return a;
}

// Three shards with an index, as huggingface_hub lays them out.
struct sample {
    test::temp_dir dir;
    std::vector<named_array> all;
    sample() {
        all = {{"embed", iota({64, 32}, 0)},       {"layer.0.q", iota({32, 32}, 10000)},
               {"layer.0.o", iota({32, 48}, 20000)}, {"layer.0.norm", iota({32}, 30000)},
               {"layer.1.q", iota({32, 32}, 40000)}, {"layer.1.o", iota({32, 48}, 50000)},
               {"layer.1.norm", iota({32}, 60000)},  {"head", iota({4, 8, 16}, 70000)}};
        save_checkpoint(dir.path(), all, 10000);
    }
    const array& get(const std::string& n) const {
        for (const auto& t : all)
            if (t.name == n) return t.value;
        throw std::runtime_error(n);
    }
};

const array& find(const checkpoint_load& l, const std::string& n) {
    for (const auto& t : l.tensors)
        if (t.name == n) return t.value;
    throw std::runtime_error("missing " + n);
}

float at(const array& a, std::size_t i) { return static_cast<const float*>(a.data())[i]; }

bool same(const array& a, const array& b) {
    return a.shape() == b.shape() && a.type() == b.type() && std::memcmp(a.data(), b.data(), a.nbytes()) == 0;
}

nlohmann::json read_json(const std::string& p) {
    std::ifstream in(p);
    return nlohmann::json::parse(in);
}
void write_json(const std::string& p, const nlohmann::json& j) { std::ofstream(p) << j.dump(); }

TEST(Checkpoint, SavesShardsAndIndexLast) {
    sample s;
    EXPECT_TRUE(fs::exists(s.dir / "model.safetensors.index.json"));
    nlohmann::json j = read_json(s.dir / "model.safetensors.index.json");
    EXPECT_EQ(j["weight_map"].size(), 8u);
    EXPECT_GE(fs::path(j["weight_map"]["head"].get<std::string>()).string().size(), 10u);
    std::uint64_t total = 0;
    for (const auto& t : s.all) total += t.value.nbytes();
    EXPECT_EQ(j["metadata"]["total_size"].get<std::uint64_t>(), total);
    checkpoint c = open_checkpoint(s.dir.path());
    EXPECT_GE(c.shards.size(), 3u);
    EXPECT_EQ(c.tensors.size(), 8u);
    EXPECT_EQ(c.total_bytes(), total);
}

TEST(Checkpoint, LoadsEverySourceKindByteExact) {
    sample s;
    for (std::string src : {s.dir.path(), s.dir / "model.safetensors.index.json", s.dir / "model-*.safetensors"}) {
        checkpoint c = open_checkpoint(src);
        checkpoint_load l = load_checkpoint(c);
        ASSERT_EQ(l.tensors.size(), 8u) << src;
        for (const auto& t : s.all) EXPECT_TRUE(same(find(l, t.name), t.value)) << src << " " << t.name;
        EXPECT_EQ(l.stats.bytes_read, c.total_bytes());
        // One read per shard: tensors of a shard are adjacent and land adjacent.
        EXPECT_EQ(l.stats.requests, c.shards.size()) << src;
    }
    std::vector<std::string> files;
    for (const auto& e : fs::directory_iterator(s.dir.path()))
        if (e.path().extension() == ".safetensors") files.push_back(e.path());
    checkpoint_load l = load_checkpoint(open_checkpoint(files));
    EXPECT_EQ(l.tensors.size(), 8u);
    // One file.
    test::temp_dir one;
    save_checkpoint(one.path(), s.all);
    EXPECT_TRUE(fs::exists(one / "model.safetensors"));
    EXPECT_FALSE(fs::exists(one / "model.safetensors.index.json"));
    l = load_checkpoint(open_checkpoint(one / "model.safetensors"));
    EXPECT_TRUE(same(find(l, "layer.1.o"), s.get("layer.1.o")));
}

TEST(Checkpoint, SelectsByNameGlobAndRegex) {
    sample s;
    checkpoint c = open_checkpoint(s.dir.path());
    checkpoint_load_options o;
    o.select = {tensor_selection::kind::names, {"head", "embed"}};
    EXPECT_EQ(load_checkpoint(c, o).tensors.size(), 2u);
    o.select = {tensor_selection::kind::glob, {"layer.*.q"}};
    auto l = load_checkpoint(c, o);
    ASSERT_EQ(l.tensors.size(), 2u);
    EXPECT_EQ(l.tensors[0].name, "layer.0.q");
    EXPECT_EQ(l.stats.bytes_read, 2u * 32 * 32 * 4);
    o.select = {tensor_selection::kind::regex, {"norm$"}};
    EXPECT_EQ(load_checkpoint(c, o).tensors.size(), 2u);
    o.select = {tensor_selection::kind::names, {"nope"}};
    EXPECT_THROW(load_checkpoint(c, o), checkpoint_error);
}

void check_slice(const array& whole, const array& part, int dim, std::int64_t start) {
    // Compare element by element through C-order indices.
    const auto& ws = whole.shape();
    const auto& ps = part.shape();
    std::size_t n = part.size();
    for (std::size_t i = 0; i < n; ++i) {
        std::size_t rem = i, off = 0, stride = 1;
        std::vector<std::int64_t> idx(ps.size());
        for (int d = static_cast<int>(ps.size()) - 1; d >= 0; --d) {
            idx[d] = static_cast<std::int64_t>(rem % ps[d]);
            rem /= ps[d];
        }
        idx[dim] += start;
        for (int d = static_cast<int>(ws.size()) - 1; d >= 0; --d) {
            off += idx[d] * stride;
            stride *= ws[d];
        }
        ASSERT_EQ(at(part, i), at(whole, off)) << "element " << i;
    }
}

TEST(Checkpoint, SlicesAlongDimZeroAndOneWithEveryRoute) {
    sample s;
    checkpoint c = open_checkpoint(s.dir.path());
    for (route_choice r : {route_choice::automatic, route_choice::segments, route_choice::span}) {
        checkpoint_load_options o;
        o.route = r;
        o.slices["embed"] = tensor_slice::range(0, 16, 48);
        o.slices["layer.0.o"] = tensor_slice::range(1, 8, 40);
        o.slice_rules.push_back({"layer.1.*", tensor_slice::split(-1, 2, 1)});
        o.slices["head"] = tensor_slice::range(1, 2, 5);
        auto l = load_checkpoint(c, o);
        check_slice(s.get("embed"), find(l, "embed"), 0, 16);
        check_slice(s.get("layer.0.o"), find(l, "layer.0.o"), 1, 8);
        check_slice(s.get("layer.1.o"), find(l, "layer.1.o"), 1, 24);
        check_slice(s.get("layer.1.q"), find(l, "layer.1.q"), 1, 16);
        check_slice(s.get("layer.1.norm"), find(l, "layer.1.norm"), 0, 16);
        check_slice(s.get("head"), find(l, "head"), 1, 2);
        EXPECT_TRUE(same(find(l, "layer.0.q"), s.get("layer.0.q")));
        for (const auto& tp : l.plan.tensors) {
            EXPECT_FALSE(tp.reason.empty());
            if (tp.name == "layer.0.o" && r != route_choice::automatic)
                EXPECT_EQ(tp.route, r == route_choice::segments ? read_route::segments : read_route::span);
            if (tp.name == "embed") EXPECT_EQ(tp.route, read_route::whole);
            // Each route's reason comes with its stable code too.
            EXPECT_NE(tp.code, reason_code::none) << tp.name;
            if (tp.name == "embed") EXPECT_EQ(to_string(tp.code), "outermost_slice");
            if (tp.name == "layer.0.q") EXPECT_EQ(to_string(tp.code), "whole_tensor");
            if (tp.name == "layer.0.o" && r != route_choice::automatic) EXPECT_EQ(to_string(tp.code), "route_forced");
            if (tp.name == "layer.0.o" && r == route_choice::automatic)
                EXPECT_TRUE(tp.code == reason_code::segments_cheaper || tp.code == reason_code::span_cheaper);
        }
    }
}

TEST(Checkpoint, HalfSliceReadsAboutHalf) {
    sample s;
    checkpoint c = open_checkpoint(s.dir.path());
    checkpoint_load_options o;
    o.route = route_choice::segments;
    o.slice_rules.push_back({"*.q", tensor_slice::split(0, 2, 0)});
    o.slice_rules.push_back({"*", tensor_slice::split(-1, 2, 1)});
    auto l = load_checkpoint(c, o);
    double ratio = static_cast<double>(l.stats.bytes_read) / static_cast<double>(c.total_bytes());
    EXPECT_GT(ratio, 0.45);
    EXPECT_LT(ratio, 0.55);
    EXPECT_EQ(l.stats.bytes_read, l.plan.bytes_read);
    // The span route reads the enclosing span: more, counted too.
    o.route = route_choice::span;
    auto span = load_checkpoint(c, o);
    EXPECT_GT(span.stats.bytes_read, l.stats.bytes_read);
}

TEST(Checkpoint, WritesIntoCallerBuffersAndConverts) {
    sample s;
    checkpoint c = open_checkpoint(s.dir.path());
    array q(dtype::float32, {32, 32});
    array o16(dtype::float16, {32, 24});
    checkpoint_load_options o;
    o.into["layer.0.q"] = q;
    o.into["layer.0.o"] = o16;
    o.slices["layer.0.o"] = tensor_slice::split(1, 2, 0);
    o.only_into = true;
    auto l = load_checkpoint(c, o);
    ASSERT_EQ(l.tensors.size(), 2u);
    EXPECT_TRUE(same(q, s.get("layer.0.q")));
    EXPECT_EQ(find(l, "layer.0.q").data(), q.data());
    EXPECT_EQ(l.plan.tensors[0].convert, true);  // layer.0.o sorts first
    EXPECT_EQ(l.plan.unexpected.size(), 6u);
    EXPECT_TRUE(l.plan.missing.empty());
    // load_state_dict's strict: a destination the checkpoint lacks, or a tensor without one,
    // fails before any byte moves.
    std::memset(q.data(), 0, q.nbytes());
    o.into["ghost"] = array(dtype::float32, {1});
    o.strict_into = true;
    EXPECT_THROW(load_checkpoint(c, o), usage_error);
    EXPECT_EQ(static_cast<const float*>(q.data())[5], 0.0f);
    o.strict_into = false;
    auto lenient = load_checkpoint(c, o);
    EXPECT_EQ(lenient.plan.missing, std::vector<std::string>{"ghost"});
    array back = astype(o16, dtype::float32);
    check_slice(astype(astype(s.get("layer.0.o"), dtype::float16), dtype::float32), back, 1, 0);
    // as= converts fresh tensors too.
    checkpoint_load_options h;
    h.as = dtype::bfloat16;
    h.select = {tensor_selection::kind::names, {"embed"}};
    auto lb = load_checkpoint(c, h);
    EXPECT_EQ(find(lb, "embed").type(), dtype::bfloat16);
    check_slice(astype(astype(s.get("embed"), dtype::bfloat16), dtype::float32),
                astype(find(lb, "embed"), dtype::float32), 0, 0);
}

TEST(Checkpoint, RejectsBadDestinationsBeforeAnyByteMoves) {
    sample s;
    checkpoint c = open_checkpoint(s.dir.path());
    auto expect_untouched = [&](checkpoint_load_options o, const std::string& tensor) {
        array guard(dtype::float32, {32, 32});
        std::memset(guard.data(), 0x5a, guard.nbytes());
        o.into["layer.0.q"] = guard;
        try {
            load_checkpoint(c, o);
            ADD_FAILURE() << "no error";
        } catch (const checkpoint_error& e) {
            EXPECT_EQ(e.tensor(), tensor) << e.what();
            EXPECT_NE(std::string(e.what()).find(".safetensors"), std::string::npos) << e.what();
        }
        auto* b = static_cast<unsigned char*>(guard.data());
        EXPECT_TRUE(std::all_of(b, b + guard.nbytes(), [](unsigned char x) { return x == 0x5a; }));
    };
    checkpoint_load_options o;
    o.into["layer.1.q"] = array(dtype::float32, {32, 31});
    expect_untouched(o, "layer.1.q");
    o.into["layer.1.q"] = array(dtype::int32, {32, 32});
    expect_untouched(o, "layer.1.q");
    o.into["layer.1.q"] = array(dtype::float32, {32, 32});
    o.slices["layer.1.o"] = tensor_slice::range(1, 40, 49);
    expect_untouched(o, "layer.1.o");
    o.slices["layer.1.o"] = tensor_slice::range(2, 0, 1);
    expect_untouched(o, "layer.1.o");
    o.slices["layer.1.o"] = tensor_slice::split(1, 4, 4);
    expect_untouched(o, "layer.1.o");
    checkpoint_load_options w;
    w.where = placement::cuda(0);
    expect_untouched(w, "layer.0.q");  // a host buffer for a GPU load
    checkpoint_load_options r;
    r.into["layer.1.q"] = array(dtype::float32, {32, 32}).as_read_only();
    expect_untouched(r, "layer.1.q");  // memory lent read-only
}

TEST(Checkpoint, BudgetTooSmallForOnePieceIsAnErrorAndBackpressureWaits) {
    sample s;
    checkpoint c = open_checkpoint(s.dir.path());
    std::uint64_t saved = checkpoint_memory_budget();
    checkpoint_load_options o;
    // Slices land in place without temporaries; a conversion goes through them, in pieces
    // under the budget.
    o.route = route_choice::span;
    o.as = dtype::float64;
    o.select = {tensor_selection::kind::names, {"embed"}};
    o.slices["embed"] = tensor_slice::range(1, 0, 16);  // rows of 128 bytes, a span of ~8 KiB
    set_checkpoint_memory_budget(64);
    try {
        load_checkpoint(c, o);
        ADD_FAILURE() << "no error";
    } catch (const checkpoint_error& e) {
        EXPECT_EQ(e.tensor(), "embed");
        EXPECT_NE(std::string(e.what()).find("budget"), std::string::npos);
    }
    // A budget that holds one piece at a time: two loads at once share it, both succeed.
    set_checkpoint_memory_budget(16 << 10);
    std::vector<std::thread> ts;
    std::atomic<int> ok{0};
    for (int i = 0; i < 4; ++i)
        ts.emplace_back([&] {
            auto l = load_checkpoint(c, o);
            EXPECT_EQ(find(l, "embed").type(), dtype::float64);
            check_slice(s.get("embed"), astype(find(l, "embed"), dtype::float32), 1, 0);
            EXPECT_LE(l.stats.peak_temp_bytes, 16u << 10);
            EXPECT_GT(l.stats.peak_temp_bytes, 0u);
            ++ok;
        });
    for (auto& t : ts) t.join();
    EXPECT_EQ(ok.load(), 4);
    EXPECT_LE(checkpoint_memory_peak(), std::max<std::uint64_t>(saved, 16 << 10));
    set_checkpoint_memory_budget(saved);
}

TEST(Checkpoint, ManyPiecesThroughOneOrTwoSlotsUnderASmallBudget) {
    sample s;
    checkpoint c = open_checkpoint(s.dir.path());
    std::uint64_t saved = checkpoint_memory_budget();
    for (std::uint64_t cap : {1024u, 2048u, 4096u}) {
        set_checkpoint_memory_budget(cap);
        for (route_choice r : {route_choice::segments, route_choice::span}) {
            checkpoint_load_options o;
            o.route = r;
            o.as = dtype::float64;  // every tensor goes through temporaries, in many pieces
            o.slices["embed"] = tensor_slice::range(1, 3, 29);
            o.slices["layer.1.o"] = tensor_slice::split(1, 3, 2);
            auto l = load_checkpoint(c, o);
            EXPECT_LE(l.stats.peak_temp_bytes, cap);
            auto f32 = [](const array& a) { return astype(a, dtype::float32); };
            check_slice(s.get("embed"), f32(find(l, "embed")), 1, 3);
            check_slice(s.get("layer.1.o"), f32(find(l, "layer.1.o")), 1, 32);
            EXPECT_TRUE(same(f32(find(l, "head")), s.get("head")));
            EXPECT_TRUE(same(f32(find(l, "layer.0.norm")), s.get("layer.0.norm")));
        }
    }
    set_checkpoint_memory_budget(saved);
}

TEST(Checkpoint, IndexNamingAMissingShard) {
    sample s;
    auto j = read_json(s.dir / "model.safetensors.index.json");
    j["weight_map"]["head"] = "model-00009-of-00009.safetensors";
    write_json(s.dir / "model.safetensors.index.json", j);
    try {
        open_checkpoint(s.dir.path());
        ADD_FAILURE();
    } catch (const checkpoint_error& e) {
        EXPECT_EQ(e.tensor(), "head");
        EXPECT_NE(std::string(e.what()).find("does not exist"), std::string::npos);
    }
}

TEST(Checkpoint, TensorInTwoShardsOrNone) {
    sample s;
    checkpoint c = open_checkpoint(s.dir.path());
    // Copy a tensor into another shard: now in two shards.
    const checkpoint_shard& other_shard =
        c.shards[0].path == c.shards[c.find("head")->shard].path ? c.shards[1] : c.shards[0];
    std::string other = other_shard.path;
    auto extra = load_safetensors(other);
    extra.push_back({"head", s.get("head")});
    save_safetensors(other, extra, other_shard.header.metadata);  // of the index's generation still
    try {
        open_checkpoint(s.dir.path());
        ADD_FAILURE();
    } catch (const checkpoint_error& e) {
        EXPECT_EQ(e.tensor(), "head") << e.what();
    }
    // In none: the index lists a tensor no shard holds.
    sample t;
    auto j = read_json(t.dir / "model.safetensors.index.json");
    j["weight_map"]["ghost"] = j["weight_map"]["head"];
    write_json(t.dir / "model.safetensors.index.json", j);
    try {
        open_checkpoint(t.dir.path());
        ADD_FAILURE();
    } catch (const checkpoint_error& e) {
        EXPECT_EQ(e.tensor(), "ghost");
    }
    // Index and header disagreeing: the index places a tensor in another shard.
    sample u;
    auto k = read_json(u.dir / "model.safetensors.index.json");
    std::string right = k["weight_map"]["head"];
    std::string wrong = k["weight_map"]["embed"];
    ASSERT_NE(right, wrong);
    k["weight_map"]["head"] = wrong;
    write_json(u.dir / "model.safetensors.index.json", k);
    try {
        open_checkpoint(u.dir.path());
        ADD_FAILURE();
    } catch (const checkpoint_error& e) {
        EXPECT_EQ(e.tensor(), "head");
        EXPECT_NE(std::string(e.what()).find(right), std::string::npos) << e.what();
    }
}

// The index's JSON, written by hand: what each malformation is called, and metadata kept as
// strings whatever its values were.
TEST(Checkpoint, MalformedIndexesAreNamedAndMetadataKeepsItsText) {
    sample s;
    const std::string index = s.dir / "model.safetensors.index.json";
    auto j = read_json(index);
    const std::string head_shard = j["weight_map"]["head"];
    std::string entries;  // the index's weight_map body, every tensor once
    for (auto& [k, v] : j["weight_map"].items()) entries += (entries.empty() ? "" : ",") + nlohmann::json(k).dump() + ":" + v.dump();
    auto write = [&](const std::string& text) { std::ofstream(index, std::ios::trunc) << text; };
    auto error_of = [&]() -> std::string {
        try {
            open_checkpoint(s.dir.path());
        } catch (const checkpoint_error& e) {
            return "checkpoint_error " + e.tensor() + ": " + e.what();
        } catch (const format_error& e) {
            return "format_error " + e.field() + ": " + e.reason();
        }
        return "opened";
    };
    // A tensor listed twice (nlohmann::json alone would keep the last silently).
    write("{\"weight_map\":{" + entries + ",\"head\":\"" + head_shard + "\"}}");
    EXPECT_EQ(error_of().rfind("checkpoint_error head: ", 0), 0u) << error_of();
    EXPECT_NE(error_of().find("listed twice"), std::string::npos) << error_of();
    write("{\"weight_map\":{" + entries + ",\"zzz\":[1]}}");
    EXPECT_NE(error_of().find("checkpoint_error zzz: "), std::string::npos) << error_of();
    EXPECT_NE(error_of().find("not a file name"), std::string::npos) << error_of();
    write("{\"weight_map\":[1,2]}");
    EXPECT_EQ(error_of(), "format_error weight_map: missing or not an object");
    write("{\"metadata\":{}}");
    EXPECT_EQ(error_of(), "format_error weight_map: missing or not an object");
    write("[{\"weight_map\":{}}]");
    EXPECT_EQ(error_of(), "format_error index: not a JSON object");
    write("{\"weight_map\":{" + entries + "}");  // one brace short
    EXPECT_EQ(error_of().rfind("format_error index: invalid JSON", 0), 0u) << error_of();
    // Metadata: strings as written, any other value as its JSON text; other keys and nested
    // values elsewhere are passed over.
    write("{\"metadata\":{\"total_size\":123,\"format\":\"pt\",\"ratio\":0.5,\"ok\":true,\"none\":null,"
          "\"nested\":{\"a\":[1,{\"b\":\"c\"}],\"d\":{}}},\"other\":{\"deep\":[[[{\"x\":1}]]]},"
          "\"weight_map\":{" + entries + "}}");
    checkpoint c = open_checkpoint(s.dir.path());
    EXPECT_EQ(c.tensors.size(), s.all.size());
    EXPECT_EQ(c.metadata.at("total_size"), "123");
    EXPECT_EQ(c.metadata.at("format"), "pt");
    EXPECT_EQ(c.metadata.at("ratio"), nlohmann::json(0.5).dump());
    EXPECT_EQ(c.metadata.at("ok"), "true");
    EXPECT_EQ(c.metadata.at("none"), "null");
    EXPECT_EQ(c.metadata.at("nested"), R"({"a":[1,{"b":"c"}],"d":{}})");
    EXPECT_EQ(c.metadata.size(), 6u);
    // A root key given twice counts the last time, as before.
    write("{\"weight_map\":{\"x\":\"nowhere.safetensors\"},\"weight_map\":{" + entries + "}}");
    EXPECT_EQ(open_checkpoint(s.dir.path()).tensors.size(), s.all.size());
    // Shard headers are read while the index is parsed, but only of names that pass the
    // checks: a FIFO named first is never opened (an open would wait for a writer).
    const std::string fifo = s.dir / "a-fifo.safetensors";
    ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
    write("{\"weight_map\":{\"aaa\":\"a-fifo.safetensors\"," + entries + "}}");
    EXPECT_EQ(error_of().rfind("checkpoint_error aaa: ", 0), 0u) << error_of();
    EXPECT_NE(error_of().find("does not exist"), std::string::npos) << error_of();
}

TEST(Checkpoint, OverlappingOrOutOfFileRangesAreFormatErrors) {
    sample s;
    checkpoint c = open_checkpoint(s.dir.path());
    std::size_t k = 0;
    while (c.shards[k].header.tensors.size() < 2) ++k;
    const std::string& shard = c.shards[k].path;
    // Rewrite the shard's header so the second tensor overlaps the first.
    auto info = c.shards[k].header;
    ASSERT_GE(info.tensors.size(), 2u);
    nlohmann::json h;
    for (const auto& t : info.tensors)
        h[t.name] = {{"dtype", "F32"}, {"shape", t.shape}, {"data_offsets", {t.begin, t.end}}};
    auto& second = h[info.tensors[1].name]["data_offsets"];
    second[0] = second[0].get<std::uint64_t>() - 4;
    second[1] = second[1].get<std::uint64_t>() - 4;
    std::string text = h.dump();
    auto bytes = test::read_whole(shard);
    std::vector<unsigned char> out(8);
    std::uint64_t n = text.size();
    for (int i = 0; i < 8; ++i) out[i] = static_cast<unsigned char>(n >> (8 * i));
    out.insert(out.end(), text.begin(), text.end());
    out.insert(out.end(), bytes.begin() + static_cast<long>(info.data_offset), bytes.end());
    std::ofstream(shard, std::ios::binary | std::ios::trunc).write(reinterpret_cast<const char*>(out.data()), out.size());
    try {
        open_checkpoint(s.dir.path());
        ADD_FAILURE();
    } catch (const format_error& e) {
        EXPECT_EQ(e.file(), shard);
    }
    // Out of the file: truncated.
    sample t;
    checkpoint ct = open_checkpoint(t.dir.path());
    fs::resize_file(ct.shards[1].path, ct.shards[1].file_size - 16);
    try {
        open_checkpoint(t.dir.path());
        ADD_FAILURE();
    } catch (const format_error& e) {
        EXPECT_EQ(e.file(), ct.shards[1].path);
    }
}

TEST(Checkpoint, IoErrorMidLoadSaysWhichTensorsAreComplete) {
    sample s;
    checkpoint c = open_checkpoint(s.dir.path());
    // The reads after the first two fail (a disk error mid-load).
    static std::atomic<int> preads{0};
    preads = 0;
    struct fault_scope {
        fault_scope() {
            ferry::sys::hook = [](const char* call, std::size_t*) {
                if (std::strcmp(call, "pread") != 0 || ++preads <= 2) return 0;
                errno = EIO;
                return -1;
            };
        }
        ~fault_scope() { ferry::sys::hook = nullptr; }
    } faults;
    try {
        load_checkpoint(c);
        ADD_FAILURE();
    } catch (const checkpoint_io_error& e) {
        EXPECT_FALSE(e.complete().empty());
        EXPECT_FALSE(e.incomplete().empty());
        EXPECT_EQ(e.complete().size() + e.incomplete().size(), 8u);
    }
}

// Small whole tensors read into a caller's host buffers: a run of them adjacent in a shard is
// one read into a slot and a copy each (far fewer reads than tensors), byte-exact; a failed
// read fails exactly the tensors it carried, and the others are complete.
TEST(Checkpoint, SmallDestinationsAdjacentInAShardAreReadTogether) {
    test::temp_dir dir;
    std::vector<named_array> all;
    for (int i = 0; i < 300; ++i) {
        char name[32];
        std::snprintf(name, sizeof name, "experts.%03d.scale", i);
        all.push_back({name, iota({i % 7 + 1, 16}, static_cast<float>(1000 * i))});
    }
    all.push_back({"big", iota({128, 256}, 7)});  // 128 KiB: straight into place
    save_checkpoint(dir.path(), all, 40000);
    checkpoint c = open_checkpoint(dir.path());
    ASSERT_GT(c.shards.size(), 1u);
    checkpoint_load_options o;
    std::vector<array> dst;
    for (const auto& t : all) {
        dst.push_back(array(t.value.type(), t.value.shape()));
        o.into[t.name] = dst.back();
    }
    o.only_into = true;
    auto l = load_checkpoint(c, o);
    for (std::size_t i = 0; i < all.size(); ++i) EXPECT_TRUE(same(dst[i], all[i].value)) << all[i].name;
    EXPECT_LT(l.stats.requests, all.size() / 10);
    for (const auto& tp : l.plan.tensors) EXPECT_EQ(tp.route, read_route::whole) << tp.name;

    // The third read fails: its tensors are incomplete, every other one complete and exact.
    static std::atomic<int> preads{0};
    preads = 0;
    struct fault_scope {
        fault_scope() {
            ferry::sys::hook = [](const char* call, std::size_t*) {
                if (std::strcmp(call, "pread") != 0 || ++preads != 3) return 0;
                errno = EIO;
                return -1;
            };
        }
        ~fault_scope() { ferry::sys::hook = nullptr; }
    };
    for (auto& d : dst) std::memset(d.data(), 0, d.nbytes());
    try {
        fault_scope faults;
        load_checkpoint(c, o);
        ADD_FAILURE() << "no error";
    } catch (const checkpoint_io_error& e) {
        EXPECT_FALSE(e.incomplete().empty());
        EXPECT_FALSE(e.complete().empty());
        EXPECT_EQ(e.complete().size() + e.incomplete().size(), all.size());
        for (const auto& name : e.complete()) {
            auto it = std::find_if(all.begin(), all.end(), [&](auto& t) { return t.name == name; });
            ASSERT_NE(it, all.end());
            EXPECT_TRUE(same(dst[static_cast<std::size_t>(it - all.begin())], it->value)) << name;
        }
    }
}

// while_reading sees the tensors at the places the load returns, once, while the reads run;
// its error fails the load only after every read ended (a caller's destination is complete).
// Five tensors of `each` bytes in one shard, loaded whole without the one in the middle of the
// file: a checkpoint value assembled by hand, since a shard's own header tiles its data.
checkpoint_load load_without_the_middle_one(const std::string& dir, std::int64_t each, std::vector<named_array>& all) {
    for (int k = 0; k < 5; ++k)
        all.push_back({"t" + std::to_string(k), iota({each / 4}, static_cast<float>(k * 1000000))});
    save_checkpoint(dir, all, 1ull << 30);
    checkpoint c = open_checkpoint(dir);
    EXPECT_EQ(c.shards.size(), 1u);
    std::vector<std::size_t> by_offset(c.tensors.size());
    std::iota(by_offset.begin(), by_offset.end(), 0);
    std::sort(by_offset.begin(), by_offset.end(), [&](auto x, auto y) { return c.tensors[x].offset < c.tensors[y].offset; });
    c.tensors.erase(c.tensors.begin() + static_cast<std::ptrdiff_t>(by_offset[2]));
    return load_checkpoint(c, {});
}

// A load of every tensor whole reads each shard's tensors as one range (started before the
// plan is made). Where a hand-made checkpoint leaves a gap in a shard, a small one is read
// with the rest; a large one sends the load down the per-tensor reads, which skip it.
TEST(Checkpoint, AWholeLoadReadsEachShardAsOneRange) {
    sample s;
    checkpoint c = open_checkpoint(s.dir.path());
    ASSERT_GT(c.shards.size(), 1u);
    checkpoint_load l = load_checkpoint(c, {});
    EXPECT_EQ(l.stats.requests, c.shards.size());
    EXPECT_EQ(l.stats.bytes_read, c.total_bytes());
    for (const auto& t : s.all) EXPECT_TRUE(same(find(l, t.name), t.value)) << t.name;

    for (const std::int64_t each : {std::int64_t{512} << 10, std::int64_t{2} << 20}) {
        test::temp_dir dir;
        std::vector<named_array> all;
        checkpoint_load h = load_without_the_middle_one(dir.path(), each, all);
        ASSERT_EQ(h.tensors.size(), 4u);
        for (const auto& t : h.tensors) {
            auto it = std::find_if(all.begin(), all.end(), [&](const named_array& a) { return a.name == t.name; });
            ASSERT_NE(it, all.end());
            EXPECT_TRUE(same(t.value, it->value)) << t.name;
        }
        const auto four = static_cast<std::uint64_t>(4 * each);
        if (each < (1 << 20)) {  // under the 1 MiB a gap may cost: one range, the gap in it
            EXPECT_EQ(h.stats.requests, 1u);
            EXPECT_EQ(h.stats.bytes_read, four + static_cast<std::uint64_t>(each));
        } else {  // the two tensors on each side of it, each pair one read
            EXPECT_EQ(h.stats.requests, 2u);
            EXPECT_EQ(h.stats.bytes_read, four);
        }
    }
}

// A stop asked of the caller's thread reaches a whole load's reads, which a thread of the load
// submits, as it reaches the per-tensor reads: the load ends with the interrupt, not the tensors.
TEST(Checkpoint, AStopRequestEndsAWholeLoadAsAnInterrupt) {
    sample s;
    checkpoint c = open_checkpoint(s.dir.path());
    for (const bool whole : {true, false}) {
        checkpoint_load_options o;
        if (!whole) o.select = {tensor_selection::kind::glob, {"*"}};
        stop_source stop;
        stop.request_stop();
        stop_scope scope(stop);
        try {
            load_checkpoint(c, o);
            ADD_FAILURE() << "the load ended without the interrupt (whole: " << whole << ")";
        } catch (const error& e) {
            EXPECT_NE(std::string(e.what()).find("interrupted"), std::string::npos) << e.what();
        }
    }
}

// open_and_load_checkpoint issues a whole load's reads before the open has parsed the index (the
// folder's listing names the shards): the first read of tensor bytes is under way before the
// open has returned (seen from `opened`, called after the open and before the load starts).
// Shards of 1 MiB tensors, so that a read of their bytes (64 KiB or more) is told apart from a
// header's.
std::atomic<int> big_preads{0};

TEST(Checkpoint, OpenAndLoadReadsBeforeTheOpenHasReturned) {
    test::temp_dir dir;
    std::vector<named_array> all;
    for (int k = 0; k < 6; ++k) all.push_back({"t" + std::to_string(k), iota({1 << 18}, static_cast<float>(k))});
    save_checkpoint(dir.path(), all, 3u << 20);
    big_preads = 0;
    ferry::sys::hook = [](const char* call, std::size_t* length) {
        if (std::strcmp(call, "pread") == 0 && *length >= (64u << 10)) ++big_preads;
        return 0;
    };
    bool read_during_open = false;
    std::size_t shards = 0;
    checkpoint_load l = open_and_load_checkpoint({dir.path()}, {}, [&](const checkpoint& c) {
        shards = c.shards.size();
        for (int i = 0; i < 10000 && big_preads == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        read_during_open = big_preads > 0;
    });
    ferry::sys::hook = nullptr;
    EXPECT_GT(shards, 1u);
    EXPECT_TRUE(read_during_open) << "no read of tensor bytes before the load began";
    EXPECT_EQ(l.stats.requests, shards);
    EXPECT_GT(l.stats.open_seconds, 0.0);
    EXPECT_EQ(l.stats.reads_began, "listing");
    EXPECT_GT(l.stats.first_read_seconds, 0.0);  // counted from the start of the open
    EXPECT_GT(l.stats.headers_seconds, 0.0);
    EXPECT_LE(l.stats.headers_seconds, l.stats.open_seconds);
    ASSERT_EQ(l.tensors.size(), all.size());
    for (const auto& t : all) EXPECT_TRUE(same(find(l, t.name), t.value)) << t.name;

    // Not a whole load: the open reads headers only, the load the tensors it selected.
    checkpoint_load_options o;
    o.select = {tensor_selection::kind::names, {"t1", "t4"}};
    big_preads = 0;
    ferry::sys::hook = [](const char* call, std::size_t* length) {
        if (std::strcmp(call, "pread") == 0 && *length >= (64u << 10)) ++big_preads;
        return 0;
    };
    int during = -1;
    checkpoint_load some = open_and_load_checkpoint({dir.path()}, o, [&](const checkpoint&) { during = big_preads; });
    ferry::sys::hook = nullptr;
    EXPECT_EQ(during, 0);
    ASSERT_EQ(some.tensors.size(), 2u);
    EXPECT_TRUE(same(find(some, "t4"), all[4].value));
}

// The same into GPU memory: the early reads' block is the GPU's, every byte as saved.
TEST(Checkpoint, OpenAndLoadIntoGpuMemory) {
    FERRY_REQUIRE_GPU();
    sample s;
    checkpoint_load_options o;
    o.where = placement::cuda(0);
    checkpoint_load l = open_and_load_checkpoint({s.dir.path()}, o);
    EXPECT_EQ(l.stats.requests, open_checkpoint(s.dir.path()).shards.size());  // one read a shard
    for (const auto& t : s.all) {
        const array& got = find(l, t.name);
        EXPECT_TRUE(got.where().on_gpu()) << t.name;
        EXPECT_TRUE(same(got.copy_to(placement::host()), t.value)) << t.name;
    }
}

// An open that fails once the reads are under way (the index names a tensor no shard holds, a
// check made after the headers are read) throws its error after those reads ended; the
// checkpoint, mended, loads again.
TEST(Checkpoint, OpenAndLoadWhoseOpenFailsAfterItsReadsBegan) {
    sample s;
    const fs::path index = s.dir / "model.safetensors.index.json";
    auto j = read_json(index);
    const auto good = j;
    j["weight_map"]["ghost"] = j["weight_map"]["head"];
    write_json(index, j);
    try {
        open_and_load_checkpoint({s.dir.path()});
        ADD_FAILURE() << "no error";
    } catch (const checkpoint_error& e) {
        EXPECT_EQ(e.tensor(), "ghost");
        EXPECT_NE(std::string(e.what()).find("no shard holds it"), std::string::npos) << e.what();
    }
    write_json(index, good);
    checkpoint_load l = open_and_load_checkpoint({s.dir.path()});
    for (const auto& t : s.all) EXPECT_TRUE(same(find(l, t.name), t.value)) << t.name;

    // A stop asked before the call ends it as an interrupt, whatever has started.
    stop_source stop;
    stop.request_stop();
    stop_scope scope(stop);
    EXPECT_THROW(open_and_load_checkpoint({s.dir.path()}), error);
}

void check_while_reading(placement where) {
    sample s;
    checkpoint c = open_checkpoint(s.dir.path());
    checkpoint_load_options o;
    o.where = where;
    o.slices["layer.0.o"] = tensor_slice::split(1, 2, 1);  // row segments
    o.slices["embed"] = tensor_slice::split(0, 2, 0);
    array dst(dtype::float32, {32, 48}, where);
    o.into["layer.1.o"] = dst;
    std::vector<std::tuple<std::string, const void*, std::vector<std::int64_t>>> seen;
    std::size_t planned = 0;
    int calls = 0;
    o.while_reading = [&](const std::vector<named_array>& ts, const checkpoint_plan& p) {
        ++calls;
        for (const auto& t : ts) seen.emplace_back(t.name, t.value.data(), t.value.shape());
        planned = p.tensors.size();
    };
    auto l = load_checkpoint(c, o);
    EXPECT_EQ(calls, 1);
    ASSERT_EQ(seen.size(), l.tensors.size());
    EXPECT_EQ(planned, l.tensors.size());
    for (std::size_t i = 0; i < seen.size(); ++i) {
        EXPECT_EQ(std::get<0>(seen[i]), l.tensors[i].name);
        EXPECT_EQ(std::get<1>(seen[i]), l.tensors[i].value.data()) << l.tensors[i].name;
        EXPECT_EQ(std::get<2>(seen[i]), l.tensors[i].value.shape()) << l.tensors[i].name;
    }
    EXPECT_EQ(find(l, "layer.1.o").data(), dst.data());
    check_slice(s.get("layer.0.o"), find(l, "layer.0.o").copy_to(placement::host()), 1, 24);
    EXPECT_TRUE(same(find(l, "head").copy_to(placement::host()), s.get("head")));

    array fresh(dtype::float32, {32, 48}, where);
    o.into["layer.1.o"] = fresh;
    o.while_reading = [](const std::vector<named_array>&, const checkpoint_plan&) {
        throw std::runtime_error("the caller's wrapping failed");
    };
    EXPECT_THROW(
        {
            try {
                load_checkpoint(c, o);
            } catch (const std::runtime_error& e) {
                EXPECT_STREQ(e.what(), "the caller's wrapping failed");
                throw;
            }
        },
        std::runtime_error);
    EXPECT_TRUE(same(fresh.copy_to(placement::host()), s.get("layer.1.o")));
}

TEST(Checkpoint, WhileReadingSeesTheReturnedPlacesAndItsErrorWaitsForTheReads) {
    check_while_reading(placement::host());
}

TEST(Checkpoint, WhileReadingOnTheGpu) {
    FERRY_REQUIRE_GPU();
    check_while_reading(placement::cuda(0));
}

// places_while_reading hands a caller that makes its own tensors each planned tensor's first
// byte and the block, once, while the reads run; the result then holds no Arrays of its own,
// and the bytes at those places are the tensors' once the load returns. With while_reading
// set too, both are called and the result keeps its tensors.
void check_places_while_reading(placement where, bool whole) {
    sample s;
    checkpoint c = open_checkpoint(s.dir.path());
    checkpoint_load_options o;
    o.where = where;
    if (!whole) o.select = {tensor_selection::kind::glob, {"*"}};  // the per-tensor reads
    std::vector<std::pair<std::string, unsigned char*>> seen;
    array kept;  // the result holds no reference to the block: the caller keeps it
    const void* block = nullptr;
    int calls = 0;
    o.places_while_reading = [&](const checkpoint_plan& p, const std::vector<unsigned char*>& at, const array& b) {
        ++calls;
        ASSERT_EQ(at.size(), p.tensors.size());
        for (std::size_t i = 0; i < at.size(); ++i) seen.emplace_back(p.tensors[i].name, at[i]);
        kept = b;
        block = b.data();
        EXPECT_EQ(b.where().kind, where.kind);
    };
    checkpoint_load l = load_checkpoint(c, o);
    EXPECT_EQ(calls, 1);
    EXPECT_TRUE(l.tensors.empty());
    ASSERT_EQ(seen.size(), s.all.size());
    ASSERT_NE(block, nullptr);
    for (const auto& [name, at] : seen) {
        const array want = s.get(name);
        EXPECT_GE(at, static_cast<const unsigned char*>(block)) << name;
        array got = array(std::shared_ptr<const void>(), at, want.type(), want.shape(), where).copy_to(placement::host());
        EXPECT_TRUE(same(got, want)) << name;
    }

    int both = 0;
    o.while_reading = [&](const std::vector<named_array>&, const checkpoint_plan&) { ++both; };
    checkpoint_load k = load_checkpoint(c, o);
    EXPECT_EQ(both, 1);
    EXPECT_EQ(calls, 2);
    EXPECT_EQ(k.tensors.size(), s.all.size());
}

TEST(Checkpoint, PlacesWhileReadingGivesEachTensorsFirstByteAndNoArrays) {
    check_places_while_reading(placement::host(), true);
    check_places_while_reading(placement::host(), false);
}

TEST(Checkpoint, PlacesWhileReadingOnTheGpu) {
    FERRY_REQUIRE_GPU();
    check_places_while_reading(placement::cuda(0), true);
    check_places_while_reading(placement::cuda(0), false);
}

TEST(Checkpoint, SaveRemovesAnOlderIndexFirstAndWritesItLast) {
    sample s;
    auto before = fs::last_write_time(s.dir / "model.safetensors.index.json");
    // Saving into the same folder again replaces every file; the index is the newest.
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    auto files = save_checkpoint(s.dir.path(), s.all, 10000, {{"note", "x"}});
    ASSERT_GE(files.size(), 2u);
    EXPECT_EQ(fs::path(files.back()).filename(), "model.safetensors.index.json");
    auto idx = fs::last_write_time(files.back());
    EXPECT_GT(idx, before);
    for (std::size_t i = 0; i + 1 < files.size(); ++i) EXPECT_LE(fs::last_write_time(files[i]), idx);
    checkpoint c = open_checkpoint(s.dir.path());
    EXPECT_EQ(c.metadata.at("note"), "x");
    EXPECT_EQ(c.shards[0].header.metadata.at("format"), "pt");
    // No temporary files are left behind.
    for (const auto& e : fs::directory_iterator(s.dir.path()))
        EXPECT_TRUE(e.path().extension() == ".safetensors" || e.path().extension() == ".json") << e.path();
}

void check_callers_block(placement where) {
    sample s;
    checkpoint c = open_checkpoint(s.dir.path());
    {
        checkpoint_load_options o;
        o.where = where;
        o.slices["layer.0.o"] = tensor_slice::split(1, 2, 1);
        array given;
        std::uint64_t asked = 0;
        o.allocate = [&](std::uint64_t bytes, const placement& w) {
            asked = bytes;
            given = array(dtype::uint8, {static_cast<std::int64_t>(bytes + 512)}, w);
            return given;
        };
        auto l = load_checkpoint(c, o);
        ASSERT_GT(asked, 0u);
        auto* lo = static_cast<const unsigned char*>(given.data());
        for (const auto& t : l.tensors) {
            auto* p = static_cast<const unsigned char*>(t.value.data());
            EXPECT_TRUE(p >= lo && p + t.value.nbytes() <= lo + asked) << t.name;
            EXPECT_EQ(t.value.owner(), given.owner()) << t.name;
        }
        for (const auto& t : s.all)
            if (t.name != "layer.0.o") EXPECT_TRUE(same(find(l, t.name).copy_to(placement::host()), t.value)) << t.name;
        check_slice(s.get("layer.0.o"), find(l, "layer.0.o").copy_to(placement::host()), 1, 24);
    }
    // A block too small, or in other memory, is refused before any byte lands in it.
    checkpoint_load_options o;
    o.where = where;
    o.allocate = [](std::uint64_t bytes, const placement&) {
        return array(dtype::uint8, {static_cast<std::int64_t>(bytes - 1)});
    };
    EXPECT_THROW(
        {
            try {
                load_checkpoint(c, o);
            } catch (const usage_error& e) {
                EXPECT_NE(std::string(e.what()).find("the allocator returned"), std::string::npos) << e.what();
                throw;
            }
        },
        usage_error);
    o.allocate = [where](std::uint64_t bytes, const placement&) {
        return array(dtype::uint8, {static_cast<std::int64_t>(bytes)},
                     where.on_gpu() ? placement::host() : placement::pinned());
    };
    if (where.on_gpu()) EXPECT_THROW(load_checkpoint(c, o), usage_error);
}

TEST(Checkpoint, FreshTensorsShareTheCallersBlock) { check_callers_block(placement::host()); }

TEST(Checkpoint, FreshTensorsShareTheCallersBlockOnTheGpu) {
    FERRY_REQUIRE_GPU();
    check_callers_block(placement::cuda(0));
}

TEST(Checkpoint, LoadsIntoTheGpu) {
    FERRY_REQUIRE_GPU();
    sample s;
    checkpoint c = open_checkpoint(s.dir.path());
    for (route_choice r : {route_choice::segments, route_choice::span}) {
        checkpoint_load_options o;
        o.where = placement::cuda(0);
        o.route = r;
        o.slices["layer.0.o"] = tensor_slice::split(1, 2, 1);
        o.slices["embed"] = tensor_slice::split(0, 2, 1);
        array dst(dtype::bfloat16, {32, 32}, placement::cuda(0));
        o.into["layer.1.q"] = dst;
        auto l = load_checkpoint(c, o);
        check_slice(s.get("layer.0.o"), find(l, "layer.0.o").copy_to(placement::host()), 1, 24);
        check_slice(s.get("embed"), find(l, "embed").copy_to(placement::host()), 0, 32);
        check_slice(astype(astype(s.get("layer.1.q"), dtype::bfloat16), dtype::float32),
                    astype(dst.copy_to(placement::host()), dtype::float32), 0, 0);
        EXPECT_TRUE(same(find(l, "head").copy_to(placement::host()), s.get("head")));
    }
}

}  // namespace
}  // namespace ferry

namespace ferry {
namespace {

// Drops `path` from the page cache; false where the file system keeps the pages anyway.
bool evict(const std::string& path) {
    int fd = ::open(path.c_str(), O_RDONLY);
    if (fd < 0) return false;
    ::fdatasync(fd);
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    off_t n = ::lseek(fd, 0, SEEK_END);
    void* m = ::mmap(nullptr, static_cast<std::size_t>(n), PROT_READ, MAP_SHARED, fd, 0);
    bool cold = false;
    if (m != MAP_FAILED) {
        std::vector<unsigned char> v((static_cast<std::size_t>(n) + 4095) / 4096);
        if (::mincore(m, static_cast<std::size_t>(n), v.data()) == 0)
            cold = std::count_if(v.begin(), v.end(), [](unsigned char c) { return c & 1; }) * 10 < static_cast<long>(v.size());
        ::munmap(m, static_cast<std::size_t>(n));
    }
    ::close(fd);
    return cold;
}

std::uint64_t moved_by(const io_stats& s, const char* mover) {
    const route_stats* r = s.route("posix", mover);
    return r ? r->read.bytes : 0;
}

TEST(Checkpoint, ColdShardsAreReadByTheWorkersStreamsCachedOnesByTheLanes) {
    FERRY_REQUIRE_GPU();
    sample s;
    checkpoint c = open_checkpoint(s.dir.path());
    for (const auto& sh : c.shards)
        if (!evict(sh.path)) GTEST_SKIP() << "this file system keeps evicted pages: " << sh.path;
    checkpoint_load_options o;
    o.where = placement::cuda(0);
    io_stats before = process_stats();
    auto cold = load_checkpoint(c, o);
    io_stats cold_moved = process_stats() - before;
    for (const auto& t : s.all) EXPECT_TRUE(same(find(cold, t.name).copy_to(placement::host()), t.value)) << t.name;
    // Every shard was cold: the planner took each plain range (whole tensors, runs of them).
    EXPECT_EQ(moved_by(cold_moved, "staged"), cold.stats.bytes_read);
    EXPECT_EQ(moved_by(cold_moved, "lanes"), 0u);

    // Now cached: one gather per batch on the lanes.
    before = process_stats();
    auto hot = load_checkpoint(c, o);
    io_stats hot_moved = process_stats() - before;
    for (const auto& t : s.all) EXPECT_TRUE(same(find(hot, t.name).copy_to(placement::host()), t.value)) << t.name;
    EXPECT_EQ(moved_by(hot_moved, "lanes"), hot.stats.bytes_read);
    EXPECT_EQ(moved_by(hot_moved, "staged"), 0u);
}

TEST(Checkpoint, RegisteredShardsAreReadByDmaFromTheirPages) {
    FERRY_REQUIRE_GPU();
    sample s;
    checkpoint c = open_checkpoint(s.dir.path());
    std::vector<registered_file> regs;
    for (const auto& sh : c.shards) regs.emplace_back(sh.path);
    checkpoint_load_options o;
    o.where = placement::cuda(0);
    io_stats before = process_stats();
    auto got = load_checkpoint(c, o);
    io_stats moved = process_stats() - before;
    for (const auto& t : s.all) EXPECT_TRUE(same(find(got, t.name).copy_to(placement::host()), t.value)) << t.name;
    const route_stats* r = moved.route("registered", "device-dma");
    ASSERT_NE(r, nullptr);
    EXPECT_EQ(r->read.bytes, got.stats.bytes_read) << "every plain range from the registered pages";
    EXPECT_EQ(moved_by(moved, "lanes"), 0u);
}

}  // namespace
}  // namespace ferry
