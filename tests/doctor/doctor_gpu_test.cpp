// The doctor on a machine with a GPU: it reports the GPU and cuFile, and its verdict is the path
// a real read into GPU memory takes. Skipped where there is no GPU.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <unistd.h>

#include <vector>

#include "doctor_test_util.hpp"
#include "ferry/doctor.hpp"
#include "ferry/file.hpp"
#include "ferry/memory.hpp"

namespace ferry::doctor {
namespace {

using nlohmann::json;
using testing::scratch_dir;

#define FERRY_REQUIRE_GPU()                                                      \
    do {                                                                         \
        if (cuda_device_count() == 0)                                            \
            GTEST_SKIP() << "needs a CUDA device: " << cuda_unavailable_reason(); \
    } while (0)

TEST(DoctorGpu, ReportsEveryDevice) {
    FERRY_REQUIRE_GPU();
    json j = json::parse(run_doctor().json);
    EXPECT_EQ(j["cuda"]["available"], true);
    ASSERT_EQ(j["cuda"]["devices"].size(), static_cast<std::size_t>(cuda_device_count()));
    EXPECT_TRUE(j["cuda"]["driver_version"].is_string());
    for (const auto& d : j["cuda"]["devices"]) {
        EXPECT_TRUE(d["name"].is_string());
        EXPECT_GT(d["memory_bytes"].get<std::uint64_t>(), 0u);
        EXPECT_TRUE(d["pci_bus_id"].is_string());
        // sysfs is there on any Linux GPU machine; PCIe facts come from it.
        EXPECT_TRUE(d["pcie"]["generation"].is_number()) << d.dump();
        EXPECT_TRUE(d["pcie"]["width"].is_number()) << d.dump();
    }
}

TEST(DoctorGpu, ReportsCufileAndCompatibilityMode) {
    FERRY_REQUIRE_GPU();
    json j = json::parse(run_doctor().json);
    const json& c = j["cufile"];
    if (c["available"] != true) GTEST_SKIP() << "cuFile is not installed: " << c["error"];
    EXPECT_TRUE(c["version"].is_string());
    EXPECT_TRUE(c["path"].is_string());
    if (c["driver"]["open"] != true) GTEST_SKIP() << "cuFile driver does not open: " << c["driver"].dump();
    ASSERT_TRUE(c["properties"].is_object());
    if (c["properties"]["nvidia_fs"] == false) {
        // No nvidia-fs: cuFile offers compatibility mode, not GPUDirect Storage.
        EXPECT_EQ(j["gds"]["available"], false);
        EXPECT_EQ(j["gds"]["compat_mode"], c["properties"]["allow_compat_mode"]);
        bool named = false;
        for (const auto& r : j["gds"]["reasons"]) named |= r.get<std::string>().find("nvidia-fs") != std::string::npos;
        EXPECT_TRUE(named) << j["gds"]["reasons"].dump();
    }
    if (::access("/run/udev/data", F_OK) != 0) {
        bool named = false;
        for (const auto& r : j["gds"]["reasons"]) named |= r.get<std::string>().find("5027") != std::string::npos;
        EXPECT_TRUE(named) << "the missing udev database is named as a reason";
    }
}

TEST(DoctorGpu, VerdictMatchesWhatALoadDoes) {
    FERRY_REQUIRE_GPU();
    scratch_dir dir(testing::build_dir());
    ASSERT_TRUE(dir.ok());
    const std::size_t size = 64 << 20;
    std::string path = dir.write_file("load.bin", size);
    doctor_report r = run_doctor({{path}, std::nullopt});
    ASSERT_EQ(r.paths.size(), 1u);
    ASSERT_TRUE(r.paths[0].route.has_value()) << r.json;

    ferry::file f(path);
    device_buffer buf(size);
    f.read(buf.data(), size, 0);
    io_stats st = f.stats();
    std::vector<io_path> used;
    for (int p = 0; p < io_path_count; ++p)
        if (st.read[p].bytes > 0) used.push_back(static_cast<io_path>(p));
    ASSERT_EQ(used.size(), 1u) << "one path served the whole read";
    EXPECT_EQ(to_string(used[0]), to_string(*r.paths[0].route)) << r.text;
}

}  // namespace
}  // namespace ferry::doctor
