// run_doctor on the CI machine (no GPU, no cuFile): a valid report with a verdict for each path.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <stdlib.h>
#include <sys/stat.h>

#include "doctor/cufile_probe.hpp"
#include "doctor/probe_util.hpp"
#include "shim/std_fd_guard.hpp"
#include "doctor_test_util.hpp"
#include "ferry/doctor.hpp"
#include "ferry/memory.hpp"

namespace ferry::doctor {
namespace {

using nlohmann::json;
using testing::scratch_dir;

const char* const verdicts[] = {"gds", "cufile-compat", "staged", "staged+direct", "host", "direct"};

bool known_verdict(const json& v) {
    if (!v.is_string()) return false;
    for (const char* k : verdicts)
        if (v == k) return true;
    return false;
}

/// Sets an environment variable for one scope.
class scoped_env {
public:
    scoped_env(const char* name, const std::string& value) : name_(name) {
        if (const char* old = std::getenv(name)) old_ = old, had_ = true;
        ::setenv(name, value.c_str(), 1);
    }
    ~scoped_env() {
        if (had_) ::setenv(name_, old_.c_str(), 1);
        else ::unsetenv(name_);
    }

private:
    const char* name_;
    std::string old_;
    bool had_ = false;
};

TEST(DoctorReport, ValidJsonWithDocumentedKeys) {
    scratch_dir dir(testing::build_dir());
    ASSERT_TRUE(dir.ok());
    std::string file = dir.write_file("data.bin", 1 << 20);
    doctor_options o;
    o.paths = {file, dir.path(), dir.path() + "/missing.bin"};
    doctor_report r = run_doctor(o);

    json j = json::parse(r.json);
    ASSERT_TRUE(j.is_object());
    EXPECT_TRUE(j["cuda"]["available"].is_boolean());
    EXPECT_TRUE(j["cuda"]["devices"].is_array());
    EXPECT_TRUE(j["cufile"]["available"].is_boolean());
    EXPECT_TRUE(j["cufile"].contains("version"));
    EXPECT_TRUE(j["gds"]["available"].is_boolean());
    EXPECT_TRUE(j["gds"]["reasons"].is_array());
    EXPECT_TRUE(j["system"]["cpus"].is_number());
    EXPECT_TRUE(j["system"]["memory_bytes"].is_number());
    EXPECT_TRUE(j["summary"].is_string());
    EXPECT_EQ(j["std_fds"]["disturbed"], false);

    ASSERT_EQ(j["paths"].size(), 3u);
    for (const auto& p : j["paths"]) {
        SCOPED_TRACE(p["path"].get<std::string>());
        EXPECT_TRUE(p.contains("filesystem"));
        EXPECT_TRUE(p.contains("direct_io"));
        EXPECT_TRUE(p.contains("verdict"));
        ASSERT_TRUE(p["reasons"].is_array());
        EXPECT_FALSE(p["reasons"].empty()) << "every verdict comes with its reasons";
    }
    // The file and the directory get a verdict; the missing path says why it has none.
    EXPECT_TRUE(known_verdict(j["paths"][0]["verdict"])) << j["paths"][0]["verdict"];
    EXPECT_TRUE(known_verdict(j["paths"][1]["verdict"])) << j["paths"][1]["verdict"];
    EXPECT_TRUE(j["paths"][2]["verdict"].is_null());
    EXPECT_EQ(j["paths"][2]["exists"], false);
    EXPECT_NE(j["paths"][2]["reasons"][0].get<std::string>().find("ENOENT"), std::string::npos);

    // The engine's decisions come with stable codes beside their words, and so does each of the
    // local file's alternatives.
    for (int i : {0, 1}) {
        const json& codes = j["paths"][i]["reason_codes"];
        ASSERT_TRUE(codes.is_array());
        ASSERT_FALSE(codes.empty());
        EXPECT_EQ(codes.size(), r.paths[i].codes.size());
        for (const auto& c : codes) {
            EXPECT_TRUE(c["code"].is_string());
            EXPECT_NE(c["code"], "?");
            EXPECT_TRUE(c["cause"].is_null() || c["cause"].is_string());
            EXPECT_TRUE(c["text"].is_string());
        }
    }
    EXPECT_TRUE(j["paths"][2]["reason_codes"].empty());
    ASSERT_TRUE(j["alternatives"].is_array());
    bool has_direct = false;
    for (const auto& a : j["alternatives"]) {
        EXPECT_TRUE(a["usable"].is_boolean());
        EXPECT_EQ(a["cause"].is_null(), a["usable"].get<bool>()) << a.dump();
        has_direct = has_direct || a["kind"] == "direct";
    }
    EXPECT_TRUE(has_direct);

    // The struct and the JSON say the same.
    ASSERT_EQ(r.paths.size(), 3u);
    EXPECT_EQ(r.paths[0].route.has_value(), true);
    EXPECT_EQ(std::string(to_string(*r.paths[0].route)), j["paths"][0]["verdict"].get<std::string>());
    EXPECT_FALSE(r.paths[2].route.has_value());
    EXPECT_EQ(r.cuda_available, j["cuda"]["available"].get<bool>());
    EXPECT_EQ(r.gds_available, j["gds"]["available"].get<bool>());
    EXPECT_EQ(r.summary, j["summary"].get<std::string>());

    // The text report ends with the plain-language verdict.
    auto pos = r.text.rfind("Verdict\n");
    ASSERT_NE(pos, std::string::npos);
    EXPECT_NE(r.text.find(r.summary, pos), std::string::npos);
}

// Without a GPU (or with every GPU hidden, so that this runs on GPU machines too).
TEST(DoctorReport, NoGpuIsReportedNotFatal) {
    scratch_dir dir(testing::build_dir());
    ASSERT_TRUE(dir.ok());
    std::string file = dir.write_file("x.bin", 4096);
    auto out = testing::run_shell("CUDA_VISIBLE_DEVICES= " + testing::quote(FERRY_CLI) + " doctor --json " +
                                  testing::quote(file) + " 2>/dev/null");
    ASSERT_EQ(out.status, 0);
    json j = json::parse(out.out);
    EXPECT_EQ(j["cuda"]["available"], false);
    EXPECT_TRUE(j["cuda"]["reason"].is_string());
    EXPECT_TRUE(j["cuda"]["devices"].empty());
    EXPECT_EQ(j["gds"]["available"], false);
    EXPECT_FALSE(j["gds"]["reasons"].empty());
    EXPECT_NE(j["paths"][0]["verdict"], "gds");
    std::string summary = j["summary"].get<std::string>();
    EXPECT_NE(summary.find("GPUDirect Storage: not available"), std::string::npos) << summary;
    EXPECT_NE(summary.find("To get GPUDirect Storage"), std::string::npos) << summary;
}

TEST(DoctorReport, StandardFdsUnchanged) {
    using shim::fd_identity;
    fd_identity before[3] = {fd_identity::of(0), fd_identity::of(1), fd_identity::of(2)};
    scratch_dir dir(testing::build_dir());
    ASSERT_TRUE(dir.ok());
    doctor_report r = run_doctor({{dir.path(), "/dev/shm", "/nonexistent/x"}, std::nullopt});
    for (int fd = 0; fd < 3; ++fd) EXPECT_EQ(fd_identity::of(fd), before[fd]) << "fd " << fd;
    EXPECT_EQ(json::parse(r.json)["std_fds"]["disturbed"], false);
}

TEST(DoctorReport, CorruptCufileJsonIsReported) {
    scratch_dir dir(testing::build_dir());
    ASSERT_TRUE(dir.ok());
    std::string bad = dir.path() + "/cufile.json";
    {
        FILE* f = std::fopen(bad.c_str(), "w");
        ASSERT_NE(f, nullptr);
        std::fputs("{ \"properties\": { \"allow_compat_mode\": tru", f);
        std::fclose(f);
    }
    scoped_env env("CUFILE_ENV_PATH_JSON", bad);
    doctor_report r = run_doctor({{dir.path()}, std::nullopt});
    json j = json::parse(r.json);
    const json& c = j["cufile"]["config"];
    EXPECT_EQ(c["path"], bad);
    EXPECT_EQ(c["source"], "CUFILE_ENV_PATH_JSON");
    EXPECT_EQ(c["exists"], true);
    EXPECT_EQ(c["valid"], false);
    EXPECT_NE(c["error"].get<std::string>().find("does not parse"), std::string::npos);
    bool named = false;
    for (const auto& reason : j["gds"]["reasons"])
        named |= reason.get<std::string>().find(bad) != std::string::npos;
    EXPECT_TRUE(named) << "gds.reasons names the broken cufile.json";
}

TEST(CufileConfig, CommentsAllowedAsCufileDoes) {
    scratch_dir dir(testing::build_dir());
    ASSERT_TRUE(dir.ok());
    std::string path = dir.path() + "/cufile.json";
    FILE* f = std::fopen(path.c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fputs("// comment line\n{\n  /* block */ \"properties\": {\n    // \"use_poll_mode\": true,\n"
               "    \"allow_compat_mode\": true, \"max_direct_io_size_kb\": 16384\n  },\n"
               "  \"denylist\": { \"filesystems\": [\"tmpfs\"] }\n}\n", f);
    std::fclose(f);
    json c = read_cufile_config(path, "test");
    EXPECT_EQ(c["valid"], true) << c.dump();
    EXPECT_EQ(c["settings"]["properties.allow_compat_mode"], true);
    EXPECT_EQ(c["settings"]["properties.max_direct_io_size_kb"], 16384);
    EXPECT_FALSE(c["settings"].contains("properties.use_poll_mode"));
    EXPECT_EQ(c["denylist"]["filesystems"][0], "tmpfs");
}

TEST(CufileConfig, MissingUnreadableAndFifoAreReported) {
    scratch_dir dir(testing::build_dir());
    ASSERT_TRUE(dir.ok());
    json missing = read_cufile_config(dir.path() + "/none.json", "test");
    EXPECT_EQ(missing["exists"], false);
    EXPECT_EQ(missing["valid"], false);
    json directory = read_cufile_config(dir.path(), "test");  // exists, but is no file
    EXPECT_EQ(directory["valid"], false);
    EXPECT_TRUE(directory["error"].is_string());
    std::string fifo = dir.path() + "/fifo.json";
    ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
    json f = read_cufile_config(fifo, "test");  // must not block waiting for a writer
    EXPECT_EQ(f["valid"], false);
}

TEST(DoctorReport, FifoPathHasNoVerdictAndDoesNotBlock) {
    scratch_dir dir(testing::build_dir());
    ASSERT_TRUE(dir.ok());
    std::string fifo = dir.path() + "/pipe";
    ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
    doctor_report r = run_doctor({{fifo}, std::nullopt});
    json j = json::parse(r.json);
    EXPECT_EQ(j["paths"][0]["type"], "fifo");
    EXPECT_TRUE(j["paths"][0]["verdict"].is_null());
    EXPECT_FALSE(j["paths"][0]["reasons"].empty());
}

TEST(DoctorReport, MissingCufileLibraryIsNotFatal) {
    settings s;
    s.cufile_library = "/nonexistent/libcufile.so.0";
    doctor_report r = run_doctor({{testing::build_dir()}, s});
    json j = json::parse(r.json);
    EXPECT_EQ(j["cufile"]["library"], "/nonexistent/libcufile.so.0");
    // cuFile loads once per process: where an earlier test loaded the real one, that one stays.
    // CliDoctor.MissingCufileLibraryIsReported checks a fresh process.
    if (j["cufile"]["available"] == false) {
        EXPECT_TRUE(j["cufile"]["error"].is_string());
        EXPECT_EQ(j["gds"]["available"], false);
        // The alternatives table says the same with its stable code.
        bool coded = false;
        for (const auto& a : j["alternatives"])
            if (a["kind"] == "cufile") coded = a["cause"] == "cufile_library_missing" && a["usable"] == false;
        EXPECT_TRUE(coded) << j["alternatives"].dump();
    }
    EXPECT_TRUE(known_verdict(j["paths"][0]["verdict"])) << j["paths"][0].dump();
}

TEST(DoctorReport, ExplicitSettingsAreUsed) {
    settings s;
    s.gds = gds_mode::off;
    s.threads = 3;
    doctor_report r = run_doctor({{}, s});
    json j = json::parse(r.json);
    EXPECT_EQ(j["settings"]["gds"], "off");
    EXPECT_EQ(j["settings"]["threads"], 3);
    EXPECT_EQ(j["gds"]["available"], false);
    bool named = false;
    for (const auto& reason : j["gds"]["reasons"])
        named |= reason.get<std::string>().find("FERRY_GDS=off") != std::string::npos;
    EXPECT_TRUE(named);
}

}  // namespace
}  // namespace ferry::doctor

namespace ferry::doctor {
namespace {

/// Whether docs/gds.md names `key` as code: `key`, `parent.key`, `key.child`, `key[]`.
bool documented(const std::string& doc, const std::string& key) {
    for (std::size_t pos = doc.find(key); pos != std::string::npos; pos = doc.find(key, pos + 1)) {
        char before = pos > 0 ? doc[pos - 1] : ' ';
        char after = pos + key.size() < doc.size() ? doc[pos + key.size()] : ' ';
        if ((before == '`' || before == '.') && (after == '`' || after == '.' || after == '['))
            return true;
    }
    return false;
}

void collect_undocumented(const nlohmann::json& j, const std::string& where, const std::string& doc,
                          std::vector<std::string>& missing) {
    if (j.is_array()) {
        for (const auto& e : j) collect_undocumented(e, where + "[]", doc, missing);
        return;
    }
    if (!j.is_object()) return;
    for (auto it = j.begin(); it != j.end(); ++it) {
        std::string path = where.empty() ? it.key() : where + "." + it.key();
        if (!documented(doc, it.key())) missing.push_back(path);
        // Keys chosen by the environment, not by the report.
        if (path == "cufile.environment") continue;
        collect_undocumented(it.value(), path, doc, missing);
    }
}

TEST(DoctorDocs, EveryJsonKeyIsDocumented) {
    auto doc = read_text(std::string(FERRY_SOURCE_DIR) + "/docs/gds.md");
    ASSERT_TRUE(doc.has_value()) << "docs/gds.md is missing";
    scratch_dir dir(testing::build_dir());
    ASSERT_TRUE(dir.ok());
    std::string file = dir.write_file("doc.bin", 1 << 16);
    doctor_report r = run_doctor({{file, dir.path(), "/dev/shm", "/nonexistent/x"}, std::nullopt});
    std::vector<std::string> missing;
    collect_undocumented(nlohmann::json::parse(r.json), "", *doc, missing);
    EXPECT_TRUE(missing.empty()) << "not in docs/gds.md: " << ::testing::PrintToString(missing);
}

}  // namespace
}  // namespace ferry::doctor
