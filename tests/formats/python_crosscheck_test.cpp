// Files ferry writes load in numpy.load and the reference safetensors library with the same
// contents (compared through checksums). Skips where python3 or numpy is missing.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "ferry/checksum.hpp"
#include "ferry/npy.hpp"
#include "ferry/safetensors.hpp"
#include "test_util.hpp"

namespace ferry {
namespace {

array patterned(dtype t, std::vector<std::int64_t> shape, std::uint32_t seed,
                storage_order layout = storage_order::c, byte_order order = native_byte_order) {
    array a(t, std::move(shape), placement::host(), layout, order);
    auto bytes = test::pattern(a.nbytes(), 0, seed);
    if (t == dtype::bool_)
        for (auto& b : bytes) b &= 1;
    if (t == dtype::float16 || t == dtype::bfloat16 || t == dtype::float32 || t == dtype::float64 ||
        is_complex(t)) {
        // Keep NaN payloads out: numpy's astype may canonicalise them, changing the checksum.
        std::size_t unit = swap_unit_of(t);
        for (std::size_t i = 0; i + unit <= bytes.size(); i += unit) {
            std::size_t top = order == byte_order::big ? i : i + unit - 1;
            bytes[top] &= 0x3f;
        }
    }
    if (a.nbytes()) std::memcpy(a.data(), bytes.data(), a.nbytes());
    return a;
}

TEST(python_crosscheck, numpy_and_safetensors_load_what_ferry_writes) {
    test::temp_dir dir;
    nlohmann::json list = nlohmann::json::array();
    std::uint32_t seed = 1;
    int n = 0;
    for (int i = 0; i < dtype_count; ++i) {
        auto t = static_cast<dtype>(i);
        if (!has_numpy_descr(t)) continue;
        for (byte_order order : {byte_order::little, byte_order::big}) {
            for (storage_order layout : {storage_order::c, storage_order::fortran}) {
                for (const auto& shape : {std::vector<std::int64_t>{}, {0, 3}, {5, 7, 3}}) {
                    array a = patterned(t, shape, seed++, layout, order);
                    std::string path = dir / ("a" + std::to_string(n++) + ".npy");
                    save_npy(path, a);
                    list.push_back({{"file", path}, {"format", "npy"}, {"checksums", {{"", checksum(a)}}}});
                }
            }
        }
    }
    std::vector<named_array> tensors;
    nlohmann::json sums = nlohmann::json::object();
    for (int i = 0; i < dtype_count; ++i) {
        auto t = static_cast<dtype>(i);
        // numpy has no bfloat16 or float8 types, so the reference numpy loader cannot build them.
        if (!safetensors_name(t) || !has_numpy_descr(t)) continue;
        std::string name = "t." + std::string(to_string(t));
        tensors.push_back({name, patterned(t, {3, 1, 5}, seed++)});
        sums[name] = checksum(tensors.back().value);
    }
    tensors.push_back({"scalar", patterned(dtype::float32, {}, seed++)});
    sums["scalar"] = checksum(tensors.back().value);
    save_safetensors(dir / "m.safetensors", tensors, {{"format", "np"}});
    list.push_back({{"file", dir / "m.safetensors"}, {"format", "safetensors"}, {"checksums", sums}});
    std::ofstream(dir / "list.json") << list.dump();

    std::string cmd = "python3 " + std::string(FERRY_SOURCE_DIR) +
                      "/tests/python/crosscheck_formats.py " + (dir / "list.json") + " 2>&1";
    FILE* p = ::popen(cmd.c_str(), "r");
    ASSERT_NE(p, nullptr);
    std::string out;
    char buf[4096];
    while (std::size_t got = std::fread(buf, 1, sizeof buf, p)) out.append(buf, got);
    int status = ::pclose(p);
    int rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    if (rc == 77 || rc == 127) GTEST_SKIP() << "needs python3 with numpy: " << out;
    EXPECT_EQ(rc, 0) << out;
}

}  // namespace
}  // namespace ferry
