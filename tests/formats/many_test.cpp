// ferry::load_many: a list of .npy, safetensors and raw files in one call, in order, with each
// failure named by its place in the list.
#include "ferry/many.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>

#include "ferry/error.hpp"
#include "ferry/npy.hpp"
#include "ferry/safetensors.hpp"
#include "ferry/stop.hpp"
#include "test_util.hpp"

namespace ferry {
namespace {

array filled(dtype t, std::vector<std::int64_t> shape, int seed) {
    array a(t, std::move(shape));
    auto* p = static_cast<std::uint8_t*>(a.data());
    for (std::size_t i = 0; i < a.nbytes(); ++i) p[i] = static_cast<std::uint8_t>(i * 7 + seed);
    return a;
}

bool same_bytes(const array& a, const array& b) {
    return a.nbytes() == b.nbytes() && std::memcmp(a.data(), b.data(), a.nbytes()) == 0;
}

TEST(load_many, files_of_every_format_in_the_order_given) {
    test::temp_dir dir;
    std::vector<std::string> paths;
    std::vector<array> want;
    for (int i = 0; i < 40; ++i) {
        array a = filled(i % 2 ? dtype::float32 : dtype::int16, {i % 5, 3}, i);
        paths.push_back(dir / ("f" + std::to_string(i) + ".npy"));
        save_npy(paths.back(), a);
        want.push_back(std::move(a));
    }
    save_safetensors(dir / "s.safetensors", {{"b", filled(dtype::uint8, {4}, 1)}, {"a", filled(dtype::int64, {2}, 2)}});
    paths.push_back(dir / "s.safetensors");
    test::write_pattern_file(dir / "r.raw", 64);
    paths.push_back(dir / "r.raw");
    paths.push_back(paths.front());  // the same file twice: two arrays

    load_many_options o;
    o.each.raw_type = parse_dtype("int32");  // the raw file's; the headers give the others theirs
    o.each.shape = {4, 4};
    many_files got = load_many(paths, o);
    ASSERT_EQ(got.files.size(), paths.size());
    EXPECT_TRUE(got.failures.empty());
    for (int i = 0; i < 40; ++i) {
        ASSERT_TRUE(got.files[i]);
        EXPECT_EQ(got.files[i]->format, file_format::npy);
        EXPECT_TRUE(same_bytes(got.files[i]->arrays.at(0).value, want[i])) << paths[i];
    }
    const auto& st = *got.files[40];
    ASSERT_EQ(st.arrays.size(), 2u);
    EXPECT_EQ(st.arrays[0].name, "a");
    EXPECT_EQ(got.files[41]->arrays.at(0).value.shape(), (std::vector<std::int64_t>{4, 4}));
    auto raw = test::pattern(64);
    EXPECT_EQ(std::memcmp(got.files[41]->arrays[0].value.data(), raw.data(), 64), 0);
    EXPECT_TRUE(same_bytes(got.files[42]->arrays[0].value, want[0]));
    EXPECT_NE(got.files[42]->arrays[0].value.data(), got.files[0]->arrays[0].value.data());
    std::uint64_t bytes = 0;
    for (const auto& f : got.files) bytes += f->payload_bytes;
    EXPECT_EQ(got.payload_bytes, bytes);
    EXPECT_TRUE(load_many({}).files.empty());
}

TEST(load_many, the_first_failure_by_index_is_raised_with_its_place) {
    test::temp_dir dir;
    std::vector<std::string> paths;
    for (int i = 0; i < 30; ++i) {
        paths.push_back(dir / ("f" + std::to_string(i) + ".npy"));
        save_npy(paths.back(), filled(dtype::float64, {8}, i));
    }
    std::ofstream(dir / "f7.npy", std::ios::binary | std::ios::trunc) << "\x93NUMPY\x01";  // cut short
    paths[20] = dir / "missing.npy";
    try {
        load_many(paths);
        FAIL() << "a broken file in the list loaded";
    } catch (const file_in_list_error& e) {
        EXPECT_EQ(e.index(), 7u);
        EXPECT_EQ(e.path(), paths[7]);
        EXPECT_NE(std::string(e.what()).find("paths[7]"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("f7.npy"), std::string::npos) << e.what();
        EXPECT_THROW(std::rethrow_exception(e.cause()), error);
    }
}

TEST(load_many, skipping_returns_the_others_and_lists_every_failure) {
    test::temp_dir dir;
    std::vector<std::string> paths;
    for (int i = 0; i < 10; ++i) {
        paths.push_back(dir / ("f" + std::to_string(i) + ".npy"));
        save_npy(paths.back(), filled(dtype::uint8, {3}, i));
    }
    paths[2] = dir / "missing.npy";
    test::write_pattern_file(dir / "f5.npy", 20);  // not a .npy file under its name
    load_many_options o;
    o.failures = on_file_failure::skip;
    o.files_in_flight = 3;
    many_files got = load_many(paths, o);
    ASSERT_EQ(got.failures.size(), 2u);
    EXPECT_EQ(got.failures[0].index, 2u);
    EXPECT_EQ(got.failures[1].index, 5u);
    EXPECT_THROW(std::rethrow_exception(got.failures[0].error), system_error);
    EXPECT_NE(got.failures[0].message.find("missing.npy"), std::string::npos);
    for (std::size_t i = 0; i < paths.size(); ++i) EXPECT_EQ(bool(got.files[i]), i != 2 && i != 5) << i;
}

TEST(load_many, a_stop_request_ends_the_call_as_an_interrupt) {
    test::temp_dir dir;
    std::vector<std::string> paths;
    for (int i = 0; i < 20; ++i) {
        paths.push_back(dir / ("f" + std::to_string(i) + ".npy"));
        save_npy(paths.back(), filled(dtype::uint8, {3}, i));
    }
    stop_source stop;
    stop.request_stop();
    stop_scope scope(stop);
    EXPECT_THROW(load_many(paths), interrupted_error);
}

}  // namespace
}  // namespace ferry
