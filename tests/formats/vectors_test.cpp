// Conformance vectors: every file under tests/data/npy and tests/data/safetensors, loaded as the
// manifest next to it says (valid files: dtype, byte order, layout, shape, checksum; invalid
// ones: the field and reason of the format error). The same vectors load into GPU memory,
// byte-exact, where there is a GPU.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "ferry/checksum.hpp"
#include "ferry/convert.hpp"
#include "ferry/error.hpp"
#include "ferry/npy.hpp"
#include "ferry/safetensors.hpp"
#include "test_util.hpp"

namespace ferry {
namespace {

using json = nlohmann::json;

json manifest(const std::string& dir) {
    std::ifstream in(std::string(FERRY_TEST_DATA) + "/" + dir + "/manifest.json");
    EXPECT_TRUE(in.good()) << "missing manifest in tests/data/" << dir;
    return json::parse(in);
}

std::string data_path(const std::string& dir, const std::string& file) {
    return std::string(FERRY_TEST_DATA) + "/" + dir + "/" + file;
}

std::vector<std::int64_t> shape_of(const json& j) { return j.get<std::vector<std::int64_t>>(); }

void expect_format_error(const std::function<void()>& f, const json& err, const std::string& path,
                         const std::string& file) {
    try {
        f();
        ADD_FAILURE() << file << ": loaded, but should fail in field " << err["field"];
    } catch (const format_error& e) {
        EXPECT_EQ(e.file(), path) << file;
        EXPECT_EQ(e.field(), err["field"].get<std::string>()) << file << ": " << e.what();
        EXPECT_NE(e.reason().find(err["reason"].get<std::string>()), std::string::npos)
            << file << ": " << e.what();
    } catch (const std::exception& e) {
        ADD_FAILURE() << file << ": wrong exception type: " << e.what();
    }
}

void check_npy(const json& v, const array& a, const std::string& file, bool kept_order) {
    EXPECT_EQ(to_string(a.type()), v["dtype"].get<std::string>()) << file;
    EXPECT_EQ(a.shape(), shape_of(v["shape"])) << file;
    EXPECT_EQ(checksum(a), v["checksum"].get<std::string>()) << file;
    if (kept_order) {
        EXPECT_EQ(a.layout() == storage_order::fortran ? "F" : "C", v["order"].get<std::string>()) << file;
        if (a.itemsize() > 1)
            EXPECT_EQ(to_string(a.endian()), v["byte_order"].get<std::string>()) << file;
    }
}

TEST(npy_vectors, host) {
    json m = manifest("npy");
    ASSERT_GT(m["vectors"].size(), 50u);
    for (const json& v : m["vectors"]) {
        std::string file = v["file"];
        std::string path = data_path("npy", file);
        if (v.contains("error")) {
            expect_format_error([&] { load_npy(path); }, v["error"], path, file);
            expect_format_error([&] { read_npy_info(path); }, v["error"], path, file);
            continue;
        }
        npy_info info = read_npy_info(path);
        EXPECT_EQ(std::to_string(info.major) + ".0", v["version"].get<std::string>()) << file;
        load_options keep;
        keep.keep_byte_order = true;
        check_npy(v, load_npy(path, keep), file, true);
        array native = load_npy(path);
        EXPECT_TRUE(native.is_native()) << file;
        check_npy(v, native, file, false);
        load_options c;
        c.c_order = true;
        array ca = load_npy(path, c);
        EXPECT_TRUE(ca.layout() == storage_order::c || ca.is_c_and_fortran()) << file;
        check_npy(v, ca, file, false);
    }
}

TEST(npy_vectors, device) {
    FERRY_REQUIRE_GPU();
    json m = manifest("npy");
    for (const json& v : m["vectors"]) {
        std::string file = v["file"];
        std::string path = data_path("npy", file);
        load_options o;
        o.where = placement::cuda(0);
        if (v.contains("error")) {
            expect_format_error([&] { load_npy(path, o); }, v["error"], path, file);
            continue;
        }
        array a = load_npy(path, o);
        EXPECT_EQ(a.where().kind, memory_kind::device) << file;
        check_npy(v, a, file, false);
        // Byte-exact against the host load.
        array h = load_npy(path);
        array back = a.copy_to(placement::host());
        ASSERT_EQ(back.nbytes(), h.nbytes());
        EXPECT_EQ(std::memcmp(back.data(), h.data(), h.nbytes()), 0) << file;
        o.c_order = true;
        EXPECT_EQ(checksum(load_npy(path, o).copy_to(placement::host())), v["checksum"].get<std::string>())
            << file;
    }
}

void check_safetensors(const json& v, const std::vector<named_array>& arrays, const std::string& file) {
    ASSERT_EQ(arrays.size(), v["tensors"].size()) << file;
    for (std::size_t i = 0; i < arrays.size(); ++i) {
        const json& t = v["tensors"][i];
        EXPECT_EQ(arrays[i].name, t["name"].get<std::string>()) << file;
        EXPECT_EQ(to_string(arrays[i].value.type()), t["dtype"].get<std::string>()) << file;
        EXPECT_EQ(arrays[i].value.shape(), shape_of(t["shape"])) << file;
        EXPECT_EQ(checksum(arrays[i].value), t["checksum"].get<std::string>()) << file << " " << arrays[i].name;
    }
}

TEST(safetensors_vectors, host) {
    json m = manifest("safetensors");
    ASSERT_GT(m["vectors"].size(), 20u);
    for (const json& v : m["vectors"]) {
        std::string file = v["file"];
        std::string path = data_path("safetensors", file);
        if (v.contains("error")) {
            expect_format_error([&] { load_safetensors(path); }, v["error"], path, file);
            expect_format_error([&] { read_safetensors_info(path); }, v["error"], path, file);
            continue;
        }
        safetensors_info info = read_safetensors_info(path);
        EXPECT_EQ(json(info.metadata), v["metadata"]) << file;
        check_safetensors(v, load_safetensors(path), file);
    }
}

TEST(safetensors_vectors, device) {
    FERRY_REQUIRE_GPU();
    json m = manifest("safetensors");
    for (const json& v : m["vectors"]) {
        std::string file = v["file"];
        std::string path = data_path("safetensors", file);
        load_options o;
        o.where = placement::cuda(0);
        if (v.contains("error")) {
            expect_format_error([&] { load_safetensors(path, o); }, v["error"], path, file);
            continue;
        }
        auto arrays = load_safetensors(path, o);
        check_safetensors(v, arrays, file);
        auto host = load_safetensors(path);
        for (std::size_t i = 0; i < arrays.size(); ++i) {
            array back = arrays[i].value.copy_to(placement::host());
            EXPECT_EQ(std::memcmp(back.data(), host[i].value.data(), back.nbytes()), 0) << file;
        }
        // Conversion kernels on tensors at any offset match the CPU, for every tensor `as`
        // converts (float8 is refused, not converted).
        std::vector<std::string> convertible;
        for (auto& h : host)
            if (!is_floating(h.value.type()) || can_astype(h.value.type(), dtype::float32))
                convertible.push_back(h.name);
        o.as = dtype::float32;
        load_options ho;
        ho.as = dtype::float32;
        auto converted = load_safetensors(path, o, convertible);
        auto host_converted = load_safetensors(path, ho, convertible);
        ASSERT_EQ(converted.size(), convertible.size()) << file;
        for (std::size_t i = 0; i < converted.size(); ++i) {
            array back = converted[i].value.copy_to(placement::host());
            ASSERT_EQ(back.nbytes(), host_converted[i].value.nbytes());
            EXPECT_EQ(std::memcmp(back.data(), host_converted[i].value.data(), back.nbytes()), 0)
                << file << " " << converted[i].name;
        }
    }
}

}  // namespace
}  // namespace ferry
