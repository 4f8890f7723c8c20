// Every API that takes a path takes a URL: ferry::file, fromfile, load, info (C++) and the
// CLI, over http:// (nginx) and s3:// (moto), into host memory here and into GPU memory where
// there is a GPU. The bytes and checksums must equal those of the same file read locally.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>

#include "backend/registry.hpp"
#include "backend/remote_servers.hpp"
#include "ferry/checksum.hpp"
#include "ferry/doctor.hpp"
#include "ferry/error.hpp"
#include "ferry/file.hpp"
#include "ferry/formats.hpp"
#include "ferry/npy.hpp"
#include "ferry/raw.hpp"
#include "ferry/safetensors.hpp"

namespace ferry::test {
namespace {

std::string run_cli(const std::string& args, int* rc = nullptr) {
    std::string cmd = std::string(FERRY_CLI) + " " + args + " 2>&1";
    std::string out;
    FILE* p = ::popen(cmd.c_str(), "r");
    char buf[4096];
    while (std::size_t n = std::fread(buf, 1, sizeof buf, p)) out.append(buf, n);
    int status = ::pclose(p);
    if (rc) *rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    return out;
}

/// Sets environment variables for one scope and puts the old values back.
class scoped_env {
public:
    explicit scoped_env(std::map<std::string, std::string> vars) {
        for (auto& [k, v] : vars) {
            const char* old = std::getenv(k.c_str());
            saved_.emplace_back(k, old ? std::optional<std::string>(old) : std::nullopt);
            ::setenv(k.c_str(), v.c_str(), 1);
        }
    }
    ~scoped_env() {
        for (auto& [k, v] : saved_)
            if (v) ::setenv(k.c_str(), v->c_str(), 1);
            else ::unsetenv(k.c_str());
    }

private:
    std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

class remote_file_test : public ::testing::Test {
protected:
    static void SetUpTestSuite() {
        dir_ = new temp_dir();
        write_pattern_file(*dir_ / "raw.bin", 1 << 20, 21);
        array a = fromfile(*dir_ / "raw.bin", typed_order{dtype::float32}, -1, 0, {512, 512});
        save_npy(*dir_ / "a.npy", a);
        save_safetensors(*dir_ / "m.safetensors", {{"w", a}, {"b", fromfile(*dir_ / "raw.bin", typed_order{dtype::int16}, 100)}});
        server_ = new nginx_server(dir_->path());
    }
    static void TearDownTestSuite() {
        delete server_;
        delete dir_;
        server_ = nullptr;
        dir_ = nullptr;
    }
    static inline temp_dir* dir_ = nullptr;
    static inline nginx_server* server_ = nullptr;
};

TEST_F(remote_file_test, the_registry_knows_the_remote_schemes) {
    auto schemes = detail::registered_schemes();
    for (const char* s : {"http", "https", "s3"})
        EXPECT_NE(std::find(schemes.begin(), schemes.end(), s), schemes.end()) << s;
}

TEST_F(remote_file_test, a_file_opens_a_url) {
    ferry::file f(server_->url("raw.bin"));
    EXPECT_EQ(f.size(), 1u << 20);
    std::vector<std::uint8_t> got(1 << 20);
    f.read(got.data(), got.size(), 0);
    EXPECT_EQ(got, pattern(1 << 20, 0, 21));
    std::vector<std::uint8_t> tail(100);
    EXPECT_EQ(f.read_some(tail.data(), 100, (1 << 20) - 40), 40u);
}

TEST_F(remote_file_test, load_info_and_fromfile_take_urls) {
    for (const char* name : {"a.npy", "m.safetensors", "raw.bin"}) {
        SCOPED_TRACE(name);
        any_load_options o;
        if (std::string(name) == "raw.bin") o.raw_type = typed_order{dtype::uint8};  // headers give the rest
        loaded_file local = load_any(*dir_ / name, o);
        loaded_file remote = load_any(server_->url(name), o);
        ASSERT_EQ(local.arrays.size(), remote.arrays.size());
        for (std::size_t i = 0; i < local.arrays.size(); ++i)
            EXPECT_EQ(checksum(local.arrays[i].value), checksum(remote.arrays[i].value));
        EXPECT_EQ(describe_file(*dir_ / name).format, describe_file(server_->url(name)).format);
    }
    array r = fromfile(server_->url("raw.bin"), typed_order{dtype::float32}, 1000, 4096);
    EXPECT_EQ(checksum(r), checksum(fromfile(*dir_ / "raw.bin", typed_order{dtype::float32}, 1000, 4096)));
    EXPECT_EQ(read_npy_info(server_->url("a.npy")).data_bytes, 1u << 20);
}

TEST_F(remote_file_test, a_missing_url_is_a_remote_error) {
    EXPECT_THROW(load_any(server_->url("nope.npy")), remote_error);
}

TEST_F(remote_file_test, the_cli_takes_urls) {
    int rc = 0;
    std::string info = run_cli("info " + server_->url("m.safetensors"), &rc);
    EXPECT_EQ(rc, 0) << info;
    EXPECT_NE(info.find("safetensors"), std::string::npos) << info;
    std::string local = run_cli("load --device host --checksum --json " + *dir_ / "m.safetensors", &rc);
    ASSERT_EQ(rc, 0) << local;
    std::string remote = run_cli("load --device host --checksum --json " + server_->url("m.safetensors"), &rc);
    ASSERT_EQ(rc, 0) << remote;
    auto sums = [](const std::string& json) {
        std::vector<std::string> v;
        for (auto p = json.find("\"checksum\""); p != std::string::npos; p = json.find("\"checksum\"", p + 1))
            v.push_back(json.substr(p, json.find(',', p) - p));
        return v;
    };
    EXPECT_EQ(sums(local), sums(remote));
    EXPECT_FALSE(sums(local).empty());
    std::string bad = run_cli("info " + server_->url("nope.bin?X-Amz-Signature=s3cr3t"), &rc);
    EXPECT_NE(rc, 0);
    EXPECT_NE(bad.find("404"), std::string::npos) << bad;
    EXPECT_EQ(bad.find("s3cr3t"), std::string::npos) << bad;
}

TEST_F(remote_file_test, urls_load_into_gpu_memory) {
    FERRY_REQUIRE_GPU();
    for (const char* name : {"a.npy", "m.safetensors"}) {
        SCOPED_TRACE(name);
        any_load_options o;
        o.load.where = placement::cuda(0);
        loaded_file remote = load_any(server_->url(name), o);
        loaded_file local = load_any(*dir_ / name);
        for (std::size_t i = 0; i < local.arrays.size(); ++i)
            EXPECT_EQ(checksum(local.arrays[i].value), checksum(remote.arrays[i].value));
    }
}

TEST(remote_s3_file, a_safetensors_checkpoint_on_s3_loads_byte_exact) {
    moto_server server;
    temp_dir dir;
    write_pattern_file(dir / "raw.bin", 1 << 20, 8);
    save_safetensors(dir / "m.safetensors", {{"x", fromfile(dir / "raw.bin", typed_order{dtype::bfloat16})}});
    std::string admin = python() + " " + backend_test_dir() + "/moto_admin.py " + server.endpoint() + " ";
    ASSERT_EQ(std::system((admin + "create-bucket ckpt").c_str()), 0);
    ASSERT_EQ(std::system((admin + "put ckpt model/m.safetensors " + dir / "m.safetensors").c_str()), 0);
    scoped_env env({{"AWS_ENDPOINT_URL", server.endpoint()},
                    {"AWS_ACCESS_KEY_ID", "testing"},
                    {"AWS_SECRET_ACCESS_KEY", "testing"},
                    {"AWS_EC2_METADATA_DISABLED", "true"}});
    any_load_options o;
    o.load.where = cuda_device_count() > 0 ? placement::cuda(0) : placement::host();
    loaded_file remote = load_any("s3://ckpt/model/m.safetensors", o);
    loaded_file local = load_any(dir / "m.safetensors");
    ASSERT_EQ(remote.arrays.size(), 1u);
    EXPECT_EQ(checksum(remote.arrays[0].value), checksum(local.arrays[0].value));
    int rc = 0;
    std::string out = run_cli("info s3://ckpt/model/m.safetensors", &rc);
    EXPECT_EQ(rc, 0) << out;
    EXPECT_THROW(load_any("s3://ckpt/model/missing.safetensors"), remote_error);

    // Saves to s3:// are multipart uploads: the object appears whole, and loads back the same.
    save_safetensors("s3://ckpt/saved/m.safetensors", {{"x", local.arrays[0].value}});
    array f32 = fromfile(dir / "raw.bin", typed_order{dtype::float32});
    save_npy("s3://ckpt/saved/a.npy", f32);
    tofile(local.arrays[0].value, "s3://ckpt/saved/a.bin");
    EXPECT_EQ(checksum(load_any("s3://ckpt/saved/m.safetensors").arrays[0].value), checksum(local.arrays[0].value));
    EXPECT_EQ(checksum(load_npy("s3://ckpt/saved/a.npy")), checksum(f32));
    EXPECT_EQ(ferry::file("s3://ckpt/saved/a.bin").size(), local.arrays[0].value.nbytes());
    EXPECT_THROW(save_npy("https://127.0.0.1:1/a.npy", f32), usage_error);

    // The doctor on the prefix: the bucket answers, the environment's keys signed, a probe ran.
    doctor_options d;
    d.paths = {"s3://ckpt/model/", "s3://ckpt/empty/"};
    doctor_report report = run_doctor(d);
    ASSERT_EQ(report.paths.size(), 2u);
    EXPECT_EQ(report.paths[0].route, io_path::staged);
    EXPECT_NE(report.json.find("\"credentials\": \"environment\""), std::string::npos) << report.json;
    EXPECT_NE(report.json.find("planned_gbps"), std::string::npos);
    EXPECT_NE(report.json.find("\"region\": \"us-east-1\""), std::string::npos);
    EXPECT_NE(report.json.find("\"objects\": 0"), std::string::npos);
    EXPECT_EQ(report.json.find("testing:testing"), std::string::npos);
    EXPECT_NE(report.text.find("Remote s3://ckpt/model/"), std::string::npos) << report.text;
}

TEST_F(remote_file_test, the_doctor_probes_a_url) {
    doctor_options d;
    d.paths = {server_->url("raw.bin"), server_->url("nope.bin?token=s3cr3t")};
    doctor_report report = run_doctor(d);
    ASSERT_EQ(report.paths.size(), 2u);
    EXPECT_EQ(report.paths[0].route, io_path::staged);
    EXPECT_FALSE(report.paths[1].route);
    EXPECT_NE(report.json.find("latency_ms"), std::string::npos);
    EXPECT_NE(report.json.find("one_connection_gbps"), std::string::npos);
    EXPECT_EQ(report.json.find("s3cr3t"), std::string::npos);
    EXPECT_EQ(report.text.find("s3cr3t"), std::string::npos);
    int rc = 0;
    std::string out = run_cli("doctor " + server_->url("raw.bin"), &rc);
    EXPECT_NE(out.find("throughput"), std::string::npos) << out;
    EXPECT_NE(out.find("ranged GETs"), std::string::npos) << out;
}

}  // namespace
}  // namespace ferry::test
