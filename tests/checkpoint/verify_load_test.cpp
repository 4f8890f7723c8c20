// Verified checkpoint loads: a flipped byte in any shard is refused on every route (whole, sliced
// on either dimension, converted, into caller buffers, on the GPU), naming the shard, tensor and
// range; into= says what it wrote; a shard of another checkpoint swapped in is refused; shards
// without checksums load under auto and are refused under always.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "ferry/checkpoint.hpp"
#include "ferry/error.hpp"
#include "ferry/integrity.hpp"
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

std::vector<named_array> tensors(float base = 0) {
    return {{"embed", iota({64, 32}, base)},          {"layer.0.q", iota({32, 32}, base + 10000)},
            {"layer.0.o", iota({32, 48}, base + 20000)}, {"layer.0.norm", iota({32}, base + 30000)},
            {"layer.1.q", iota({32, 32}, base + 40000)}, {"head", iota({4, 8, 16}, base + 70000)}};
}

void flip(const std::string& path, std::uint64_t at) {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(static_cast<std::streamoff>(at));
    char c = 0;
    f.read(&c, 1);
    c = static_cast<char>(c ^ 0x10);
    f.seekp(static_cast<std::streamoff>(at));
    f.write(&c, 1);
}

// Flips the last byte of `name` in its shard; returns the shard's path and the byte's offset.
std::pair<std::string, std::uint64_t> corrupt(const std::string& folder, const std::string& name) {
    checkpoint c = open_checkpoint(folder);
    const checkpoint_tensor* t = c.find(name);
    const std::uint64_t at = t->offset + t->bytes - 1;
    flip(c.shards[t->shard].path, at);
    return {c.shards[t->shard].path, at};
}

checkpoint_load load(const std::string& folder, checkpoint_load_options o = {}) {
    return load_checkpoint(open_checkpoint(folder), o);
}

void expect_refused(const std::string& folder, const checkpoint_load_options& o, const std::string& shard,
                    const std::string& tensor, std::uint64_t at) {
    try {
        load(folder, o);
        ADD_FAILURE() << "a flipped byte of '" << tensor << "' loaded";
    } catch (const integrity_error& e) {
        EXPECT_EQ(e.file(), shard) << e.what();
        EXPECT_EQ(e.tensor(), tensor) << e.what();
        EXPECT_LE(e.begin(), at);
        EXPECT_GT(e.end(), at);
    }
}

TEST(verify_load, intact_checkpoint_loads_under_always_on_every_route) {
    test::temp_dir dir;
    save_checkpoint(dir.path(), tensors(), 10000);
    checkpoint_load_options o;
    o.verify = verify_mode::always;
    EXPECT_EQ(load(dir.path(), o).tensors.size(), 6u);
    o.slices["embed"] = tensor_slice::split(1, 2, 1);
    o.slices["layer.0.o"] = tensor_slice::split(0, 2, 0);
    o.as = dtype::bfloat16;
    EXPECT_EQ(load(dir.path(), o).tensors.size(), 6u);
}

TEST(verify_load, flipped_byte_is_refused_whole_sliced_and_converted) {
    test::temp_dir dir;
    save_checkpoint(dir.path(), tensors(), 10000);
    auto [shard, at] = corrupt(dir.path(), "layer.0.o");
    expect_refused(dir.path(), {}, shard, "layer.0.o", at);
    checkpoint_load_options sliced;
    sliced.slices["layer.0.o"] = tensor_slice::split(1, 2, 0);  // the flipped byte is outside the slice, its chunk is not
    expect_refused(dir.path(), sliced, shard, "layer.0.o", at);
    checkpoint_load_options rows;
    rows.slices["layer.0.o"] = tensor_slice::split(0, 4, 3);
    expect_refused(dir.path(), rows, shard, "layer.0.o", at);
    checkpoint_load_options converted;
    converted.as = dtype::float16;
    expect_refused(dir.path(), converted, shard, "layer.0.o", at);
    checkpoint_load_options others;
    others.select = {tensor_selection::kind::names, {"embed", "head"}};
    EXPECT_EQ(load(dir.path(), others).tensors.size(), 2u);  // the intact tensors still load
    checkpoint_load_options never;
    never.verify = verify_mode::never;
    EXPECT_EQ(load(dir.path(), never).tensors.size(), 6u);
}

TEST(verify_load, into_names_what_it_wrote) {
    test::temp_dir dir;
    save_checkpoint(dir.path(), tensors(), 10000);
    auto [shard, at] = corrupt(dir.path(), "head");
    array dst(dtype::float32, {4, 8, 16});
    checkpoint_load_options o;
    o.into["head"] = dst;
    try {
        load(dir.path(), o);
        ADD_FAILURE() << "loaded";
    } catch (const integrity_error& e) {
        EXPECT_EQ(e.tensor(), "head");
        EXPECT_NE(std::string(e.what()).find("already written 1 into= destinations: 'head'"), std::string::npos)
            << e.what();
    }
}

TEST(verify_load, a_shard_swapped_for_one_of_the_same_size_is_refused) {
    test::temp_dir a, b;
    save_checkpoint(a.path(), tensors(0), 10000);
    save_checkpoint(b.path(), tensors(5), 10000);  // same names, shapes and sizes, other values
    checkpoint cb = open_checkpoint(b.path());
    checkpoint ca = open_checkpoint(a.path());
    ASSERT_EQ(ca.shards.size(), cb.shards.size());
    ASSERT_GT(ca.shards.size(), 1u);
    fs::copy_file(cb.shards[1].path, ca.shards[1].path, fs::copy_options::overwrite_existing);
    // Another save's shard: its generation is not the index's, so opening refuses it; a
    // checkpoint of other tools (no generation) is caught by the checksums.
    EXPECT_THROW(load(a.path()), checkpoint_changed_error);
}

TEST(verify_load, without_checksums_auto_loads_and_always_refuses) {
    test::temp_dir dir;
    save_checkpoint(dir.path(), tensors(), 10000, {}, false);
    EXPECT_EQ(load(dir.path()).tensors.size(), 6u);
    checkpoint_load_options o;
    o.verify = verify_mode::always;
    try {
        load(dir.path(), o);
        ADD_FAILURE() << "always loaded shards without checksums";
    } catch (const integrity_error& e) {
        EXPECT_NE(std::string(e.what()).find("no checksums recorded"), std::string::npos) << e.what();
    }
}

TEST(verify_load, gpu_loads_check_on_the_device) {
    FERRY_REQUIRE_GPU();
    test::temp_dir dir;
    save_checkpoint(dir.path(), tensors(), 10000);
    checkpoint_load_options o;
    o.where = placement::cuda(0);
    o.verify = verify_mode::always;
    EXPECT_EQ(load(dir.path(), o).tensors.size(), 6u);
    auto [shard, at] = corrupt(dir.path(), "embed");
    expect_refused(dir.path(), o, shard, "embed", at);
    o.slices["embed"] = tensor_slice::split(1, 2, 0);
    expect_refused(dir.path(), o, shard, "embed", at);
}

}  // namespace
}  // namespace ferry
