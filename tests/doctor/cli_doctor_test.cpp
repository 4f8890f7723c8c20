// `ferry doctor` as scripts use it: exit statuses, --json, --require-gds, odd environments.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "doctor_test_util.hpp"
#include "ferry/memory.hpp"

namespace ferry::doctor {
namespace {

using nlohmann::json;
using testing::quote;
using testing::run_shell;
using testing::scratch_dir;

const std::string cli = quote(FERRY_CLI);

TEST(CliDoctor, JsonReportAndExitZero) {
    scratch_dir dir(testing::build_dir());
    ASSERT_TRUE(dir.ok());
    std::string file = dir.write_file("a.bin", 1 << 16);
    auto r = run_shell(cli + " doctor --json " + quote(file) + " " + quote(dir.path()) +
                       " /nonexistent/ferry.bin 2>/dev/null");
    EXPECT_EQ(r.status, 0);
    json j = json::parse(r.out, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << r.out;
    ASSERT_EQ(j["paths"].size(), 3u);
    EXPECT_EQ(j["paths"][0]["path"], file);
    EXPECT_TRUE(j["paths"][0]["verdict"].is_string());
    EXPECT_TRUE(j["paths"][2]["verdict"].is_null());
}

TEST(CliDoctor, TextReportEndsWithVerdict) {
    auto r = run_shell(cli + " doctor " + quote(testing::build_dir()) + " 2>/dev/null");
    EXPECT_EQ(r.status, 0);
    auto pos = r.out.rfind("\nVerdict\n");
    ASSERT_NE(pos, std::string::npos) << r.out;
    EXPECT_NE(r.out.find("GPUDirect Storage:", pos), std::string::npos);
}

TEST(CliDoctor, IoUringLineSaysWhetherItIsTakenAndWhyNot) {
    // The text report's io_uring line agrees with the JSON's alternative and the setting:
    // auto says why it keeps the thread pool where io_uring could serve, or why it cannot.
    auto j = json::parse(run_shell(cli + " doctor --json 2>/dev/null").out, nullptr, false);
    ASSERT_FALSE(j.is_discarded());
    json uring;
    for (const auto& a : j["alternatives"])
        if (a["kind"] == "io_uring") uring = a;
    ASSERT_TRUE(uring.is_object()) << j["alternatives"].dump();
    auto line = [](const std::string& out) {
        auto at = out.find("\n  io_uring ");
        return at == std::string::npos ? std::string() : out.substr(at + 1, out.find('\n', at + 1) - at - 1);
    };
    const std::string dflt = line(run_shell("env -u FERRY_IO_URING " + cli + " doctor 2>/dev/null").out);
    ASSERT_FALSE(dflt.empty());
    if (uring["usable"] == true) {
        EXPECT_NE(dflt.find("auto: usable here, not taken: FERRY_IO_URING=auto keeps the thread pool"), std::string::npos)
            << dflt;
        EXPECT_NE(line(run_shell("FERRY_IO_URING=on " + cli + " doctor 2>/dev/null").out).find("on: reads of local files "
                                                                                               "go through io_uring"),
                  std::string::npos);
    } else {
        EXPECT_NE(dflt.find("auto: not usable here: " + uring["reason"].get<std::string>()), std::string::npos) << dflt;
    }
    EXPECT_NE(line(run_shell("FERRY_IO_URING=off " + cli + " doctor 2>/dev/null").out).find("off: never taken"),
              std::string::npos);
}

TEST(CliDoctor, RequireGdsFailsWhenGdsIsNotUsed) {
    scratch_dir dir(testing::build_dir());
    ASSERT_TRUE(dir.ok());
    std::string file = dir.write_file("a.bin", 1 << 16);
    auto r = run_shell(cli + " doctor --json --require-gds " + quote(file) + " 2>/dev/null");
    json j = json::parse(r.out, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << r.out;
    if (j["paths"][0]["verdict"] == "gds") {
        EXPECT_EQ(r.status, 0);
    } else {
        EXPECT_NE(r.status, 0);
        EXPECT_NE(r.status, -1);
    }
    // Without --require-gds the same report exits 0.
    EXPECT_EQ(run_shell(cli + " doctor --json " + quote(file) + " >/dev/null 2>&1").status, 0);
}

TEST(CliDoctor, StandardInputClosed) {
    // With fd 0 closed, every file the process opens could land on 0; the report must still be
    // produced and the guard must not mistake it for a disturbance.
    auto r = run_shell(cli + " doctor --json " + quote(testing::build_dir()) + " 0<&- 2>/dev/null");
    EXPECT_EQ(r.status, 0);
    json j = json::parse(r.out, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << r.out;
    EXPECT_EQ(j["std_fds"]["disturbed"], false);
}

TEST(CliDoctor, MissingCufileLibraryIsReported) {
    auto r = run_shell("FERRY_CUFILE_LIBRARY=/nonexistent/libcufile.so.0 " + cli + " doctor --json 2>/dev/null");
    EXPECT_EQ(r.status, 0);
    json j = json::parse(r.out, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << r.out;
    EXPECT_EQ(j["cufile"]["available"], false);
    EXPECT_EQ(j["cufile"]["library"], "/nonexistent/libcufile.so.0");
    EXPECT_NE(j["cufile"]["error"].get<std::string>().find("/nonexistent/libcufile.so.0"), std::string::npos);
    EXPECT_TRUE(j["cufile"]["version"].is_null());
    EXPECT_EQ(j["gds"]["available"], false);
}

TEST(CliDoctor, CorruptCufileJsonIsReported) {
    scratch_dir dir(testing::build_dir());
    ASSERT_TRUE(dir.ok());
    std::string bad = dir.path() + "/cufile.json";
    ASSERT_EQ(run_shell("printf '{ broken' > " + quote(bad)).status, 0);
    auto r = run_shell("CUFILE_ENV_PATH_JSON=" + quote(bad) + " " + cli + " doctor --json 2>/dev/null");
    EXPECT_EQ(r.status, 0);
    json j = json::parse(r.out, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << r.out;
    EXPECT_EQ(j["cufile"]["config"]["valid"], false);
    EXPECT_TRUE(j["cufile"]["config"]["error"].is_string());
}

TEST(CliDoctor, BadSettingIsReportedNotFatal) {
    auto r = run_shell("FERRY_THREADS=lots " + cli + " doctor --json 2>/dev/null");
    EXPECT_EQ(r.status, 0);
    json j = json::parse(r.out, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << r.out;
    ASSERT_TRUE(j["settings"]["error"].is_string());
    EXPECT_NE(j["settings"]["error"].get<std::string>().find("FERRY_THREADS"), std::string::npos);
}

// A loadable libcufile on a machine whose CUDA driver is missing or sees no GPU: cuFile 1.20's
// cuFileDriverOpen spins forever there. The doctor must finish, say why the driver was not
// opened, and leave no cufile.log in the working directory.
TEST(CliDoctor, LoadableCufileWithoutDriverDoesNotHang) {
    auto lib = run_shell("python3 -c \"import nvidia, os; print(next(p for p in (os.path.join(d, 'cu13', 'lib', "
                         "'libcufile.so.0') for d in nvidia.__path__) if os.path.exists(p)))\" 2>/dev/null");
    if (lib.status != 0 || lib.out.empty()) GTEST_SKIP() << "the nvidia-cufile wheel is not installed";
    std::string library = lib.out.substr(0, lib.out.find('\n'));
    scratch_dir dir(testing::build_dir());
    ASSERT_TRUE(dir.ok());
    auto r = run_shell("cd " + quote(dir.path()) + " && env -u CUFILE_LOGFILE_PATH FERRY_CUFILE_LIBRARY=" +
                       quote(library) + " timeout 60 " + cli + " doctor --json " + quote(dir.path()) +
                       " 2>/dev/null");
    ASSERT_EQ(r.status, 0) << "124 means the doctor hung";
    json j = json::parse(r.out, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << r.out;
    EXPECT_EQ(j["cufile"]["available"], true);
    if (j["cuda"]["available"] != true) {
        EXPECT_EQ(j["cufile"]["driver"]["open"], false);
        EXPECT_TRUE(j["cufile"]["driver"]["status"].is_null());
        EXPECT_NE(j["cufile"]["driver"]["message"].get<std::string>().find("not opened"), std::string::npos)
            << j["cufile"]["driver"];
    }
    EXPECT_NE(run_shell("test -e " + quote(dir.path() + "/cufile.log")).status, 0)
        << "cufile.log left in the working directory";
}

}  // namespace
}  // namespace ferry::doctor
