// ferry verify, run as a user would: exit 0 when every chunk matches, 1 with the mismatches
// listed (file, tensor, range, both checksums), 2 when nothing is verifiable; --record writes a
// sidecar for a file of another tool and later runs check it; --json.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "ferry/checkpoint.hpp"
#include "ferry/npy.hpp"
#include "ferry/safetensors.hpp"
#include "cli_run.hpp"
#include "test_util.hpp"

namespace ferry {
namespace {

using result = test::cli_result;

result run(const std::string& args) { return test::run_cli(args); }

array filled(std::int64_t n, std::uint32_t seed) {
    array a(dtype::float32, {n});
    auto bytes = test::pattern(a.nbytes(), 0, seed);
    std::memcpy(a.data(), bytes.data(), a.nbytes());
    return a;
}

void flip(const std::string& path, std::uint64_t at) {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(static_cast<std::streamoff>(at));
    char c = 0;
    f.read(&c, 1);
    c = static_cast<char>(c ^ 0x04);
    f.seekp(static_cast<std::streamoff>(at));
    f.write(&c, 1);
}

TEST(cli_verify, checkpoint_all_match_then_a_flip_is_listed) {
    test::temp_dir dir;
    std::vector<named_array> t{{"a", filled(3000, 1)}, {"b", filled(3000, 2)}, {"c", filled(3000, 3)}};
    save_checkpoint(dir / "ckpt", t, 20000);
    result ok = run("verify '" + dir / "ckpt" + "'");
    EXPECT_EQ(ok.status, 0) << ok.out;
    EXPECT_NE(ok.out.find("all match"), std::string::npos) << ok.out;
    checkpoint c = open_checkpoint(dir / "ckpt");
    const checkpoint_tensor* b = c.find("b");
    flip(c.shards[b->shard].path, b->offset + 100);
    result bad = run("verify '" + dir / "ckpt" + "'");
    EXPECT_EQ(bad.status, 1) << bad.out;
    EXPECT_NE(bad.out.find("MISMATCH " + c.shards[b->shard].path + " tensor 'b'"), std::string::npos) << bad.out;
    result js = run("verify --json '" + dir / "ckpt" + "/model.safetensors.index.json'");
    EXPECT_EQ(js.status, 1);
    auto j = nlohmann::json::parse(js.out);
    ASSERT_EQ(j["mismatches"].size(), 1u) << js.out;
    EXPECT_EQ(j["mismatches"][0]["tensor"], "b");
    EXPECT_EQ(j["status"], 1);
    EXPECT_EQ(j["tensors"], 3);
}

TEST(cli_verify, npy_needs_a_sidecar_which_record_writes) {
    test::temp_dir dir;
    save_npy(dir / "x.npy", filled(100000, 4));
    result none = run("verify '" + dir / "x.npy" + "'");
    EXPECT_EQ(none.status, 2) << none.out;
    EXPECT_NE(none.out.find("unverifiable"), std::string::npos) << none.out;
    result rec = run("verify --record '" + dir / "x.npy" + "'");
    EXPECT_EQ(rec.status, 0) << rec.out;
    EXPECT_TRUE(std::filesystem::exists(dir / "x.npy.ferry-checksums.json"));
    EXPECT_EQ(run("verify '" + dir / "x.npy" + "'").status, 0);
    flip(dir / "x.npy", 5000);
    result bad = run("verify '" + dir / "x.npy" + "'");
    EXPECT_EQ(bad.status, 1) << bad.out;
    EXPECT_NE(bad.out.find("bytes [0, "), std::string::npos) << bad.out;
    std::filesystem::resize_file(dir / "x.npy", 1000);
    result cut = run("verify '" + dir / "x.npy" + "'");
    EXPECT_EQ(cut.status, 1) << cut.out;
    EXPECT_NE(cut.out.find("its sidecar recorded"), std::string::npos) << cut.out;
}

TEST(cli_verify, safetensors_without_checksums_is_unverifiable_until_recorded) {
    test::temp_dir dir;
    save_safetensors(dir / "m.safetensors", {{"w", filled(10, 5)}}, {}, false);
    EXPECT_EQ(run("verify '" + dir / "m.safetensors" + "'").status, 2);
    EXPECT_EQ(run("verify --record '" + dir / "m.safetensors" + "'").status, 0);
    EXPECT_EQ(run("verify '" + dir / "m.safetensors" + "'").status, 0);
}

TEST(cli_verify, a_corrupt_sidecar_is_a_clear_error) {
    test::temp_dir dir;
    save_npy(dir / "x.npy", filled(10, 6));
    std::ofstream(dir / "x.npy.ferry-checksums.json") << "{\"v\":1,\"alg\":\"crc32c\",\"chunk\":67108864,\"size\":1,\"crcs\":\"zz\"}";
    result r = run("verify '" + dir / "x.npy" + "'");
    EXPECT_EQ(r.status, 1) << r.out;
    EXPECT_NE(r.out.find("x.npy.ferry-checksums.json"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace ferry
