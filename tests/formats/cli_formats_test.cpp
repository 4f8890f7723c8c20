// ferry info and ferry convert, run as a user would: exit statuses, one-line errors, JSON.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "ferry/checksum.hpp"
#include "ferry/npy.hpp"
#include "ferry/safetensors.hpp"
#include "cli_run.hpp"
#include "test_util.hpp"

namespace ferry {
namespace {

using result = test::cli_result;

result run(const std::string& args, const test::temp_dir& dir) { return test::run_cli(args, dir); }

std::string vector_file(const std::string& name) { return std::string(FERRY_TEST_DATA) + "/" + name; }

TEST(cli_info, describes_valid_files) {
    test::temp_dir dir;
    result r = run("info '" + vector_file("npy/ok_float32_big_F_2x3x4.npy") + "'", dir);
    EXPECT_EQ(r.status, 0) << r.err;
    EXPECT_NE(r.out.find("npy 1.0"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("(2, 3, 4)"), std::string::npos) << r.out;
    r = run("info --json '" + vector_file("safetensors/ok_all_dtypes.safetensors") + "'", dir);
    ASSERT_EQ(r.status, 0) << r.err;
    auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["format"], "safetensors");
    EXPECT_EQ(j["arrays"].size(), 18u);
    EXPECT_EQ(j["metadata"]["format"], "pt");
    EXPECT_EQ(j["arrays"][0]["name"], "empty");
}

TEST(cli_info, invalid_input_is_one_line_and_status_1) {
    test::temp_dir dir;
    std::string bad = vector_file("safetensors/bad_overlap.safetensors");
    result r = run("info '" + bad + "'", dir);
    EXPECT_EQ(r.status, 1);
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_NE(r.err.find(bad), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("overlaps"), std::string::npos) << r.err;
    r = run("info '" + (dir / "missing.npy") + "'", dir);
    EXPECT_EQ(r.status, 1);
    r = run("info", dir);
    EXPECT_EQ(r.status, 2);
    r = run("info --format npz x", dir);
    EXPECT_EQ(r.status, 2);
}

TEST(cli_convert, npy_safetensors_raw_round_trip) {
    test::temp_dir dir;
    std::string src = vector_file("npy/ok_complex128_big_F_3x5.npy");
    std::string expect = checksum(load_npy(src));
    ASSERT_EQ(run("convert -q '" + src + "' '" + (dir / "a.safetensors") + "' --device host", dir).status, 2)
        << "complex128 cannot be stored in safetensors";
    src = vector_file("npy/ok_float32_big_F_3x5.npy");
    expect = checksum(load_npy(src));
    result r = run("convert -q '" + src + "' '" + (dir / "a.safetensors") + "' --name w", dir);
    ASSERT_EQ(r.status, 0) << r.err;
    auto st = load_safetensors(dir / "a.safetensors");
    ASSERT_EQ(st.size(), 1u);
    EXPECT_EQ(st[0].name, "w");
    EXPECT_EQ(checksum(st[0].value), expect);
    ASSERT_EQ(run("convert -q '" + (dir / "a.safetensors") + "' '" + (dir / "b.npy") + "'", dir).status, 0);
    EXPECT_EQ(checksum(load_npy(dir / "b.npy")), expect);
    ASSERT_EQ(run("convert -q '" + (dir / "b.npy") + "' '" + (dir / "c.raw") + "'", dir).status, 0);
    r = run("convert -q '" + (dir / "c.raw") + "' '" + (dir / "d.npy") + "' --dtype float32 --shape 3,5", dir);
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(checksum(load_npy(dir / "d.npy")), expect);
    r = run("convert -q '" + (dir / "c.raw") + "' '" + (dir / "e.npy") + "' --dtype '>f4' --keep-byte-order", dir);
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(read_npy_info(dir / "e.npy").type.order, byte_order::big);
}

TEST(cli_convert, usage_errors) {
    test::temp_dir dir;
    std::string multi = vector_file("safetensors/ok_all_dtypes.safetensors");
    result r = run("convert '" + multi + "' '" + (dir / "x.npy") + "'", dir);
    EXPECT_EQ(r.status, 2);
    EXPECT_NE(r.err.find("--tensor"), std::string::npos) << r.err;
    r = run("convert -q '" + multi + "' '" + (dir / "x.npy") + "' --tensor t_int16", dir);
    EXPECT_EQ(r.status, 0) << r.err;
    r = run("convert -q '" + multi + "' '" + (dir / "x.npy") + "' --tensor nope", dir);
    EXPECT_EQ(r.status, 2);
    r = run("convert -q '" + vector_file("npy/bad_shape_negative.npy") + "' '" + (dir / "y.npy") + "'", dir);
    EXPECT_EQ(r.status, 1);
    EXPECT_FALSE(std::filesystem::exists(dir / "y.npy"));
}

// A file name is any bytes; a safetensors tensor name is UTF-8 text. The name convert takes
// from such a file's stem is refused with the way out, not the JSON library's exception.
TEST(cli_convert, a_file_name_that_is_not_utf8_asks_for_name) {
    test::temp_dir dir;
    std::string src = dir / "\xff\xfename.npy";
    save_npy(src, load_npy(vector_file("npy/ok_float32_big_F_3x5.npy")));
    result r = run("convert -q '" + src + "' '" + (dir / "x.safetensors") + "' --device host", dir);
    EXPECT_EQ(r.status, 2) << r.err;
    EXPECT_NE(r.err.find("--name"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("'\\xff\\xfename' is not UTF-8"), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("json"), std::string::npos) << r.err;
    EXPECT_FALSE(std::filesystem::exists(dir / "x.safetensors"));
    r = run("convert -q '" + src + "' '" + (dir / "x.safetensors") + "' --device host --name w", dir);
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(load_safetensors(dir / "x.safetensors")[0].name, "w");
}

}  // namespace
}  // namespace ferry
