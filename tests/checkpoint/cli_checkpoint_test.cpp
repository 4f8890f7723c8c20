// ferry info DIR and ferry load DIR on a sharded checkpoint, run as a user would.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include <nlohmann/json.hpp>

#include "ferry/checkpoint.hpp"
#include "ferry/checksum.hpp"
#include "ferry/npy.hpp"
#include "cli_run.hpp"
#include "test_util.hpp"

namespace ferry {
namespace {

using result = test::cli_result;

result run(const std::string& args) { return test::run_cli(args); }

std::vector<named_array> sample_tensors() {
    std::vector<named_array> v;
    for (int l = 0; l < 3; ++l) {
        for (const char* n : {"q", "o"}) {
            array a(dtype::float16, {64, 64});
            std::memset(a.data(), l + 1, a.nbytes());
            v.push_back({"layers." + std::to_string(l) + "." + n, a});
        }
    }
    return v;
}

TEST(cli_checkpoint, info_summarizes_shards_tensors_and_dtypes) {
    test::temp_dir dir;
    save_checkpoint(dir.path(), sample_tensors(), 20000);
    result r = run("info '" + dir.path() + "'");
    ASSERT_EQ(r.status, 0) << r.out;
    EXPECT_NE(r.out.find("checkpoint, 3 shards, 6 tensors"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("float16"), std::string::npos) << r.out;
    r = run("info --json '" + dir.path() + "'");
    ASSERT_EQ(r.status, 0) << r.out;
    auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["shards"].size(), 3u);
    EXPECT_EQ(j["tensors"].size(), 6u);
    EXPECT_EQ(j["dtypes"]["float16"]["bytes"], 6 * 64 * 64 * 2);
    // A single file keeps the single-file output.
    r = run("info '" + dir.path() + "/model-00001-of-00003.safetensors'");
    EXPECT_EQ(r.status, 0);
    EXPECT_NE(r.out.find("safetensors"), std::string::npos);
}

TEST(cli_checkpoint, load_with_patterns_and_slices) {
    test::temp_dir dir;
    save_checkpoint(dir.path(), sample_tensors(), 20000);
    result r = run("load --device host --json --tensor 'layers.*' --slice '*.q:0:0/2' --slice 'layers.1.o:1:0:16' '" +
                   dir.path() + "'");
    ASSERT_EQ(r.status, 0) << r.out;
    auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["arrays"].size(), 6u);
    // q: half of each; o: two whole, one read as its enclosing span (63 rows + 16 elements).
    std::uint64_t expect = 3 * 32 * 64 * 2 + 2 * 64 * 64 * 2 + 63 * 128 + 16 * 2;
    EXPECT_EQ(j["bytes_read"], expect);
    // The open (index and headers) is timed apart from the load.
    ASSERT_TRUE(j.contains("open_seconds")) << r.out;
    EXPECT_GT(j["open_seconds"].get<double>(), 0.0);
    EXPECT_LT(j["open_seconds"].get<double>(), 60.0);
    for (const auto& a : j["arrays"]) {
        if (a["name"] == "layers.1.o") {
            EXPECT_EQ(a["shape"], nlohmann::json({64, 16}));
            EXPECT_EQ(a["route"], "span");
        }
    }
    r = run("load --device host --slice 'layers.1.o:2:0:1' '" + dir.path() + "'");
    EXPECT_EQ(r.status, 1) << r.out;
    EXPECT_NE(r.out.find("layers.1.o"), std::string::npos) << r.out;
    r = run("load --device host --slice 'nonsense' '" + dir.path() + "'");
    EXPECT_NE(r.status, 0);
}

// --checksum on a checkpoint (and on sliced loads) prints a checksum per tensor, of what was
// loaded: the slice, not the whole tensor.
TEST(cli_checkpoint, checksums_of_checkpoints_and_slices) {
    test::temp_dir dir;
    std::vector<named_array> tensors = sample_tensors();
    save_checkpoint(dir.path(), tensors, 20000);
    result r = run("load --device host --json --checksum '" + dir.path() + "'");
    ASSERT_EQ(r.status, 0) << r.out;
    auto j = nlohmann::json::parse(r.out);
    ASSERT_EQ(j["arrays"].size(), tensors.size());
    for (const auto& a : j["arrays"]) {
        auto t = std::find_if(tensors.begin(), tensors.end(), [&](const named_array& n) { return n.name == a["name"].get<std::string>(); });
        ASSERT_NE(t, tensors.end()) << a;
        EXPECT_EQ(a["checksum"].get<std::string>(), checksum(t->value)) << a;
    }
    r = run("load --device host --checksum --slice 'layers.0.q:0:0:32' '" + dir.path() + "'");
    ASSERT_EQ(r.status, 0) << r.out;
    array half(dtype::float16, {32, 64});
    std::memset(half.data(), 1, half.nbytes());
    EXPECT_NE(r.out.find(checksum(half)), std::string::npos) << r.out;
    EXPECT_NE(r.out.find(checksum(tensors[2].value)), std::string::npos) << r.out;  // layers.1.q, whole
    // Without --checksum, nothing is computed.
    r = run("load --device host --json '" + dir.path() + "'");
    ASSERT_EQ(r.status, 0) << r.out;
    EXPECT_TRUE(nlohmann::json::parse(r.out)["arrays"][0]["checksum"].is_null()) << r.out;
}

TEST(cli_checkpoint, slices_that_cannot_apply_are_refused_by_name) {
    test::temp_dir dir;
    save_checkpoint(dir.path(), sample_tensors(), 20000);
    // A pattern that matches nothing would load every tensor whole.
    result r = run("load --device host --slice 'nomatch*:0:0/2' '" + dir.path() + "'");
    EXPECT_EQ(r.status, 2) << r.out;
    EXPECT_NE(r.out.find("'nomatch*' matches no tensor"), std::string::npos) << r.out;
    // A reversed range is said to be reversed, not outside the tensor.
    r = run("load --device host --slice 'layers.0.q:0:5:2' '" + dir.path() + "'");
    EXPECT_EQ(r.status, 1) << r.out;
    EXPECT_NE(r.out.find("layers.0.q"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("[5, 2) of dimension 0 is reversed"), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("outside"), std::string::npos) << r.out;
    // Slices need safetensors: a .npy file is named, never parsed as a safetensors header.
    save_npy(dir / "a.npy", array(dtype::float32, {8, 4}));
    r = run("load --device host --slice 'x:0:0:2' '" + (dir / "a.npy") + "'");
    EXPECT_EQ(r.status, 2) << r.out;
    EXPECT_NE(r.out.find("slices need a safetensors file or a checkpoint; " + (dir / "a.npy") + " is in npy format"),
              std::string::npos)
        << r.out;
    EXPECT_EQ(r.out.find("header of"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace ferry
