// Every API that takes a path takes a URL: ferry::file, fromfile, load, info, checkpoints (C++)
// and the CLI, over http:// (nginx) and s3:// (moto), into host memory here and into GPU memory
// where there is a GPU. The bytes and checksums must equal those of the same file read locally.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "backend/registry.hpp"
#include "backend/remote_servers.hpp"
#include "backend/s3/credential_provider.hpp"
#include "ferry/checkpoint.hpp"
#include "ferry/checksum.hpp"
#include "ferry/doctor.hpp"
#include "ferry/error.hpp"
#include "ferry/file.hpp"
#include "ferry/formats.hpp"
#include "ferry/memory.hpp"
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
        save_checkpoint(*dir_ / "ckpt", checkpoint_tensors(), 200000);
        write_pattern_file(*dir_ / "big.bin", (9u << 20) + 123, 5);
        if (nginx_missing().empty()) server_ = new nginx_server(dir_->path());
    }
    void SetUp() override { FERRY_NEED_SERVER(nginx_missing()); }
    static void TearDownTestSuite() {
        delete server_;
        delete dir_;
        server_ = nullptr;
        dir_ = nullptr;
    }
    // Tensors of a few shards, some big enough that a read into GPU memory spans several
    // staging buffers and several ranged GETs.
    static std::vector<named_array> checkpoint_tensors() {
        std::vector<named_array> v;
        for (int i = 0; i < 4; ++i) {
            array w = fromfile(*dir_ / "raw.bin", typed_order{dtype::float32}, 64 * 512, i * 1024, {64, 512});
            v.push_back({"layer." + std::to_string(i) + ".w", w});
            v.push_back({"layer." + std::to_string(i) + ".b", fromfile(*dir_ / "raw.bin", typed_order{dtype::int16}, 77, i * 99)});
        }
        return v;
    }
    static inline temp_dir* dir_ = nullptr;
    static inline nginx_server* server_ = nullptr;
};

bool same_tensors(const checkpoint_load& a, const checkpoint_load& b) {
    if (a.tensors.size() != b.tensors.size()) return false;
    for (std::size_t i = 0; i < a.tensors.size(); ++i)
        if (a.tensors[i].name != b.tensors[i].name || checksum(a.tensors[i].value) != checksum(b.tensors[i].value))
            return false;
    return true;
}

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

TEST_F(remote_file_test, checkpoints_under_an_http_prefix) {
    checkpoint_load local = load_checkpoint(open_checkpoint(*dir_ / "ckpt"));
    for (std::string src : {server_->url("ckpt/"), server_->url("ckpt"), server_->url("ckpt/model.safetensors.index.json"),
                            server_->url("ckpt/?X-Amz-Signature=s3cr3t")}) {
        SCOPED_TRACE(src);
        checkpoint c = open_checkpoint(src);
        EXPECT_GE(c.shards.size(), 3u);
        for (const auto& sh : c.shards) EXPECT_EQ(sh.version.rfind("ETag ", 0), 0u) << sh.version;
        checkpoint_load remote = load_checkpoint(c);
        EXPECT_TRUE(same_tensors(local, remote));
        EXPECT_EQ(remote.stats.bytes_read, local.stats.bytes_read);
    }
    // A tensor-parallel slice along dim 1 of a remote shard is read as a span (one request),
    // never as 64 ranged GETs of 1 KiB.
    checkpoint_load_options o;
    o.select = {tensor_selection::kind::names, {"layer.1.w"}};
    o.slices["layer.1.w"] = tensor_slice::split(1, 2, 1);
    checkpoint_load sliced = load_checkpoint(open_checkpoint(server_->url("ckpt/")), o);
    ASSERT_EQ(sliced.plan.tensors.size(), 1u);
    EXPECT_EQ(sliced.plan.tensors[0].route, read_route::span) << sliced.plan.tensors[0].reason;
    checkpoint_load sliced_local = load_checkpoint(open_checkpoint(*dir_ / "ckpt"), o);
    EXPECT_TRUE(same_tensors(sliced, sliced_local));
}

TEST_F(remote_file_test, a_shard_replaced_after_open_is_refused) {
    temp_dir www;
    save_checkpoint(www.path(), checkpoint_tensors(), 200000);
    nginx_server server(www.path());
    checkpoint c = open_checkpoint(server.url(""));
    // Same size, new bytes (nginx's ETag is its size and modification time).
    std::string shard = www / std::filesystem::path(c.shards[0].path).filename().string();
    auto bytes = read_whole(shard);
    bytes.back() ^= 1;
    std::filesystem::remove(shard);
    std::this_thread::sleep_for(std::chrono::milliseconds(1100));
    std::ofstream(shard, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    try {
        load_checkpoint(c);
        FAIL() << "loaded a shard that changed after its header was read";
    } catch (const checkpoint_changed_error& e) {
        EXPECT_NE(std::string(e.what()).find("since its header was read"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find(server.url("")), std::string::npos) << e.what();
    }
}

TEST_F(remote_file_test, the_cli_takes_checkpoint_urls) {
    int rc = 0;
    std::string out = run_cli("info " + server_->url("ckpt/?token=s3cr3t") + " --json", &rc);
    ASSERT_EQ(rc, 0) << out;
    auto j = nlohmann::json::parse(out);
    EXPECT_EQ(j["format"], "checkpoint");
    EXPECT_EQ(j["tensors"].size(), 8u);
    EXPECT_EQ(out.find("s3cr3t"), std::string::npos) << out;
    out = run_cli("load " + server_->url("ckpt/") + " --device host --slice layer.0.w:1:0:256 --tensor 'layer.0.*' --json", &rc);
    ASSERT_EQ(rc, 0) << out;
    j = nlohmann::json::parse(out);
    EXPECT_EQ(j["arrays"].size(), 2u);
    for (const auto& a : j["arrays"])
        if (a["name"] == "layer.0.w") EXPECT_EQ(a["shape"], nlohmann::json::array({64, 256}));
    // A single object with a slice is a checkpoint of one shard; a raw object stays a file.
    out = run_cli("load " + server_->url("m.safetensors") + " --device host --tensor w --slice w:0:0:2 --json", &rc);
    ASSERT_EQ(rc, 0) << out;
    j = nlohmann::json::parse(out);
    ASSERT_EQ(j["arrays"].size(), 1u);
    EXPECT_EQ(j["arrays"][0]["shape"], nlohmann::json::array({2, 512}));
    out = run_cli("info " + server_->url("raw.bin"), &rc);
    EXPECT_EQ(rc, 0) << out;
    EXPECT_EQ(out.find("checkpoint"), std::string::npos) << out;
}

TEST_F(remote_file_test, remote_checkpoints_load_into_gpu_memory) {
    FERRY_REQUIRE_GPU();
    checkpoint_load local = load_checkpoint(open_checkpoint(*dir_ / "ckpt"));
    checkpoint_load_options o;
    o.where = placement::cuda(0);
    checkpoint_load remote = load_checkpoint(open_checkpoint(server_->url("ckpt/")), o);
    EXPECT_TRUE(same_tensors(local, remote));
    // A large object through the streaming staged path: more than one staging buffer per range,
    // ranges that straddle buffers, a tail shorter than a buffer.
    settings s = settings::global();
    s.threads = 2;
    s.remote_range_size = (3u << 20) + 4096;
    s.staging_buffer_size = 320u << 10;
    ferry::file f(server_->url("big.bin"), open_mode::read, s);
    device_buffer dev(f.size());
    f.read(dev.data(), f.size(), 0);
    std::vector<std::uint8_t> back(f.size());
    copy_memory(back.data(), dev.data(), back.size());
    EXPECT_EQ(back, read_whole(*dir_ / "big.bin"));
    io_stats st = f.stats();
    EXPECT_EQ(st.reads(io_path::staged).bytes, f.size());
}

TEST(remote_s3_file, a_safetensors_checkpoint_on_s3_loads_byte_exact) {
    FERRY_NEED_SERVER(moto_missing());
    moto_server server;
    temp_dir dir;
    write_pattern_file(dir / "raw.bin", 1 << 20, 8);
    save_safetensors(dir / "m.safetensors", {{"x", fromfile(dir / "raw.bin", typed_order{dtype::bfloat16})}});
    std::string admin = python() + " " + backend_test_dir() + "/s3/moto_admin.py " + server.endpoint() + " ";
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
    EXPECT_EQ(report.paths[0].route, cuda_device_count() > 0 ? io_path::staged : io_path::host) << report.text;
    EXPECT_NE(report.json.find("\"credentials\": \"environment\""), std::string::npos) << report.json;
    EXPECT_NE(report.json.find("planned_gbps"), std::string::npos);
    EXPECT_NE(report.json.find("\"region\": \"us-east-1\""), std::string::npos);
    EXPECT_NE(report.json.find("\"objects\": 0"), std::string::npos);
    EXPECT_EQ(report.json.find("testing:testing"), std::string::npos);
    EXPECT_NE(report.text.find("Remote s3://ckpt/model/"), std::string::npos) << report.text;

    // A checkpoint saved under a prefix (multipart uploads, index last), found by its index and,
    // without one, by listing the prefix; the CLI and the doctor take the prefix too.
    std::vector<named_array> tensors;
    for (int i = 0; i < 3; ++i)
        tensors.push_back({"t" + std::to_string(i), fromfile(dir / "raw.bin", typed_order{dtype::float32}, 40000, i * 4)});
    std::vector<std::string> written = save_checkpoint("s3://ckpt/ck/", tensors, 200000);
    ASSERT_EQ(written.size(), 4u);
    EXPECT_EQ(written.back(), "s3://ckpt/ck/model.safetensors.index.json");
    checkpoint c = open_checkpoint("s3://ckpt/ck");
    EXPECT_EQ(c.index_path, "s3://ckpt/ck/model.safetensors.index.json");
    checkpoint_load back = load_checkpoint(c);
    ASSERT_EQ(back.tensors.size(), 3u);
    for (std::size_t i = 0; i < 3; ++i) EXPECT_EQ(checksum(back.tensors[i].value), checksum(tensors[i].value));
    for (std::size_t i = 0; i + 1 < written.size(); ++i)
        save_safetensors("s3://ckpt/listed/" + written[i].substr(written[i].rfind('/') + 1),
                         {{tensors[i].name, tensors[i].value}});
    checkpoint listed = open_checkpoint("s3://ckpt/listed/");
    EXPECT_TRUE(listed.index_path.empty());
    EXPECT_EQ(listed.shards.size(), 3u);
    EXPECT_TRUE(same_tensors(load_checkpoint(listed), back));
    out = run_cli("info s3://ckpt/ck/", &rc);
    EXPECT_EQ(rc, 0) << out;
    EXPECT_NE(out.find("checkpoint, 3 shards, 3 tensors"), std::string::npos) << out;
    out = run_cli("load s3://ckpt/ck --device host --tensor t1 --slice t1:0:10:20 --json", &rc);
    EXPECT_EQ(rc, 0) << out;
    EXPECT_NE(out.find("\"bytes\": 40"), std::string::npos) << out;
    d.paths = {"s3://ckpt/ck/"};
    report = run_doctor(d);
    EXPECT_NE(report.text.find("model.safetensors.index.json and 3 shards"), std::string::npos) << report.text;
    // A missing shard named by the index: the index's error, naming the tensor and the URL.
    std::ofstream(dir / "index.json") << R"({"weight_map": {"x": "gone.safetensors"}})";
    ASSERT_EQ(std::system((admin + "put ckpt broken/model.safetensors.index.json " + dir / "index.json").c_str()), 0);
    try {
        open_checkpoint("s3://ckpt/broken/");
        FAIL() << "opened a checkpoint whose shard is missing";
    } catch (const checkpoint_error& e) {
        EXPECT_EQ(e.tensor(), "x");
        EXPECT_NE(std::string(e.what()).find("s3://ckpt/broken/gone.safetensors, which does not exist"), std::string::npos)
            << e.what();
    }
}

// An assume-role profile against moto's STS: the role's temporary credentials sign the reads,
// and the doctor names the link (profile, role, source profile), never a key.
TEST(remote_s3_file, an_assume_role_profile_reads_and_the_doctor_names_it) {
    FERRY_NEED_SERVER(moto_missing());
    moto_server server;
    temp_dir dir;
    write_pattern_file(dir / "raw.bin", 100000, 4);
    std::string admin = python() + " " + backend_test_dir() + "/s3/moto_admin.py " + server.endpoint() + " ";
    ASSERT_EQ(std::system((admin + "create-bucket roles").c_str()), 0);
    ASSERT_EQ(std::system((admin + "put roles a/raw.bin " + dir / "raw.bin").c_str()), 0);
    std::filesystem::create_directories(dir / ".aws");
    std::ofstream(dir / ".aws/credentials") << "[base]\naws_access_key_id = AKIABASEKEY\naws_secret_access_key = base-secret\n";
    std::ofstream(dir / ".aws/config") << "[profile dev]\nrole_arn = arn:aws:iam::123456789012:role/reader\n"
                                         "source_profile = base\nduration_seconds = 900\n";
    detail::forget_shared_aws_signers();
    scoped_env env({{"HOME", dir.path()}, {"AWS_PROFILE", "dev"}, {"AWS_ENDPOINT_URL", server.endpoint()},
                    {"AWS_EC2_METADATA_DISABLED", "true"}});
    ferry::file f("s3://roles/a/raw.bin");
    std::vector<std::uint8_t> got(100000);
    f.read(got.data(), got.size(), 0);
    EXPECT_EQ(got, pattern(100000, 0, 4));
    doctor_options d;
    d.paths = {"s3://roles/a/raw.bin"};
    doctor_report report = run_doctor(d);
    EXPECT_NE(report.text.find("profile dev: role arn:aws:iam::123456789012:role/reader assumed with profile base"),
              std::string::npos)
        << report.text;
    EXPECT_NE(report.json.find("credentials_expire"), std::string::npos) << report.json;
    EXPECT_NE(report.text.find("renewed from the same link"), std::string::npos) << report.text;
    EXPECT_EQ(report.json.find("base-secret"), std::string::npos);
    EXPECT_EQ(report.json.find("AKIABASEKEY"), std::string::npos);
    detail::forget_shared_aws_signers();
}

TEST_F(remote_file_test, the_doctor_probes_a_url) {
    doctor_options d;
    d.paths = {server_->url("raw.bin"), server_->url("nope.bin?token=s3cr3t")};
    doctor_report report = run_doctor(d);
    ASSERT_EQ(report.paths.size(), 2u);
    EXPECT_EQ(report.paths[0].route, cuda_device_count() > 0 ? io_path::staged : io_path::host) << report.text;
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

// The doctor and the engine decide from the same planner: the doctor's verdict for a URL is the
// route a `ferry load` of it takes (into GPU memory, or host memory without a GPU).
TEST_F(remote_file_test, the_doctors_verdict_is_the_route_a_load_takes) {
    const std::string url = server_->url("raw.bin");
    doctor_options d;
    d.paths = {url};
    doctor_report report = run_doctor(d);
    ASSERT_EQ(report.paths.size(), 1u);
    ASSERT_TRUE(report.paths[0].route) << report.text;
    const std::string verdict(to_string(*report.paths[0].route));
    int rc = 0;
    std::string out = run_cli("load --json " + url, &rc);
    ASSERT_EQ(rc, 0) << out;
    auto j = nlohmann::json::parse(out.substr(out.find('{')));
    // All of the payload on the doctor's route (the format's sniff of the first bytes adds a few).
    EXPECT_GE(j["io"].value(verdict, std::uint64_t(0)), std::uint64_t(1) << 20) << "doctor: " << verdict << "; load: " << out;
    // The sniff reads its few bytes into host memory whatever the destination: only routes that
    // carried payload must be the doctor's.
    for (const auto& [route, bytes] : j["io"].items())
        if (route != "fallbacks" && route != "routes" && bytes.get<std::uint64_t>() >= 4096)
            EXPECT_EQ(route, verdict) << out;
    if (cuda_device_count() == 0) {
        EXPECT_EQ(verdict, "host");
        EXPECT_EQ(report.text.find("copied to the GPU"), std::string::npos) << report.text;
        EXPECT_NE(report.text.find("no GPU"), std::string::npos) << report.text;
    }
}

}  // namespace
}  // namespace ferry::test
