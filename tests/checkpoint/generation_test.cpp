// One generation per load: a save's generation id in the index and every shard, the identity
// (device, inode, size, modification time) of each shard checked when the load opens it and
// after its bytes were read, and a save that fails leaving the previous generation loadable.
#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>

#include <nlohmann/json.hpp>

#include "ferry/checkpoint.hpp"
#include "ferry/error.hpp"
#include "ferry/safetensors.hpp"
#include "os/fault_hook.hpp"
#include "test_util.hpp"

namespace {

using namespace ferry;
namespace fs = std::filesystem;

array filled(std::int64_t n, float v) {
    array a(dtype::float32, {n}, placement::host());
    auto* p = static_cast<float*>(a.data());
    for (std::int64_t i = 0; i < n; ++i) p[i] = v;
    return a;
}

// Six tensors of 1,000 floats in shards of at most 8,000 bytes: three shards.
std::vector<named_array> generation_of(float v) {
    std::vector<named_array> out;
    for (int i = 0; i < 6; ++i) out.push_back({"t" + std::to_string(i), filled(1000, v)});
    return out;
}

std::set<std::string> listing(const std::string& dir) {
    std::set<std::string> out;
    for (const auto& e : fs::directory_iterator(dir)) out.insert(e.path().filename().string());
    return out;
}

nlohmann::json read_index(const std::string& dir) {
    std::ifstream in(dir + "/model.safetensors.index.json");
    return nlohmann::json::parse(in);
}

float first_value(const checkpoint_load& l, std::size_t i) {
    return static_cast<const float*>(l.tensors.at(i).value.data())[0];
}

TEST(CheckpointGeneration, EveryShardAndTheIndexCarryTheSavesGeneration) {
    test::temp_dir dir;
    save_checkpoint(dir.path(), generation_of(1), 8000);
    checkpoint c = open_checkpoint(dir.path());
    const std::string gen = c.metadata.at("ferry.generation");
    EXPECT_EQ(gen.size(), 32u);
    ASSERT_EQ(c.shards.size(), 3u);
    for (const auto& sh : c.shards) EXPECT_EQ(sh.header.metadata.at("ferry.generation"), gen) << sh.path;
    // A second save takes other names where the first one's are taken, then removes the first's.
    save_checkpoint(dir.path(), generation_of(2), 8000);
    checkpoint d = open_checkpoint(dir.path());
    EXPECT_NE(d.metadata.at("ferry.generation"), gen);
    for (const auto& sh : d.shards) EXPECT_EQ(sh.header.metadata.at("ferry.generation"), d.metadata.at("ferry.generation"));
    EXPECT_EQ(listing(dir.path()).size(), 4u);  // three shards and the index, nothing of the first save
    checkpoint_load l = load_checkpoint(d);
    for (std::size_t i = 0; i < l.tensors.size(); ++i) EXPECT_EQ(first_value(l, i), 2.0f);
}

TEST(CheckpointGeneration, AShardOfAnotherGenerationIsAChangeNotAMix) {
    test::temp_dir a, b;
    save_checkpoint(a.path(), generation_of(1), 8000);
    save_checkpoint(b.path(), generation_of(2), 8000);
    const std::string shard = read_index(a.path())["weight_map"]["t0"];
    const std::string other = read_index(b.path())["weight_map"]["t0"];
    fs::copy_file(b / other, a / shard, fs::copy_options::overwrite_existing);
    try {
        open_checkpoint(a.path());
        FAIL() << "opened a shard of another generation";
    } catch (const checkpoint_changed_error& e) {
        EXPECT_EQ(e.file(), a / shard);
        EXPECT_NE(e.reason().find("generation"), std::string::npos) << e.what();
    }
}

TEST(CheckpointGeneration, AShardReplacedAfterOpeningIsAChange) {
    test::temp_dir dir;
    save_checkpoint(dir.path(), generation_of(1), 8000);
    checkpoint c = open_checkpoint(dir.path());
    // The same bytes under the same name, another file (another inode): as a writer that
    // renames over the shard would leave it.
    const std::string p = c.shards[1].path;
    fs::copy_file(p, p + ".tmp");
    fs::rename(p + ".tmp", p);
    try {
        load_checkpoint(c);
        FAIL() << "loaded a shard replaced since its header was read";
    } catch (const checkpoint_changed_error& e) {
        EXPECT_EQ(e.file(), p);
        EXPECT_NE(e.reason().find("inode"), std::string::npos) << e.what();
    }
    // Opened again, it loads.
    EXPECT_EQ(load_checkpoint(open_checkpoint(dir.path())).tensors.size(), 6u);
}

TEST(CheckpointGeneration, AShardRewrittenInPlaceOrRemovedIsAChange) {
    test::temp_dir dir;
    save_checkpoint(dir.path(), generation_of(1), 8000);
    checkpoint c = open_checkpoint(dir.path());
    fs::resize_file(c.shards[2].path, c.shards[2].file_size - 8);
    EXPECT_THROW(load_checkpoint(c), checkpoint_changed_error);
    fs::remove(c.shards[2].path);
    try {
        load_checkpoint(c);
        FAIL() << "loaded a checkpoint whose shard is gone";
    } catch (const checkpoint_changed_error& e) {
        EXPECT_NE(e.reason().find("removed"), std::string::npos) << e.what();
    }
}

TEST(CheckpointGeneration, WithoutGenerationsTheIdentityIsChecked) {
    // Shards and an index as another tool writes them: no generation anywhere.
    test::temp_dir dir;
    nlohmann::json index;
    for (int k = 0; k < 2; ++k) {
        std::vector<named_array> part;
        for (int i = 0; i < 3; ++i) {
            part.push_back({"t" + std::to_string(3 * k + i), filled(1000, 1)});
            index["weight_map"]["t" + std::to_string(3 * k + i)] = "s" + std::to_string(k) + ".safetensors";
        }
        save_safetensors(dir / ("s" + std::to_string(k) + ".safetensors"), part, {{"format", "pt"}});
    }
    index["metadata"] = nlohmann::json::object();
    std::ofstream(dir / "model.safetensors.index.json") << index.dump();
    checkpoint c = open_checkpoint(dir.path());
    EXPECT_EQ(c.metadata.count("ferry.generation"), 0u);
    EXPECT_EQ(load_checkpoint(c).tensors.size(), 6u);
    // Rewritten under the same name by that tool: the load opened before sees the change.
    save_safetensors(dir / "s1.safetensors", generation_of(2), {{"format", "pt"}});
    EXPECT_THROW(load_checkpoint(c), checkpoint_changed_error);
}

TEST(CheckpointGeneration, AFailedSaveLeavesThePreviousGenerationAndNothingElse) {
    test::temp_dir dir;
    save_checkpoint(dir.path(), generation_of(1), 8000);
    const std::set<std::string> before = listing(dir.path());
    const nlohmann::json index_before = read_index(dir.path());
    // A full disk at each write of the second save in turn: the first shard, a later one, the index.
    for (int fail_at : {1, 2, 3, 4}) {
        static std::atomic<int> writes{0};
        static std::atomic<int> limit{0};
        writes = 0;
        limit = fail_at;
        ferry::sys::hook = [](const char* call, std::size_t*) {
            if ((std::strcmp(call, "pwrite") != 0 && std::strcmp(call, "write") != 0) || ++writes < limit) return 0;
            errno = ENOSPC;
            return -1;
        };
        EXPECT_THROW(save_checkpoint(dir.path(), generation_of(2), 8000), error) << "write " << fail_at;
        ferry::sys::hook = nullptr;
        EXPECT_EQ(listing(dir.path()), before) << "write " << fail_at;
        EXPECT_EQ(read_index(dir.path()), index_before);
        checkpoint_load l = load_checkpoint(open_checkpoint(dir.path()));
        for (std::size_t i = 0; i < l.tensors.size(); ++i) EXPECT_EQ(first_value(l, i), 1.0f);
    }
}

TEST(CheckpointGeneration, ChangedErrorNamesTheFileAndIsAFerryError) {
    checkpoint_changed_error e("/x/model-00001-of-00002.safetensors", "size 10 became 8");
    const error& base = e;
    EXPECT_NE(std::string(base.what()).find("/x/model-00001-of-00002.safetensors"), std::string::npos);
    EXPECT_NE(std::string(base.what()).find("size 10 became 8"), std::string::npos);
}

}  // namespace
