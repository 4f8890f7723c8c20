#include "ferry/formats.hpp"

#include <gtest/gtest.h>

#include "ferry/checksum.hpp"
#include "ferry/error.hpp"
#include "ferry/npy.hpp"
#include "ferry/safetensors.hpp"
#include "test_util.hpp"

namespace ferry {
namespace {

TEST(formats, detect) {
    test::temp_dir dir;
    save_npy(dir / "a.bin", array(dtype::int8, {2}));
    EXPECT_EQ(detect_format(dir / "a.bin"), file_format::npy);
    save_safetensors(dir / "b.dat", {{"x", array(dtype::int8, {2})}});
    EXPECT_EQ(detect_format(dir / "b.dat"), file_format::safetensors);
    test::write_pattern_file(dir / "c.npy", 3);
    EXPECT_EQ(detect_format(dir / "c.npy"), file_format::npy);  // by extension; fails on load
    test::write_pattern_file(dir / "d", 100);
    EXPECT_EQ(detect_format(dir / "d"), file_format::raw);
    EXPECT_EQ(format_from_extension("x.SafeTensors"), file_format::safetensors);
    EXPECT_EQ(parse_file_format("raw"), file_format::raw);
    EXPECT_THROW(parse_file_format("npz"), usage_error);
    EXPECT_THROW(detect_format(dir / "missing"), system_error);
}

TEST(formats, load_any_and_options) {
    test::temp_dir dir;
    save_safetensors(dir / "m.safetensors",
                     {{"b", array(dtype::int8, {2})}, {"a", array(dtype::float32, {3})}}, {{"k", "v"}});
    any_load_options o;
    loaded_file f = load_any(dir / "m.safetensors", o);
    EXPECT_EQ(f.format, file_format::safetensors);
    ASSERT_EQ(f.arrays.size(), 2u);
    EXPECT_EQ(f.arrays[0].name, "a");
    EXPECT_EQ(f.payload_bytes, 14u);
    EXPECT_EQ(f.metadata.at("k"), "v");
    o.tensors = {"b"};
    EXPECT_EQ(load_any(dir / "m.safetensors", o).arrays.size(), 1u);
    o.raw_type = parse_dtype("float32");  // describes raw files: refused here, not ignored
    EXPECT_THROW(load_any(dir / "m.safetensors", o), usage_error);
    o.raw_type.reset();
    o.offset = 8;
    EXPECT_THROW(load_any(dir / "m.safetensors", o), usage_error);

    test::write_pattern_file(dir / "r.bin", 64);
    any_load_options r;
    EXPECT_THROW(load_any(dir / "r.bin", r), usage_error);  // a raw file needs a dtype
    r.raw_type = parse_dtype("<i4");
    r.shape = {4, 4};
    loaded_file rf = load_any(dir / "r.bin", r);
    EXPECT_EQ(rf.format, file_format::raw);
    EXPECT_EQ(rf.arrays[0].value.shape(), (std::vector<std::int64_t>{4, 4}));
    r.format = file_format::npy;
    EXPECT_THROW(load_any(dir / "r.bin", r), usage_error);
    any_load_options forced;
    forced.format = file_format::npy;
    EXPECT_THROW(load_any(dir / "r.bin", forced), format_error);
}

TEST(formats, describe) {
    test::temp_dir dir;
    save_npy(dir / "a.npy", array(dtype::float64, {2, 3}, placement::host(), storage_order::c, byte_order::big));
    file_description d = describe_file(dir / "a.npy");
    EXPECT_EQ(d.format, file_format::npy);
    EXPECT_EQ(d.version, "1.0");
    EXPECT_EQ(d.header_size, 128u);
    ASSERT_EQ(d.arrays.size(), 1u);
    EXPECT_EQ(d.arrays[0].type, (typed_order{dtype::float64, byte_order::big}));
    EXPECT_EQ(d.arrays[0].begin, 128u);
    EXPECT_EQ(d.arrays[0].end, 176u);
    EXPECT_EQ(d.file_size, 176u);
    save_safetensors(dir / "m.safetensors", {{"w", array(dtype::bfloat16, {4})}});
    file_description s = describe_file(dir / "m.safetensors");
    EXPECT_EQ(s.arrays[0].end - s.arrays[0].begin, 8u);
    EXPECT_EQ(s.arrays[0].end, s.file_size);
}

TEST(formats, save_any) {
    test::temp_dir dir;
    std::vector<named_array> two = {{"a", array(dtype::int8, {1})}, {"b", array(dtype::int8, {1})}};
    EXPECT_THROW(save_any(dir / "x.npy", file_format::npy, two), usage_error);
    save_any(dir / "x.safetensors", file_format::safetensors, two, {{"m", "n"}});
    save_any(dir / "x.raw", file_format::raw, {two[0]});
    EXPECT_EQ(test::read_whole(dir / "x.raw").size(), 1u);
}

}  // namespace
}  // namespace ferry
