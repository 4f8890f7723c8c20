// The ferry command line as a new user meets it: unknown commands named, negative numbers
// refused as usage errors, a bench that leaves the user's files alone, one JSON shape for info,
// counters that add up, options that do not apply refused, messages that stay printable.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>

#include "ferry/npy.hpp"
#include "ferry/safetensors.hpp"
#include "cli_run.hpp"
#include "test_util.hpp"

namespace ferry {
namespace {

using result = test::cli_result;

// Runs `ferry ARGS` through sh in `cwd` (prefix: shell words before it, e.g. variables).
result run(const std::string& args, const test::temp_dir& dir, const std::string& cwd = "",
           const std::string& prefix = "") {
    return test::run_cli(args, dir, cwd, prefix);
}

void write_bytes(const std::string& path, const std::string& bytes) {
    std::ofstream(path, std::ios::binary) << bytes;
}

std::vector<std::string> names_in(const std::string& dir) {
    std::vector<std::string> out;
    for (const auto& e : std::filesystem::directory_iterator(dir)) out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
}

TEST(cli_first_use, unknown_command_is_named) {
    test::temp_dir dir;
    result r = run("frob", dir);
    EXPECT_EQ(r.status, 2);
    EXPECT_NE(r.err.find("unknown command 'frob'"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("load"), std::string::npos) << r.err;
}

TEST(cli_first_use, negative_numbers_are_usage_errors) {
    test::temp_dir dir;
    test::write_pattern_file(dir / "a.f32", 64);
    result r = run("load '" + (dir / "a.f32") + "' --dtype float32 --device host --offset -8", dir);
    EXPECT_EQ(r.status, 2) << r.err;
    EXPECT_EQ(r.err.find("18446744073709551608"), std::string::npos) << r.err;
    EXPECT_EQ(run("convert '" + (dir / "a.f32") + "' '" + (dir / "b.npy") + "' --dtype float32 --offset -1", dir).status, 2);
    EXPECT_EQ(run("bench '" + (dir / "a.f32") + "' --device host --threads -1", dir).status, 2);
}

// The bench's own files get fresh names, never a user's, and go away on every exit path.
TEST(cli_first_use, bench_leaves_the_users_files_alone) {
    test::temp_dir dir;
    test::temp_dir work;
    write_bytes(work / "ferry-bench.bin", "mine");
    write_bytes(work / "ferry-bench.bin.write", "mine too");
    result r = run("bench --size 2M --device host --threads 1 --task-size 1M --repeat 1 --no-naive --write --json",
                   dir, work.path());
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(names_in(work.path()), (std::vector<std::string>{"ferry-bench.bin", "ferry-bench.bin.write"}));
    auto mine = test::read_whole(work / "ferry-bench.bin");
    EXPECT_EQ(std::string(mine.begin(), mine.end()), "mine");
    // A file given to read: its neighbour is not the write target either.
    r = run("bench ferry-bench.bin --device host --threads 1 --task-size 1M --repeat 1 --no-naive --write --json", dir,
            work.path());
    ASSERT_EQ(r.status, 0) << r.err;
    auto mine_too = test::read_whole(work / "ferry-bench.bin.write");
    EXPECT_EQ(std::string(mine_too.begin(), mine_too.end()), "mine too");
    EXPECT_EQ(names_in(work.path()).size(), 2u);
    // A file system that fills up while the file is generated (here: a file size limit, the
    // signal ignored so that the write fails with EFBIG): an error, and no partial file left.
    std::filesystem::remove(work / "ferry-bench.bin");
    std::filesystem::remove(work / "ferry-bench.bin.write");
    r = run("bench --size 8M --device host --threads 1 --repeat 1 --no-naive", dir, work.path(),
            "trap '' XFSZ; ulimit -f 2048; ");
    EXPECT_EQ(r.status, 1) << r.err;
    EXPECT_TRUE(names_in(work.path()).empty()) << names_in(work.path()).front();
}

TEST(cli_first_use, info_json_has_the_documented_shape) {
    test::temp_dir dir;
    save_npy(dir / "a.npy", array(dtype::float64, {2, 3}, placement::host(), storage_order::c, byte_order::big));
    result r = run("info --json '" + (dir / "a.npy") + "'", dir);
    ASSERT_EQ(r.status, 0) << r.err;
    auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["file"], dir / "a.npy");
    EXPECT_EQ(j["file_size"], 176);
    EXPECT_FALSE(j.contains("size"));
    EXPECT_EQ(j["arrays"][0]["byte_order"], "big");
    EXPECT_EQ(j["arrays"][0]["order"], "C");
    save_npy(dir / "b.npy", array(dtype::uint8, {4}));
    j = nlohmann::json::parse(run("info --json '" + (dir / "b.npy") + "'", dir).out);
    EXPECT_TRUE(j["arrays"][0]["byte_order"].is_null()) << "one-byte types have no byte order";
}

// What a load reports as moved adds up to the file: headers are read (and counted) once.
TEST(cli_first_use, counters_add_up_to_the_file) {
    test::temp_dir dir;
    write_bytes(dir / "short.bin", "abc");
    save_npy(dir / "a.npy", array(dtype::float64, {2, 3}));
    save_safetensors(dir / "m.safetensors", {{"a", array(dtype::float32, {5})}, {"b", array(dtype::int8, {3})}},
                     {{"k", "v"}});
    for (const std::string name : {"short.bin", "a.npy", "m.safetensors"}) {
        result r = run("load --json --device host '" + (dir / name) + "'", dir);
        ASSERT_EQ(r.status, 0) << name << ": " << r.err;
        auto j = nlohmann::json::parse(r.out);
        EXPECT_EQ(j["io"]["host"].get<std::uint64_t>(), std::filesystem::file_size(dir / name)) << name << ": " << r.out;
    }
}

TEST(cli_first_use, options_that_do_not_apply_are_refused) {
    test::temp_dir dir;
    save_npy(dir / "a.npy", array(dtype::float32, {4}));
    result r = run("load --device host --dtype float64 '" + (dir / "a.npy") + "'", dir);
    EXPECT_EQ(r.status, 2) << r.out;
    EXPECT_NE(r.err.find("raw files only"), std::string::npos) << r.err;
    // --as converts only what can be converted; the rest is refused, not left as it was.
    save_safetensors(dir / "m.safetensors", {{"h", array(dtype::float16, {4})}, {"f", array(dtype::float32, {4})}});
    r = run("load --device host --as bfloat16 '" + (dir / "m.safetensors") + "'", dir);
    EXPECT_EQ(r.status, 2) << r.out;
    EXPECT_NE(r.err.find("tensor 'h'"), std::string::npos) << r.err;
    // Two tensors into a one-array format: what was selected, not what the file holds.
    std::string all = std::string(FERRY_TEST_DATA) + "/safetensors/ok_all_dtypes.safetensors";
    r = run("convert '" + all + "' '" + (dir / "o.npy") + "' --tensor f32 --tensor i32 --device host", dir);
    EXPECT_EQ(r.status, 2);
    EXPECT_NE(r.err.find("--tensor selected 2 tensors"), std::string::npos) << r.err;
    EXPECT_FALSE(std::filesystem::exists(dir / "o.npy"));
}

TEST(cli_first_use, save_errors_name_the_target) {
    test::temp_dir dir;
    save_npy(dir / "a.npy", array(dtype::float32, {4}));
    std::string target = dir / "missing/b.npy";
    result r = run("convert -q --device host '" + (dir / "a.npy") + "' '" + target + "'", dir);
    EXPECT_EQ(r.status, 1);
    EXPECT_NE(r.err.find("(" + target + ")"), std::string::npos) << r.err;
}

TEST(cli_first_use, messages_about_malformed_files_are_printable_utf8) {
    test::temp_dir dir;
    std::string header = "{\"a\":\"\x80\xff\x01";  // not UTF-8, with a control byte, unterminated
    header += std::string((8 - (header.size() % 8)) % 8, ' ');
    std::string len(8, '\0');
    for (int i = 0; i < 8; ++i) len[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
    // The file's own name is not UTF-8 either: the message shows it escaped.
    write_bytes(dir / "bad\xff.safetensors", len + header);
    result r = run("info '" + (dir / "bad\xff.safetensors") + "'", dir);
    EXPECT_EQ(r.status, 1);
    for (unsigned char c : r.err) {
        EXPECT_TRUE(c == '\n' || (c >= 0x20 && c < 0x7f)) << "raw byte " << int(c) << " in: " << r.err;
        if (!(c == '\n' || (c >= 0x20 && c < 0x7f))) break;
    }
    EXPECT_NE(r.err.find("bad\\xff.safetensors: header: invalid JSON"), std::string::npos) << r.err;
}

TEST(cli_first_use, a_negative_offset_is_said_to_be_negative) {
    test::temp_dir dir;
    test::write_pattern_file(dir / "a.raw", 64);
    result r = run("load '" + (dir / "a.raw") + "' --device host --offset -4", dir);
    EXPECT_EQ(r.status, 2) << r.err;
    EXPECT_NE(r.err.find("--offset"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("must be >= 0, not -4"), std::string::npos) << r.err;
    EXPECT_FALSE(std::regex_search(r.err, std::regex("[0-9]{20}"))) << r.err;  // no range end in 310 digits
    r = run("bench '" + (dir / "a.raw") + "' --device host --threads 2,-1", dir);
    EXPECT_EQ(r.status, 2) << r.err;
    EXPECT_NE(r.err.find("must be >= 0, not -1"), std::string::npos) << r.err;
}

// A URL without a host is named (redacted) as such, not sent to the resolver with a path
// segment taken for the host.
TEST(cli_first_use, a_url_without_a_host_is_named) {
    test::temp_dir dir;
    for (const std::string url : {"http://", "http:///a.npy", "https://:8080/a.npy", "http:///ckpt/"}) {
        result r = run("info '" + url + "'", dir);
        EXPECT_EQ(r.status, 2) << url << ": " << r.err;
        EXPECT_NE(r.err.find("the URL has no host: " + url), std::string::npos) << r.err;
        EXPECT_EQ(r.err.find("resolve"), std::string::npos) << r.err;
    }
    result r = run("load --device host 'http://user:pw@/a.npy?token=s3cr3t'", dir);
    EXPECT_EQ(r.status, 2) << r.err;
    EXPECT_NE(r.err.find("the URL has no host: http:///a.npy?token=REDACTED"), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("s3cr3t"), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("pw"), std::string::npos) << r.err;
    r = run("info 's3:///model/'", dir);
    EXPECT_EQ(r.status, 2) << r.err;
    EXPECT_NE(r.err.find("(bad bucket name): s3:///model/"), std::string::npos) << r.err;
}

// A small load finishes fast but moves few bytes: its rate keeps its digits, in a unit that fits.
TEST(cli_first_use, slow_rates_keep_their_digits) {
    test::temp_dir dir;
    write_bytes(dir / "short.bin", "abc");
    result r = run("load --device host '" + (dir / "short.bin") + "'", dir);
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(r.out.find("0.00 GB/s"), std::string::npos) << r.out;
    EXPECT_TRUE(std::regex_search(r.out, std::regex(" s: [1-9][0-9]*(\\.[0-9]+)? (GB|MB|kB|B)/s\n"))) << r.out;
}

TEST(cli_first_use, help_lists_the_device_aliases) {
    test::temp_dir dir;
    for (const std::string cmd : {"load", "bench", "convert"}) {
        result r = run(cmd + " --help", dir);
        EXPECT_EQ(r.status, 0) << r.err;
        EXPECT_NE(r.out.find("(or gpu"), std::string::npos) << cmd << ": " << r.out;
        EXPECT_NE(r.out.find("(or cpu)"), std::string::npos) << cmd << ": " << r.out;
    }
}

// A row is named by the route its bytes took: paths into GPU memory are refused into host
// memory, and a path whose bytes went elsewhere is listed as unavailable with the reason.
TEST(cli_first_use, bench_rows_are_named_by_the_route_their_bytes_took) {
    test::temp_dir dir;
    test::write_pattern_file(dir / "a.bin", 1 << 20);
    const std::string common = "bench '" + (dir / "a.bin") + "' --device host --threads 1 --task-size 256K --repeat 1 "
                               "--no-naive --json --paths ";
    for (const std::string p : {"cufile", "gds", "staged", "staged+direct"}) {
        result r = run(common + p, dir);
        EXPECT_EQ(r.status, 2) << p << ": " << r.out;
        EXPECT_NE(r.err.find("--paths " + p + ": "), std::string::npos) << r.err;
        EXPECT_NE(r.err.find("GPU memory only"), std::string::npos) << r.err;
        EXPECT_TRUE(r.out.empty()) << r.out;
    }
    result r = run(common + "host,direct,auto", dir);
    ASSERT_EQ(r.status, 0) << r.err;
    auto j = nlohmann::json::parse(r.out);
    ASSERT_TRUE(j["unavailable"].is_array()) << r.out;
    std::set<std::string> measured;
    for (const auto& row : j["results"]) {
        if (row["kind"] != "ferry") continue;
        const std::string name = row["name"];
        measured.insert(name);
        for (const auto& [route, bytes] : row["io"].items())
            if (route != "fallbacks" && route != "routes" && name != "auto")
                EXPECT_EQ(route, name) << "a " << name << " row's bytes went through " << route << ": " << r.out;
    }
    EXPECT_TRUE(measured.count("host")) << r.out;
    for (const auto& u : j["unavailable"]) {
        EXPECT_FALSE(measured.count(u["name"].get<std::string>())) << r.out;
        EXPECT_FALSE(u["reason"].get<std::string>().empty()) << r.out;
    }
}

// The free space is checked before the first byte of a scratch file: nothing written, and the
// message says how much is needed and how much is free.
TEST(cli_first_use, bench_checks_free_space_before_writing) {
    test::temp_dir dir;
    test::temp_dir work;
    result r = run("bench --size 16000T --device host --threads 1 --repeat 1 --no-naive", dir, work.path());
    EXPECT_EQ(r.status, 2) << r.err;
    EXPECT_NE(r.err.find("the generated file needs 16000.00 TiB in ., but "), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(" is free there"), std::string::npos) << r.err;
    EXPECT_TRUE(names_in(work.path()).empty());
    r = run("bench --size 9000T --write --device host --threads 1 --repeat 1 --no-naive", dir, work.path());
    EXPECT_EQ(r.status, 2) << r.err;
    EXPECT_NE(r.err.find("the generated file and the write target need 18000.00 TiB"), std::string::npos) << r.err;
    EXPECT_TRUE(names_in(work.path()).empty());
}

// -- Many files: several paths, a glob of .npy files, @LIST ----------------------------------------

TEST(cli_first_use, many_files_load_as_one_list_and_name_the_one_that_fails) {
    test::temp_dir dir;
    for (int i = 0; i < 12; ++i) save_npy(dir / ("f" + std::to_string(i) + ".npy"), array(dtype::int16, {i + 1}));
    test::write_pattern_file(dir / "r.raw", 40);
    result r = run("load --device host --json '" + dir / "f*.npy" + "'", dir);
    ASSERT_EQ(r.status, 0) << r.err;
    auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["files"], 12);
    EXPECT_EQ(j["formats"]["npy"], 12);
    EXPECT_EQ(j["bytes"], 2 * (12 * 13 / 2));
    EXPECT_TRUE(j["failures"].empty());

    write_bytes(dir / "list.txt", "# two files\n" + dir / "f3.npy" + "\n\n" + dir / "r.raw" + "\n");
    r = run("load --device host --dtype int32 --checksum --json @'" + dir / "list.txt" + "'", dir);
    ASSERT_EQ(r.status, 0) << r.err;
    j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["formats"]["raw"], 1);
    EXPECT_EQ(j["checksums"].size(), 2u);

    // The first failure stops the list and is named by its place; --keep-going lists them all.
    write_bytes(dir / "bad.npy", "\x93NUMPY");
    const std::string three = "'" + dir / "f1.npy" + "' '" + dir / "bad.npy" + "' '" + dir / "gone.npy" + "'";
    r = run("load --device host " + three, dir);
    EXPECT_EQ(r.status, 1);
    EXPECT_NE(r.err.find("paths[1]"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("bad.npy"), std::string::npos) << r.err;
    r = run("load --device host --keep-going --json " + three, dir);
    EXPECT_EQ(r.status, 1);
    j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["files"], 1);
    ASSERT_EQ(j["failures"].size(), 2u);
    EXPECT_EQ(j["failures"][1]["index"], 2);

    // What loads one file only is refused for a list; a list that names nothing, or a glob
    // among several paths that matches nothing, is said so.
    r = run("load --device host --offset 4 " + three, dir);
    EXPECT_EQ(r.status, 2);
    EXPECT_NE(r.err.find("not a list of 3 files"), std::string::npos) << r.err;
    write_bytes(dir / "empty.txt", "# nothing\n");
    r = run("load @'" + dir / "empty.txt" + "'", dir);
    EXPECT_EQ(r.status, 2);
    EXPECT_NE(r.err.find("names no file"), std::string::npos) << r.err;
    r = run("load '" + dir / "f1.npy" + "' '" + dir / "zz*.npy" + "'", dir);
    EXPECT_EQ(r.status, 2);
    EXPECT_NE(r.err.find("no file matches"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace ferry
