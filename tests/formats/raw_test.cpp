#include "ferry/raw.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>

#include "ferry/checksum.hpp"
#include "ferry/convert.hpp"
#include "ferry/error.hpp"
#include "test_util.hpp"

namespace ferry {
namespace {

TEST(raw, whole_file) {
    test::temp_dir dir;
    test::write_pattern_file(dir / "r.bin", 400);
    array a = fromfile(dir / "r.bin", parse_dtype("float32"));
    EXPECT_EQ(a.shape(), (std::vector<std::int64_t>{100}));
    EXPECT_EQ(std::memcmp(a.data(), test::pattern(400).data(), 400), 0);
}

TEST(raw, count_offset_shape) {
    test::temp_dir dir;
    test::write_pattern_file(dir / "r.bin", 400);
    array a = fromfile(dir / "r.bin", parse_dtype("int16"), 10, 6);
    EXPECT_EQ(a.size(), 10u);
    EXPECT_EQ(std::memcmp(a.data(), test::pattern(20, 6).data(), 20), 0);
    array b = fromfile(dir / "r.bin", parse_dtype("uint8"), -1, 0, {20, 20});
    EXPECT_EQ(b.shape(), (std::vector<std::int64_t>{20, 20}));
    array c = fromfile(dir / "r.bin", parse_dtype("uint8"), -1, 100, {3, 4});  // shape gives count
    EXPECT_EQ(c.size(), 12u);
    array e = fromfile(dir / "r.bin", parse_dtype("float64"), 0, 400);
    EXPECT_EQ(e.size(), 0u);
    EXPECT_THROW(fromfile(dir / "r.bin", parse_dtype("uint8"), 10, 0, {3, 4}), usage_error);
    EXPECT_THROW(fromfile(dir / "r.bin", parse_dtype("uint8"), -2), usage_error);
}

TEST(raw, never_truncates_silently) {
    test::temp_dir dir;
    test::write_pattern_file(dir / "r.bin", 402);
    try {
        fromfile(dir / "r.bin", parse_dtype("float32"));
        FAIL();
    } catch (const format_error& e) {
        EXPECT_EQ(e.field(), "size");
        EXPECT_EQ(e.file(), dir / "r.bin");
    }
    EXPECT_EQ(fromfile(dir / "r.bin", parse_dtype("float32"), -1, 2).size(), 100u);
    try {
        fromfile(dir / "r.bin", parse_dtype("float32"), 101);
        FAIL();
    } catch (const format_error& e) {
        EXPECT_EQ(e.field(), "count");
    }
    try {
        fromfile(dir / "r.bin", parse_dtype("uint8"), -1, 403);
        FAIL();
    } catch (const format_error& e) {
        EXPECT_EQ(e.field(), "offset");
    }
}

// /proc files say 0 bytes and make their text as they are read: loading one by its size would
// give 0 items silently, so it is refused, naming the file and the size.
TEST(raw, a_file_that_says_0_bytes_but_has_content_is_refused) {
    for (const char* path : {"/proc/self/status", "/proc/self/cmdline"}) {
        try {
            fromfile(path, parse_dtype("uint8"));
            FAIL() << path;
        } catch (const format_error& e) {
            EXPECT_EQ(e.file(), path);
            EXPECT_EQ(e.field(), "size");
            EXPECT_NE(e.reason().find("0 bytes but has content"), std::string::npos) << e.reason();
        }
    }
    array out(dtype::uint8, {4});
    EXPECT_THROW(fromfile_into("/proc/self/status", parse_dtype("uint8"), out, -1, 0), format_error);
    test::temp_dir dir;  // an empty regular file is empty: 0 items
    test::write_pattern_file(dir / "empty.bin", 0);
    EXPECT_EQ(fromfile(dir / "empty.bin", parse_dtype("uint8")).size(), 0u);
}

// A read-only array (a view of memory lent read-only) is never written: refused before the
// file is even opened, naming the argument and why.
TEST(raw, into_read_only_memory_is_refused_before_any_byte_moves) {
    test::temp_dir dir;
    test::write_pattern_file(dir / "r.bin", 16);
    array out(dtype::uint8, {16});
    std::memset(out.data(), 0x5a, 16);
    try {
        fromfile_into(dir / "r.bin", parse_dtype("uint8"), out.as_read_only());
        FAIL() << "no error";
    } catch (const usage_error& e) {
        EXPECT_NE(std::string(e.what()).find("out= is read-only"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("r.bin"), std::string::npos) << e.what();
    }
    auto* b = static_cast<unsigned char*>(out.data());
    EXPECT_TRUE(std::all_of(b, b + 16, [](unsigned char x) { return x == 0x5a; }));
    // Swapping in place writes too; a native read-only array passes through untouched.
    array be(dtype::float32, {4}, placement::host(), storage_order::c, byte_order::big);
    EXPECT_THROW(to_native_in_place(be.as_read_only()), usage_error);
    array native(dtype::float32, {4});
    EXPECT_TRUE(to_native_in_place(native.as_read_only()).read_only());
    fromfile_into(dir / "r.bin", parse_dtype("uint8"), out);  // the writable handle still works
    EXPECT_EQ(std::memcmp(out.data(), test::pattern(16).data(), 16), 0);
}

TEST(raw, big_endian_and_round_trip) {
    test::temp_dir dir;
    const std::uint8_t be[] = {0x3f, 0x80, 0x00, 0x00, 0xc0, 0x00, 0x00, 0x00};  // 1, -2
    {
        std::ofstream(dir / "be.bin", std::ios::binary).write(reinterpret_cast<const char*>(be), 8);
    }
    array a = fromfile(dir / "be.bin", parse_dtype(">f4"));
    EXPECT_TRUE(a.is_native());
    EXPECT_EQ(static_cast<float*>(a.data())[1], -2.0f);
    load_options keep;
    keep.keep_byte_order = true;
    array k = fromfile(dir / "be.bin", parse_dtype(">f4"), -1, 0, {}, keep);
    EXPECT_EQ(k.endian(), byte_order::big);
    tofile(k, dir / "out.bin");  // written in its own byte order, as numpy does
    EXPECT_EQ(test::read_whole(dir / "out.bin"), test::read_whole(dir / "be.bin"));
    EXPECT_EQ(checksum(k), checksum(a));
}

TEST(raw, tofile_writes_c_order) {
    test::temp_dir dir;
    array f(dtype::uint8, {2, 3}, placement::host(), storage_order::fortran);
    const std::uint8_t v[] = {0, 3, 1, 4, 2, 5};  // F order of [[0,1,2],[3,4,5]]
    std::memcpy(f.data(), v, 6);
    tofile(f, dir / "c.bin");
    EXPECT_EQ(test::read_whole(dir / "c.bin"), (std::vector<std::uint8_t>{0, 1, 2, 3, 4, 5}));
}

TEST(raw, device) {
    FERRY_REQUIRE_GPU();
    test::temp_dir dir;
    test::write_pattern_file(dir / "r.bin", 4096 + 24);
    load_options o;
    o.where = placement::cuda(0);
    array d = fromfile(dir / "r.bin", parse_dtype(">f8"), -1, 24, {}, o);
    array h = fromfile(dir / "r.bin", parse_dtype(">f8"), -1, 24);
    array back = d.copy_to(placement::host());
    EXPECT_EQ(std::memcmp(back.data(), h.data(), h.nbytes()), 0);
    tofile(d, dir / "out.bin");
    tofile(h, dir / "out_h.bin");
    EXPECT_EQ(test::read_whole(dir / "out.bin"), test::read_whole(dir / "out_h.bin"));
}

}  // namespace
}  // namespace ferry
