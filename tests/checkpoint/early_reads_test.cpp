// A whole load's reads started from the folder's listing, before the index is parsed
// (checkpoints::likely_shards, load.cpp early_reads::guess): which folders give a guess, and
// loads whose guess the index then contradicts, or whose shards are broken.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "checkpoint/open.hpp"
#include "ferry/checkpoint.hpp"
#include "test_util.hpp"

namespace ferry {
namespace {

namespace fs = std::filesystem;

array filled(std::int64_t n, float base) {
    array a(dtype::float32, {n});
    auto* p = static_cast<float*>(a.data());
    for (std::int64_t i = 0; i < n; ++i) p[i] = base + static_cast<float>(i);
    return a;
}

bool same(const array& a, const array& b) {
    return a.nbytes() == b.nbytes() && std::memcmp(a.data(), b.data(), a.nbytes()) == 0;
}

const array& find(const checkpoint_load& l, const std::string& n) {
    for (const auto& t : l.tensors)
        if (t.name == n) return t.value;
    throw std::runtime_error("missing " + n);
}

void touch(const fs::path& p) { std::ofstream(p) << "x"; }

// Six tensors of 16 KiB in three shards, saved the Hugging Face way.
struct saved {
    test::temp_dir dir;
    std::vector<named_array> all;
    saved() {
        for (int k = 0; k < 6; ++k) all.push_back({"t" + std::to_string(k), filled(4096, 1000.0f * k)});
        save_checkpoint(dir.path(), all, 40000);
    }
    fs::path path(const char* name) const { return fs::path(dir.path()) / name; }
};

TEST(likely_shards, a_folder_of_numbered_shards_beside_its_index) {
    saved s;
    const std::vector<std::string> want = {s.path("model-00001-of-00003.safetensors").string(),
                                           s.path("model-00002-of-00003.safetensors").string(),
                                           s.path("model-00003-of-00003.safetensors").string()};
    EXPECT_EQ(checkpoints::likely_shards(s.dir.path()), want);
    EXPECT_EQ(checkpoints::likely_shards(s.path("model.safetensors.index.json").string()), want);
    // Other files beside them are no shards of the count.
    touch(s.path("model.safetensors"));
    touch(s.path("optimizer-00001-of-00001.safetensors"));
    EXPECT_EQ(checkpoints::likely_shards(s.dir.path()), want);
}

TEST(likely_shards, none_where_the_listing_is_no_single_complete_set) {
    saved s;
    // A shard of another count, or a number out of its count: no guess.
    touch(s.path("model-00001-of-00002.safetensors"));
    EXPECT_TRUE(checkpoints::likely_shards(s.dir.path()).empty());
    fs::remove(s.path("model-00001-of-00002.safetensors"));
    touch(s.path("model-00004-of-00003.safetensors"));
    EXPECT_TRUE(checkpoints::likely_shards(s.dir.path()).empty());
    fs::remove(s.path("model-00004-of-00003.safetensors"));
    // A shard of the count missing.
    fs::rename(s.path("model-00002-of-00003.safetensors"), s.path("elsewhere.safetensors"));
    EXPECT_TRUE(checkpoints::likely_shards(s.dir.path()).empty());
    fs::rename(s.path("elsewhere.safetensors"), s.path("model-00002-of-00003.safetensors"));
    EXPECT_EQ(checkpoints::likely_shards(s.dir.path()).size(), 3u);
    // Shards of two saves (one tagged, as a save beside an earlier one names its own).
    touch(s.path("model-0123456789ab-00001-of-00003.safetensors"));
    EXPECT_TRUE(checkpoints::likely_shards(s.dir.path()).empty());
    // No index, a single file, a URL: no guess.
    test::temp_dir bare;
    EXPECT_TRUE(checkpoints::likely_shards(bare.path()).empty());
    EXPECT_TRUE(checkpoints::likely_shards(s.path("model-00001-of-00003.safetensors").string()).empty());
    EXPECT_TRUE(checkpoints::likely_shards("http://127.0.0.1:9/ckpt/").empty());
}

TEST(likely_shards, a_save_beside_an_earlier_one_is_guessed_by_its_tagged_names) {
    saved s;
    save_checkpoint(s.dir.path(), s.all, 40000);  // the second generation tags its shard names
    const auto paths = checkpoints::likely_shards(s.dir.path());
    ASSERT_EQ(paths.size(), 3u);
    const checkpoint c = open_checkpoint(s.dir.path());
    ASSERT_EQ(c.shards.size(), 3u);
    for (std::size_t i = 0; i < 3; ++i) EXPECT_EQ(paths[i], c.shards[i].path);
    checkpoint_load l = open_and_load_checkpoint({s.dir.path()});
    EXPECT_EQ(l.stats.reads_began, "listing");
    for (const auto& t : s.all) EXPECT_TRUE(same(find(l, t.name), t.value)) << t.name;
}

// The listing names a shard the index does not: the guessed reads are dropped and the load
// reads what the index names, from the headers.
TEST(early_reads, a_guess_the_index_contradicts_is_dropped) {
    saved s;
    const fs::path index = s.path("model.safetensors.index.json");
    nlohmann::json j;
    std::ifstream(index) >> j;
    std::vector<std::string> kept;
    for (auto it = j["weight_map"].begin(); it != j["weight_map"].end();)
        if (it.value() == "model-00003-of-00003.safetensors") it = j["weight_map"].erase(it);
        else kept.push_back(it.key()), ++it;
    std::ofstream(index) << j.dump();
    ASSERT_FALSE(kept.empty());
    ASSERT_EQ(checkpoints::likely_shards(s.dir.path()).size(), 3u);  // the guess still names three
    checkpoint_load l = open_and_load_checkpoint({s.dir.path()});
    EXPECT_EQ(l.stats.reads_began, "headers");
    ASSERT_EQ(l.tensors.size(), kept.size());
    for (const auto& t : s.all)
        if (std::find(kept.begin(), kept.end(), t.name) != kept.end())
            EXPECT_TRUE(same(find(l, t.name), t.value)) << t.name;
    EXPECT_EQ(l.stats.files, 2u);
}

// Bytes after a shard's last tensor, read with the guess: the open refuses the shard, naming
// it, after the guessed reads ended; the shard mended, the load reads from the listing again.
TEST(early_reads, bytes_after_the_tensors_are_the_opens_error) {
    saved s;
    const fs::path shard = s.path("model-00002-of-00003.safetensors");
    const auto size = fs::file_size(shard);
    std::ofstream(shard, std::ios::app) << std::string(1000, 'z');
    try {
        open_and_load_checkpoint({s.dir.path()});
        ADD_FAILURE() << "no error";
    } catch (const error& e) {
        EXPECT_NE(std::string(e.what()).find("model-00002-of-00003.safetensors"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("trailing bytes"), std::string::npos) << e.what();
    }
    fs::resize_file(shard, size);
    checkpoint_load l = open_and_load_checkpoint({s.dir.path()});
    EXPECT_EQ(l.stats.reads_began, "listing");
    ASSERT_EQ(l.tensors.size(), s.all.size());
    for (const auto& t : s.all) EXPECT_TRUE(same(find(l, t.name), t.value)) << t.name;
}

// A load that is not whole, or of an open checkpoint, starts its reads where it always did.
TEST(early_reads, only_a_whole_load_of_a_folder_reads_from_its_listing) {
    saved s;
    checkpoint_load_options some;
    some.select = {tensor_selection::kind::names, {"t1", "t4"}};
    EXPECT_EQ(open_and_load_checkpoint({s.dir.path()}, some).stats.reads_began, "plan");
    const checkpoint c = open_checkpoint(s.dir.path());
    EXPECT_EQ(load_checkpoint(c).stats.reads_began, "open");
    std::vector<std::string> files;
    for (const auto& sh : c.shards) files.push_back(sh.path);
    EXPECT_EQ(open_and_load_checkpoint(files).stats.reads_began, "headers");
}

// A shard whose header is broken: the open's error, naming the file, whatever the guess read.
TEST(early_reads, a_broken_header_is_the_opens_error) {
    saved s;
    const fs::path shard = s.path("model-00002-of-00003.safetensors");
    {
        std::fstream f(shard, std::ios::in | std::ios::out | std::ios::binary);
        f.seekp(8);
        f << "!!";  // the JSON's first bytes
    }
    try {
        open_and_load_checkpoint({s.dir.path()});
        ADD_FAILURE() << "no error";
    } catch (const error& e) {
        EXPECT_NE(std::string(e.what()).find("model-00002-of-00003.safetensors"), std::string::npos) << e.what();
    }
}

}  // namespace
}  // namespace ferry
