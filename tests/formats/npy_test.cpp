#include "ferry/npy.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "ferry/checksum.hpp"
#include "ferry/convert.hpp"
#include "ferry/error.hpp"
#include "formats/npy_header.hpp"
#include "test_util.hpp"

namespace ferry {

namespace {

const byte_order foreign = native_byte_order == byte_order::little ? byte_order::big : byte_order::little;

array patterned(dtype t, std::vector<std::int64_t> shape, placement where = {},
                storage_order layout = storage_order::c, byte_order order = native_byte_order,
                std::uint32_t seed = 3) {
    array a(t, std::move(shape), placement::host(), layout, order);
    auto bytes = test::pattern(a.nbytes(), 0, seed);
    if (t == dtype::bool_)
        for (auto& b : bytes) b &= 1;
    if (a.nbytes()) std::memcpy(a.data(), bytes.data(), a.nbytes());
    return where == placement::host() ? a : a.copy_to(where);
}

std::string header_text(const std::string& path) {
    auto bytes = test::read_whole(path);
    return std::string(bytes.begin(), bytes.end());
}

TEST(npy_header, numpy_style) {
    std::string h = formats::format_npy_header({dtype::float32, byte_order::little}, {3, 4});
    EXPECT_EQ(h.size(), 128u);
    EXPECT_EQ(h.substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));
    EXPECT_EQ(static_cast<unsigned char>(h[8]) | (static_cast<unsigned char>(h[9]) << 8), 118);
    EXPECT_EQ(h.substr(10, 59), "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }");
    EXPECT_EQ(h.back(), '\n');
    std::string s = formats::format_npy_header({dtype::int64, byte_order::big}, {});
    EXPECT_NE(s.find("'descr': '>i8', 'fortran_order': False, 'shape': (), }"), std::string::npos);
    EXPECT_EQ(s.size() % 64, 0u);
}

TEST(npy_header, the_largest_headers_still_fit_version_1) {
    std::vector<std::int64_t> shape(64, 1000000000000000000LL);
    std::string h = formats::format_npy_header({dtype::uint8, native_byte_order}, shape);
    EXPECT_EQ(h[6], 1);  // still fits in 65535
    EXPECT_EQ(h.size() % 64, 0u);
}

TEST(npy_header, parser_accepts_variants) {
    formats::npy_preamble pre;
    pre.header_size = 100;
    auto parse = [&](const std::string& s) { return formats::parse_npy_header(s, pre, "f"); };
    npy_info a = parse("{\"shape\":(2,3),\"fortran_order\":True,\"descr\":\">u2\"}\n");
    EXPECT_EQ(a.shape, (std::vector<std::int64_t>{2, 3}));
    EXPECT_EQ(a.layout, storage_order::fortran);
    EXPECT_EQ(a.type, (typed_order{dtype::uint16, byte_order::big}));
    EXPECT_EQ(a.data_bytes, 12u);
    npy_info b = parse("{'descr': '|b1', 'fortran_order': False, 'shape': ( 4 , ) }   \n");
    EXPECT_EQ(b.shape, (std::vector<std::int64_t>{4}));
    npy_info c = parse("{'descr':'<c16','fortran_order':False,'shape':(0, 5)}");
    EXPECT_EQ(c.data_bytes, 0u);
}

TEST(npy_header, parser_never_crashes_on_prefixes) {
    std::string good = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
    formats::npy_preamble pre;
    for (std::size_t n = 0; n < good.size(); ++n)
        EXPECT_THROW(formats::parse_npy_header(good.substr(0, n), pre, "f"), format_error) << n;
    for (std::size_t i = 0; i < good.size(); ++i) {
        std::string s = good;
        s[i] = '\x01';
        try {
            formats::parse_npy_header(s, pre, "f");
        } catch (const format_error&) {
        }
    }
}

class npy_round_trip : public ::testing::TestWithParam<dtype> {};

TEST_P(npy_round_trip, every_shape_order_and_layout) {
    dtype t = GetParam();
    test::temp_dir dir;
    const std::vector<std::int64_t> shapes[] = {{}, {0}, {1}, {7}, {3, 5}, {2, 3, 4}, {4, 0, 2}, {1, 1, 17}};
    for (const auto& shape : shapes) {
        for (byte_order order : {byte_order::little, byte_order::big}) {
            for (storage_order layout : {storage_order::c, storage_order::fortran}) {
                array a = patterned(t, shape, placement::host(), layout, order);
                std::string path = dir / "a.npy";
                save_npy(path, a);
                npy_info info = read_npy_info(path);
                EXPECT_EQ(info.data_offset % 64, 0u);
                // As numpy.save: Fortran order kept where it differs from C order.
                EXPECT_EQ(info.layout, layout == storage_order::fortran && !a.is_c_and_fortran()
                                           ? storage_order::fortran
                                           : storage_order::c);
                EXPECT_EQ(info.shape, shape);
                load_options keep;
                keep.keep_byte_order = true;
                array b = load_npy(path, keep);
                EXPECT_EQ(b.type(), t);
                EXPECT_EQ(b.shape(), shape);
                EXPECT_EQ(b.is_native(), a.is_native());
                EXPECT_EQ(checksum(b), checksum(a)) << to_string(t) << shape_to_string(shape);
                array n = load_npy(path);
                EXPECT_TRUE(n.is_native());
                EXPECT_EQ(checksum(n), checksum(a));
                array native_c = to_native_c(a);
                array n_c = to_c_order(n);
                ASSERT_EQ(n_c.nbytes(), native_c.nbytes());
                if (n_c.nbytes()) EXPECT_EQ(std::memcmp(n_c.data(), native_c.data(), n_c.nbytes()), 0);
            }
        }
    }
}

INSTANTIATE_TEST_SUITE_P(numpy_dtypes, npy_round_trip,
                         ::testing::Values(dtype::bool_, dtype::int8, dtype::int16, dtype::int32,
                                           dtype::int64, dtype::uint8, dtype::uint16, dtype::uint32,
                                           dtype::uint64, dtype::float16, dtype::float32,
                                           dtype::float64, dtype::complex64, dtype::complex128),
                         [](const auto& info) { return std::string(to_string(info.param)); });

// Every file numpy wrote (C and Fortran order) loads and saves back to the identical bytes.
TEST(npy, rewrites_numpy_files_byte_for_byte) {
    std::ifstream in(std::string(FERRY_TEST_DATA) + "/npy/manifest.json");
    auto m = nlohmann::json::parse(in);
    test::temp_dir dir;
    int checked = 0;
    for (const auto& v : m["vectors"]) {
        if (v.contains("error") || v["version"] != "1.0") continue;
        std::string src = std::string(FERRY_TEST_DATA) + "/npy/" + v["file"].get<std::string>();
        load_options keep;
        keep.keep_byte_order = true;
        array a = load_npy(src, keep);
        std::string out = dir / "out.npy";
        save_npy(out, a);
        EXPECT_EQ(test::read_whole(out), test::read_whole(src)) << v["file"];
        ++checked;
    }
    EXPECT_GT(checked, 20);
}

// A save names the file the caller asked for, not the hidden temporary one beside it.
TEST(npy, save_errors_name_the_target) {
    test::temp_dir dir;
    std::string target = dir / "missing/x.npy";
    try {
        save_npy(target, array(dtype::float32, {2}));
        ADD_FAILURE() << "saved into a missing directory";
    } catch (const system_error& e) {
        EXPECT_EQ(e.where().path, target);
        EXPECT_EQ(e.code(), ENOENT);
        EXPECT_NE(std::string(e.what()).find("(" + target + ")"), std::string::npos) << e.what();
    }
}

TEST(npy, refuses_types_numpy_cannot_name) {
    test::temp_dir dir;
    EXPECT_THROW(save_npy(dir / "x.npy", array(dtype::bfloat16, {2})), usage_error);
    EXPECT_THROW(save_npy(dir / "x.npy", array(dtype::float8_e5m2, {2})), usage_error);
    EXPECT_FALSE(std::filesystem::exists(dir / "x.npy"));
}

TEST(npy, as_float32) {
    test::temp_dir dir;
    array h(dtype::float16, {3}, placement::host(), storage_order::c, byte_order::big);
    auto* p = static_cast<std::uint8_t*>(h.data());
    const std::uint8_t be[] = {0x3c, 0x00, 0xc0, 0x00, 0x7b, 0xff};  // 1, -2, 65504 big-endian
    std::memcpy(p, be, 6);
    save_npy(dir / "h.npy", h);
    load_options o;
    o.as = dtype::float32;
    array f = load_npy(dir / "h.npy", o);
    ASSERT_EQ(f.type(), dtype::float32);
    auto* q = static_cast<float*>(f.data());
    EXPECT_EQ(q[0], 1.0f);
    EXPECT_EQ(q[1], -2.0f);
    EXPECT_EQ(q[2], 65504.0f);
    // Integers are left as they are; unsupported float pairs are refused.
    save_npy(dir / "i.npy", patterned(dtype::int16, {4}));
    EXPECT_EQ(load_npy(dir / "i.npy", o).type(), dtype::int16);
    o.as = dtype::float64;
    EXPECT_THROW(load_npy(dir / "h.npy", o), usage_error);
}

TEST(npy, save_over_the_loaded_file) {
    test::temp_dir dir;
    std::string path = dir / "x.npy";
    array a = patterned(dtype::int32, {100});
    save_npy(path, a);
    array b = load_npy(path);
    save_npy(path, astype(b, dtype::int32));
    array c = load_npy(path);
    EXPECT_EQ(checksum(c), checksum(a));
    int entries = 0;
    for (auto& e : std::filesystem::directory_iterator(dir.path())) (void)e, ++entries;
    EXPECT_EQ(entries, 1);  // no temporary left behind
}

TEST(npy, missing_file_is_a_system_error) {
    EXPECT_THROW(load_npy("/nonexistent/ferry/x.npy"), system_error);
}

TEST(npy, device_round_trip) {
    FERRY_REQUIRE_GPU();
    test::temp_dir dir;
    for (dtype t : {dtype::float32, dtype::complex128, dtype::int16, dtype::uint8, dtype::float64}) {
        for (byte_order order : {byte_order::little, byte_order::big}) {
            for (storage_order layout : {storage_order::c, storage_order::fortran}) {
                array h = patterned(t, {33, 65, 3}, placement::host(), layout, order);
                array d = h.copy_to(placement::cuda(0));
                save_npy(dir / "d.npy", d);  // written from device memory
                EXPECT_EQ(test::read_whole(dir / "d.npy"), (save_npy(dir / "h.npy", h), test::read_whole(dir / "h.npy")));
                load_options o;
                o.where = placement::cuda(0);
                array back = load_npy(dir / "d.npy", o);
                EXPECT_EQ(back.where().kind, memory_kind::device);
                EXPECT_TRUE(back.is_native());
                EXPECT_EQ(checksum(back), checksum(h));
                array host_load = load_npy(dir / "d.npy");
                array copy = back.copy_to(placement::host());
                EXPECT_EQ(std::memcmp(copy.data(), host_load.data(), copy.nbytes()), 0);
            }
        }
    }
}

TEST(npy, device_conversion_matches_host) {
    FERRY_REQUIRE_GPU();
    test::temp_dir dir;
    for (dtype from : {dtype::float16, dtype::float64, dtype::float32}) {
        for (dtype to : {dtype::float32, dtype::float16, dtype::bfloat16, dtype::float64}) {
            if (!can_astype(from, to)) continue;
            for (byte_order order : {byte_order::little, byte_order::big}) {
                save_npy(dir / "x.npy", patterned(from, {1001}, placement::host(), storage_order::c, order, 9));
                load_options o;
                o.as = to;
                array h = load_npy(dir / "x.npy", o);
                o.where = placement::cuda(0);
                array d = load_npy(dir / "x.npy", o).copy_to(placement::host());
                ASSERT_EQ(d.nbytes(), h.nbytes());
                EXPECT_EQ(std::memcmp(d.data(), h.data(), h.nbytes()), 0)
                    << to_string(from) << "->" << to_string(to);
            }
        }
    }
}

}  // namespace
}  // namespace ferry
