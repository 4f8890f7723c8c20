// The C++ group load over NCCL. Here (no GPU) only its refusals run: no communicator, an NCCL
// library that cannot be loaded. On a GPU, world size 1 over a real NCCL communicator (made
// through the same run-time shim: ncclGetUniqueId + ncclCommInitRank with one rank) loads a
// checkpoint written by save_checkpoint and is compared byte for byte with the plain
// single-process load; a shard truncated in the middle of the load makes the load throw a
// group_load_error naming rank 0 and the file.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "cuda/cuda_runtime.hpp"
#include "ferry/checkpoint.hpp"
#include "ferry/distributed.hpp"
#include "ferry/error.hpp"
#include "shim/nccl.hpp"
#include "test_util.hpp"

namespace ferry {
namespace {

namespace fs = std::filesystem;

// The wheel's libnccl.so.2 when the loader's search path has none (torch brings nvidia-nccl).
std::string nccl_library() {
    if (shim::nccl("libnccl.so.2").state.loaded) return "libnccl.so.2";
    std::string out = test::python_nccl_library();
    return !out.empty() && shim::nccl(out).state.loaded ? out : std::string();
}

TEST(GroupLoad, NamesTheNcclLibraryItCannotLoad) {
    checkpoint c;
    group_load_options o;
    o.nccl_library = "libferry-no-such-nccl.so.2";
    try {
        load_checkpoint_group(c, o);
        FAIL() << "expected usage_error";
    } catch (const usage_error& e) {
        EXPECT_NE(std::string(e.what()).find("libferry-no-such-nccl.so.2"), std::string::npos) << e.what();
    }
    o.nccl_library = "libc.so.6";  // loads, but is no NCCL
    try {
        load_checkpoint_group(c, o);
        FAIL() << "expected usage_error";
    } catch (const usage_error& e) {
        EXPECT_NE(std::string(e.what()).find("ncclGetVersion"), std::string::npos) << e.what();
    }
}

TEST(GroupLoad, NeedsACommunicatorAndAPositiveTimeout) {
    std::string lib = nccl_library();
    if (lib.empty()) GTEST_SKIP() << "no libnccl.so.2 here (scripts/deps.sh installs torch, which brings it)";
    checkpoint c;
    group_load_options o;
    o.nccl_library = lib;
    try {
        load_checkpoint_group(c, o);
        FAIL() << "expected usage_error";
    } catch (const usage_error& e) {
        EXPECT_NE(std::string(e.what()).find("no communicator"), std::string::npos) << e.what();
    }
    o.timeout_seconds = 0;
    EXPECT_THROW(load_checkpoint_group(c, o), usage_error);
}

// A world of one rank on GPU 0, through the run-time shim.
struct one_rank {
    const shim::nccl_library* lib = nullptr;
    shim::nccl_comm_t comm = nullptr;
    std::string library;
    std::string skip;
    one_rank() {
        if (cuda_device_count() == 0) {
            skip = "needs a CUDA GPU: " + cuda_unavailable_reason();
            return;
        }
        library = nccl_library();
        if (library.empty()) {
            skip = "no libnccl.so.2 (install torch or nvidia-nccl-cu13)";
            return;
        }
        lib = &shim::nccl(library);
        detail::set_device(0);
        shim::nccl_unique_id id{};
        if (int rc = lib->api.get_unique_id(&id); rc != shim::nccl_success)
            throw std::runtime_error(std::string("ncclGetUniqueId: ") + lib->api.get_error_string(rc));
        if (int rc = lib->api.comm_init_rank(&comm, 1, id, 0); rc != shim::nccl_success)
            throw std::runtime_error(std::string("ncclCommInitRank: ") + lib->api.get_error_string(rc));
    }
    ~one_rank() {
        if (comm) lib->api.comm_destroy(comm);
    }
};

array pattern_array(dtype t, std::vector<std::int64_t> shape, std::uint32_t seed) {
    array a(t, std::move(shape));
    auto v = test::pattern(a.nbytes(), 0, seed);
    // Keep floating values finite and convertible: clear each element's exponent MSB.
    std::memcpy(a.data(), v.data(), v.size());
    if (t == dtype::float32)
        for (std::size_t i = 0; i < a.size(); ++i) static_cast<std::uint8_t*>(a.data())[4 * i + 3] &= 0xBF;
    if (t == dtype::float64)
        for (std::size_t i = 0; i < a.size(); ++i) static_cast<std::uint8_t*>(a.data())[8 * i + 7] &= 0xBF;
    if (t == dtype::bfloat16 || t == dtype::float16)
        for (std::size_t i = 0; i < a.size(); ++i) static_cast<std::uint8_t*>(a.data())[2 * i + 1] &= 0xBF;
    return a;
}

struct sample {
    test::temp_dir dir;
    std::vector<named_array> all;
    sample() {
        std::uint32_t seed = 1;
        all.push_back({"model.embed_tokens.weight", pattern_array(dtype::bfloat16, {96, 48}, seed++)});
        for (int i = 0; i < 3; ++i) {
            std::string p = "model.layers." + std::to_string(i) + ".";
            all.push_back({p + "self_attn.q_proj.weight", pattern_array(dtype::bfloat16, {48, 48}, seed++)});
            all.push_back({p + "self_attn.o_proj.weight", pattern_array(dtype::bfloat16, {48, 48}, seed++)});
            all.push_back({p + "self_attn.q_proj.bias", pattern_array(dtype::float32, {48}, seed++)});
            all.push_back({p + "mlp.down_proj.weight", pattern_array(dtype::bfloat16, {48, 72}, seed++)});
            all.push_back({p + "input_layernorm.weight", pattern_array(dtype::float16, {48}, seed++)});
        }
        all.push_back({"model.norm.weight", pattern_array(dtype::float32, {48}, seed++)});
        all.push_back({"step", pattern_array(dtype::int64, {1}, seed++)});
        all.push_back({"scale", pattern_array(dtype::float64, {}, seed++)});
        save_checkpoint(dir.path(), all, 20000);
    }
};

bool same_bytes(const array& a, const array& b) {
    if (a.shape() != b.shape() || a.type() != b.type()) return false;
    array ha = a.copy_to(placement::host()), hb = b.copy_to(placement::host());
    return std::memcmp(ha.data(), hb.data(), ha.nbytes()) == 0;
}

const array* find(const std::vector<named_array>& v, const std::string& n) {
    for (const auto& t : v)
        if (t.name == n) return &t.value;
    return nullptr;
}

// The plain load with the same slices and conversion, on the GPU.
checkpoint_load plain(const checkpoint& c, const std::vector<tp_rule>& tp, std::optional<dtype> as) {
    checkpoint_load_options o;
    o.where = placement::cuda(0);
    o.as = as;
    for (const auto& r : tp) o.slice_rules.push_back({r.pattern, tensor_slice::split(r.dim, 1, 0)});
    return load_checkpoint(c, o);
}

TEST(GroupLoadGpu, WorldSizeOneOverNcclIsByteExactAgainstThePlainLoad) {
    one_rank w;
    if (!w.skip.empty()) GTEST_SKIP() << w.skip;
    sample s;
    checkpoint c = open_checkpoint(s.dir.path());
    ASSERT_GE(c.shards.size(), 3u);
    const std::vector<tp_rule> tp = {{"*.q_proj.weight", 0}, {"*embed_tokens.weight", 0}, {"*.o_proj.weight", -1},
                                     {"*.down_proj.weight", -1}};
    struct job {
        std::vector<tp_rule> tp;
        std::optional<dtype> as;
        std::uint64_t chunk;
    };
    for (const job& j : {job{{}, std::nullopt, 8192}, job{tp, std::nullopt, 4096}, job{tp, dtype::float32, 3000},
                         job{{}, dtype::bfloat16, 0}}) {
        group_load_options o;
        o.communicator = w.comm;
        o.nccl_library = w.library;
        o.tp = j.tp;
        o.as = j.as;
        o.chunk_bytes = j.chunk;
        o.timeout_seconds = 60;
        std::uint64_t last = 0;
        o.progress = [&](std::uint64_t done, std::uint64_t total) {
            EXPECT_GE(done, last);
            EXPECT_LE(done, total);
            last = done;
        };
        group_load g = load_checkpoint_group(c, o);
        checkpoint_load ref = plain(c, j.tp, j.as);
        ASSERT_EQ(g.tensors.size(), ref.tensors.size());
        for (const auto& t : ref.tensors) {
            const array* got = find(g.tensors, t.name);
            ASSERT_NE(got, nullptr) << t.name;
            EXPECT_TRUE(same_bytes(*got, t.value)) << t.name;
        }
        EXPECT_EQ(g.stats.world, 1);
        EXPECT_EQ(g.stats.bytes_received, 0u);
        EXPECT_EQ(g.stats.bytes_read, ref.stats.bytes_read);
        EXPECT_EQ(g.stats.replicated_bytes_read, g.plan.replicated_bytes);
        EXPECT_EQ(g.stats.chunks, g.plan.chunks.size());
        EXPECT_EQ(last, g.plan.replicated_bytes);
        if (!j.tp.empty()) {
            EXPECT_GT(g.stats.sliced_bytes_read, 0u);
        }
    }

    // Into the caller's buffers; a layout of one node changes nothing.
    group_load_options o;
    o.communicator = w.comm;
    o.nccl_library = w.library;
    o.layout = group_layout::uniform(1, 1);
    o.chunk_bytes = 2048;
    checkpoint_load ref = plain(c, {}, std::nullopt);
    for (const auto& t : ref.tensors) o.into[t.name] = array(t.value.type(), t.value.shape(), placement::cuda(0));
    o.only_into = true;
    o.strict_into = true;
    group_load g = load_checkpoint_group(c, o);
    EXPECT_TRUE(g.missing.empty() && g.unexpected.empty());
    for (const auto& t : ref.tensors) {
        EXPECT_TRUE(same_bytes(o.into.at(t.name), t.value)) << t.name;
        EXPECT_EQ(find(g.tensors, t.name)->data(), o.into.at(t.name).data()) << t.name;
    }
}

TEST(GroupLoadGpu, AFailureNamesTheRankTheFileAndTheStep) {
    one_rank w;
    if (!w.skip.empty()) GTEST_SKIP() << w.skip;
    sample s;
    checkpoint c = open_checkpoint(s.dir.path());
    group_load_options o;
    o.communicator = w.comm;
    o.nccl_library = w.library;
    o.timeout_seconds = 60;

    // A destination of the wrong shape: at the open step, before any byte moves.
    o.into["model.norm.weight"] = array(dtype::float32, {3}, placement::cuda(0));
    try {
        load_checkpoint_group(c, o);
        FAIL() << "expected group_load_error";
    } catch (const group_load_error& e) {
        EXPECT_EQ(e.rank(), 0);
        EXPECT_EQ(e.step(), "open");
        EXPECT_NE(std::string(e.what()).find("model.norm.weight"), std::string::npos) << e.what();
        EXPECT_EQ(e.failed_ranks(), std::vector<int>{0});
    }
    o.into.clear();

    // The last shard truncated after the first chunk: a later chunk's read fails.
    std::string victim = c.shards.back().path;
    o.chunk_bytes = 2048;
    o.progress = [&](std::uint64_t, std::uint64_t) {
        if (fs::file_size(victim) > 8) fs::resize_file(victim, fs::file_size(victim) / 2);
    };
    try {
        load_checkpoint_group(c, o);
        FAIL() << "expected group_load_error";
    } catch (const group_timeout_error& e) {
        FAIL() << "a read failure is not a timeout: " << e.what();
    } catch (const group_load_error& e) {
        EXPECT_EQ(e.rank(), 0);
        EXPECT_EQ(e.file(), victim) << e.what();
        EXPECT_EQ(e.step().rfind("chunk ", 0), 0u) << e.step();
        EXPECT_NE(e.step().rfind("chunk 0 ", 0), 0u) << e.step();
    }
}

}  // namespace
}  // namespace ferry
