// The S3 source and the multipart writer against moto's S3 server on 127.0.0.1: buckets, ranged
// GETs, multipart upload, errors; and SigV4 signing checked by moto's own signature
// verification (switched on with its reset-auth call), which recomputes each signature with
// botocore from the request it received.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <thread>

#include "backend/remote_servers.hpp"
#include "backend/s3/credential_provider.hpp"
#include "backend/s3/s3_bucket.hpp"
#include "backend/s3/s3_object_writer.hpp"
#include "backend/s3/s3_source.hpp"
#include "ferry/checkpoint.hpp"
#include "ferry/error.hpp"

namespace ferry::test {
namespace {

std::string run(const std::string& cmd) {
    std::string out;
    FILE* p = ::popen(cmd.c_str(), "r");
    if (!p) throw std::runtime_error("popen failed: " + cmd);
    char buf[4096];
    while (std::size_t n = std::fread(buf, 1, sizeof buf, p)) out.append(buf, n);
    int rc = ::pclose(p);
    if (rc != 0) throw std::runtime_error("failed (" + std::to_string(rc) + "): " + cmd + "\n" + out);
    while (!out.empty() && out.back() == '\n') out.pop_back();
    return out;
}

/// Sets process environment variables for one scope (open_checkpoint reads the process's).
class process_env {
public:
    explicit process_env(std::map<std::string, std::string> vars) {
        for (auto& [k, v] : vars) {
            const char* old = std::getenv(k.c_str());
            saved_.emplace_back(k, old ? std::optional<std::string>(old) : std::nullopt);
            ::setenv(k.c_str(), v.c_str(), 1);
        }
    }
    ~process_env() {
        for (auto& [k, v] : saved_)
            if (v) ::setenv(k.c_str(), v->c_str(), 1);
            else ::unsetenv(k.c_str());
    }

private:
    std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

class moto_test : public ::testing::Test {
protected:
    static void SetUpTestSuite() {
        if (!moto_missing().empty()) return;
        server_ = new moto_server();
        dir_ = new temp_dir();
        write_pattern_file(*dir_ / "object.bin", size_, 11);
        admin("create-bucket data");
        admin("put data dir/object.bin " + *dir_ / "object.bin");
    }
    void SetUp() override { FERRY_NEED_SERVER(moto_missing()); }
    static void TearDownTestSuite() {
        delete server_;
        delete dir_;
        server_ = nullptr;
        dir_ = nullptr;
    }
    static std::string admin(const std::string& args) {
        return run(python() + " " + backend_test_dir() + "/s3/moto_admin.py " + server_->endpoint() + " " + args);
    }
    std::map<std::string, std::string> env_vars() const {
        return {{"HOME", dir_->path()},
                {"AWS_EC2_METADATA_DISABLED", "true"},
                {"AWS_ACCESS_KEY_ID", "testing"},
                {"AWS_SECRET_ACCESS_KEY", "testing"},
                {"AWS_ENDPOINT_URL", server_->endpoint()}};
    }
    std::unique_ptr<detail::source> open(const std::string& url, open_mode mode = open_mode::read,
                                         std::map<std::string, std::string> extra = {}, detail::s3_options o = {}) {
        auto vars = env_vars();
        for (auto& [k, v] : extra) vars[k] = v;
        auto env = [vars](const std::string& n) -> std::optional<std::string> {
            auto it = vars.find(n);
            if (it == vars.end()) return std::nullopt;
            return it->second;
        };
        settings s;
        s.remote_retry_delay_ms = 5;
        s.remote_retries = 3;
        return detail::open_s3_object(detail::location(url), mode, s, o, env);
    }
    static inline moto_server* server_ = nullptr;
    static inline temp_dir* dir_ = nullptr;
    static constexpr std::size_t size_ = (3u << 20) + 4321;
};

TEST_F(moto_test, ranged_reads_are_byte_exact) {
    auto src = open("s3://data/dir/object.bin");
    EXPECT_EQ(src->kind(), "s3");
    EXPECT_EQ(src->location(), "s3://data/dir/object.bin");
    ASSERT_EQ(src->size(), size_);
    auto expect = pattern(size_, 0, 11);
    std::vector<std::uint8_t> got(size_);
    std::vector<std::thread> threads;
    constexpr std::size_t chunk = 1 << 20;
    for (std::size_t off = 0; off < size_; off += chunk)
        threads.emplace_back([&, off] {
            src->read(reinterpret_cast<char*>(got.data()) + off, std::min(chunk, size_ - off), off, {});
        });
    for (auto& t : threads) t.join();
    EXPECT_EQ(got, expect);
    std::vector<char> small(7);
    src->read(small.data(), 7, 1000001, {});
    EXPECT_EQ(0, std::memcmp(small.data(), expect.data() + 1000001, 7));
}

TEST_F(moto_test, a_missing_key_is_404_naming_the_location_and_credentials) {
    try {
        open("s3://data/nope.bin");
        FAIL() << "opened";
    } catch (const remote_error& e) {
        EXPECT_EQ(e.status(), 404);
        EXPECT_EQ(e.url(), "s3://data/nope.bin");
        EXPECT_EQ(e.credentials(), "environment");
        EXPECT_NE(std::string(e.what()).find("s3://data/nope.bin"), std::string::npos) << e.what();
        EXPECT_EQ(std::string(e.what()).find("testing:"), std::string::npos) << e.what();
    }
}

TEST_F(moto_test, a_missing_bucket_is_an_error) {
    try {
        open("s3://no-such-bucket/x.bin", open_mode::write);
        FAIL() << "opened";
    } catch (const remote_error& e) {
        EXPECT_EQ(e.status(), 404);
        EXPECT_NE(std::string(e.what()).find("NoSuchBucket"), std::string::npos) << e.what();
    }
}

TEST_F(moto_test, virtual_host_addressing_reaches_the_bucket) {
    // *.localhost resolves to the loopback address (RFC 6761), and moto reads the bucket from the
    // Host header: bucket "data" at data.s3.localhost.
    std::string endpoint = "http://s3.localhost:" + std::to_string(server_->port());
    auto vars = env_vars();
    vars["AWS_ENDPOINT_URL"] = endpoint;
    auto env = [vars](const std::string& n) -> std::optional<std::string> {
        auto it = vars.find(n);
        if (it == vars.end()) return std::nullopt;
        return it->second;
    };
    settings s;
    s.s3_addressing = "virtual";
    auto src = detail::open_s3_object(detail::location("s3://data/dir/object.bin"), open_mode::read, s, {}, env);
    auto& s3 = dynamic_cast<detail::s3_source&>(*src);
    EXPECT_FALSE(s3.where().path_style);
    EXPECT_EQ(s3.where().object_url, "http://data.s3.localhost:" + std::to_string(server_->port()) + "/dir/object.bin");
    std::vector<char> got(4096);
    src->read(got.data(), got.size(), 100, {});
    EXPECT_EQ(0, std::memcmp(got.data(), pattern(4096, 100, 11).data(), got.size()));
}

TEST_F(moto_test, multipart_upload_makes_the_object_whole) {
    auto w = open("s3://data/out/whole.bin", open_mode::write);
    auto& writer = dynamic_cast<detail::s3_object_writer&>(*w);
    const std::size_t n = 2 * writer.part_size() + 12345;
    auto bytes = pattern(n, 0, 5);
    // Parallel writers at scattered offsets, as the engine's tasks write.
    std::vector<std::thread> threads;
    constexpr std::size_t chunk = 3 << 20;
    for (std::size_t off = 0; off < n; off += chunk)
        threads.emplace_back([&, off] {
            w->write(reinterpret_cast<const char*>(bytes.data()) + off, std::min(chunk, n - off), off, {});
        });
    for (auto& t : threads) t.join();
    EXPECT_EQ(admin("exists data out/whole.bin"), "no");  // not before sync()
    w->sync();
    w->close();
    EXPECT_EQ(admin("exists data out/whole.bin"), "yes");
    admin("get data out/whole.bin " + *dir_ / "whole.bin");
    EXPECT_EQ(read_whole(*dir_ / "whole.bin"), bytes);
    EXPECT_EQ(admin("uploads data"), "0");
    // And ferry reads back what it wrote.
    auto r = open("s3://data/out/whole.bin");
    EXPECT_EQ(r->size(), n);
}

TEST_F(moto_test, an_abandoned_upload_leaves_nothing) {
    {
        // Closed without sync(): as a ferry::file's destructor closes after an exception.
        auto w = open("s3://data/out/closed.bin", open_mode::write);
        auto bytes = pattern(100, 0, 1);
        w->write(reinterpret_cast<const char*>(bytes.data()), bytes.size(), 0, {});
        w->close();
    }
    EXPECT_EQ(admin("exists data out/closed.bin"), "no");
    {
        auto w = open("s3://data/out/abandoned.bin", open_mode::write);
        auto bytes = pattern(100, 0, 1);
        w->write(reinterpret_cast<const char*>(bytes.data()), bytes.size(), 0, {});
        // no sync(): the writer aborts the upload
    }
    EXPECT_EQ(admin("exists data out/abandoned.bin"), "no");
    EXPECT_EQ(admin("uploads data"), "0");
    {
        auto w = open("s3://data/out/holey.bin", open_mode::write);
        auto bytes = pattern(100, 0, 1);
        w->write(reinterpret_cast<const char*>(bytes.data()), 50, 0, {});
        w->write(reinterpret_cast<const char*>(bytes.data()), 10, 90, {});
        EXPECT_THROW(w->sync(), usage_error);  // bytes [50, 90) never written
    }
    EXPECT_EQ(admin("exists data out/holey.bin"), "no");
    EXPECT_EQ(admin("uploads data"), "0");
}

TEST_F(moto_test, small_and_empty_objects) {
    for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{1000}}) {
        std::string key = "out/small-" + std::to_string(n);
        auto bytes = pattern(n, 0, 2);
        {
            auto w = open("s3://data/" + key, open_mode::write);
            if (n) w->write(reinterpret_cast<const char*>(bytes.data()), n, 0, {});
            w->sync();
        }
        auto r = open("s3://data/" + key);
        ASSERT_EQ(r->size(), n);
        std::vector<std::uint8_t> got(n);
        if (n) r->read(reinterpret_cast<char*>(got.data()), n, 0, {});
        EXPECT_EQ(got, bytes);
    }
}

// Signatures: a fresh moto with its signature checks on. Right keys read; a wrong secret is 403.
TEST(moto_auth, sigv4_signatures_verify) {
    FERRY_NEED_SERVER(moto_missing());
    moto_server server;
    auto admin = [&](const std::string& args) {
        return run(python() + " " + backend_test_dir() + "/s3/moto_admin.py " + server.endpoint() + " " + args);
    };
    temp_dir dir;
    write_pattern_file(dir / "o.bin", 100000, 9);
    std::string key_line = admin("make-key");
    ASSERT_EQ(key_line.rfind("KEY ", 0), 0u) << key_line;
    std::string id = key_line.substr(4, key_line.find(' ', 4) - 4), secret = key_line.substr(key_line.rfind(' ') + 1);
    std::string reader_line = admin("make-reader");
    ASSERT_EQ(reader_line.rfind("KEY ", 0), 0u) << reader_line;
    std::string reader_id = reader_line.substr(4, reader_line.find(' ', 4) - 4),
                reader_secret = reader_line.substr(reader_line.rfind(' ') + 1);
    std::string role_line = admin("make-role reader");
    ASSERT_EQ(role_line.rfind("ROLE ", 0), 0u) << role_line;
    std::string role_arn = role_line.substr(5);
    admin("create-bucket signed");
    admin("put signed a/o.bin " + dir / "o.bin");
    {
        std::vector<named_array> t;
        for (int i = 0; i < 3; ++i) {
            array a(dtype::int32, {5000});
            std::memcpy(a.data(), pattern(a.nbytes(), static_cast<std::uint64_t>(i), 6).data(), a.nbytes());
            t.push_back({"t" + std::to_string(i), a});
        }
        for (const auto& f : save_checkpoint(dir / "ck", t, 30000))
            admin("put signed ck/" + std::filesystem::path(f).filename().string() + " " + f);
    }
    admin("enable-auth");

    auto open_with = [&](const std::string& url, const std::string& sec, open_mode mode = open_mode::read) {
        std::map<std::string, std::string> vars = {{"HOME", dir.path()},           {"AWS_EC2_METADATA_DISABLED", "true"},
                                                   {"AWS_ACCESS_KEY_ID", id},      {"AWS_SECRET_ACCESS_KEY", sec},
                                                   {"AWS_ENDPOINT_URL", server.endpoint()}};
        auto env = [vars](const std::string& n) -> std::optional<std::string> {
            auto it = vars.find(n);
            if (it == vars.end()) return std::nullopt;
            return it->second;
        };
        settings s;
        s.remote_retries = 1;
        s.remote_retry_delay_ms = 1;
        return detail::open_s3_object(detail::location(url), mode, s, {}, env);
    };
    auto src = open_with("s3://signed/a/o.bin", secret);
    std::vector<char> got(1000);
    src->read(got.data(), got.size(), 500, {});
    EXPECT_EQ(0, std::memcmp(got.data(), pattern(1000, 500, 9).data(), got.size()));

    // A signed multipart upload: POST ?uploads=, PUT ?partNumber&uploadId, POST ?uploadId.
    {
        auto w = open_with("s3://signed/a/new.bin", secret, open_mode::write);
        auto bytes = pattern(5000, 0, 4);
        w->write(reinterpret_cast<const char*>(bytes.data()), bytes.size(), 0, {});
        w->sync();
        auto r = open_with("s3://signed/a/new.bin", secret);
        EXPECT_EQ(r->size(), 5000u);
    }

    try {
        open_with("s3://signed/a/o.bin", "wrong-secret");
        FAIL() << "a wrong secret was accepted: the signature is not checked";
    } catch (const remote_error& e) {
        EXPECT_EQ(e.status(), 403);
        EXPECT_EQ(std::string(e.what()).find("wrong-secret"), std::string::npos) << e.what();
    }

    // Assume-role: STS AssumeRole signed with the user's key (moto checks that signature too),
    // then the role's temporary key and session token sign the reads.
    std::filesystem::create_directories(dir / ".aws");
    std::ofstream(dir / ".aws/credentials") << "[base]\naws_access_key_id = " << id << "\naws_secret_access_key = " << secret << "\n";
    std::ofstream(dir / ".aws/config") << "[profile dev]\nrole_arn = " << role_arn << "\nsource_profile = base\n";
    detail::forget_shared_aws_signers();
    std::map<std::string, std::string> role_vars = {{"HOME", dir.path()}, {"AWS_EC2_METADATA_DISABLED", "true"},
                                                    {"AWS_PROFILE", "dev"}, {"AWS_ENDPOINT_URL", server.endpoint()}};
    auto role_env = [role_vars](const std::string& n) -> std::optional<std::string> {
        auto it = role_vars.find(n);
        if (it == role_vars.end()) return std::nullopt;
        return it->second;
    };
    settings s;
    s.remote_retries = 1;
    auto assumed = detail::open_s3_object(detail::location("s3://signed/a/o.bin"), open_mode::read, s, {}, role_env);
    auto& as_s3 = dynamic_cast<detail::s3_source&>(*assumed);
    EXPECT_EQ(as_s3.where().credentials.access_key.rfind("ASIA", 0), 0u);
    EXPECT_FALSE(as_s3.where().credentials.session_token.empty());
    EXPECT_NE(as_s3.where().credentials.source.find("role " + role_arn + " assumed with profile base"), std::string::npos)
        << as_s3.where().credentials.source;
    assumed->read(got.data(), got.size(), 500, {});
    EXPECT_EQ(0, std::memcmp(got.data(), pattern(1000, 500, 9).data(), got.size()));
    // The base key with a wrong secret: STS refuses the AssumeRole signature, naming the link.
    std::ofstream(dir / ".aws/credentials") << "[base]\naws_access_key_id = " << id << "\naws_secret_access_key = nope\n";
    try {
        detail::open_s3_object(detail::location("s3://signed/a/o.bin"), open_mode::read, s, {}, role_env);
        FAIL() << "AssumeRole with a wrong signature was accepted";
    } catch (const remote_error& e) {
        EXPECT_EQ(e.status(), 403) << e.what();
        EXPECT_NE(std::string(e.what()).find("AssumeRole failed"), std::string::npos) << e.what();
        EXPECT_NE(e.credentials().find("profile dev: role"), std::string::npos) << e.credentials();
    }
    detail::forget_shared_aws_signers();

    // A checkpoint read with a key that may get objects but not list the bucket: the listing's
    // 403 sends open_checkpoint to the prefix's index, which names the shards. With a wrong
    // secret the index is refused: a RemoteError naming its URL and the status.
    checkpoint local = open_checkpoint(dir / "ck");
    {
        process_env env({{"HOME", dir.path()}, {"AWS_EC2_METADATA_DISABLED", "true"}, {"AWS_ACCESS_KEY_ID", reader_id},
                         {"AWS_SECRET_ACCESS_KEY", reader_secret}, {"AWS_ENDPOINT_URL", server.endpoint()}});
        try {
            detail::list_s3_prefix(detail::location("s3://signed/ck/"), settings{});
            FAIL() << "the reader may list the bucket: the fallback below is not tested";
        } catch (const remote_error& e) {
            EXPECT_EQ(e.status(), 403) << e.what();
        }
        checkpoint c = open_checkpoint("s3://signed/ck/");
        EXPECT_EQ(c.index_path, "s3://signed/ck/model.safetensors.index.json");
        EXPECT_EQ(c.shards.size(), local.shards.size());
        checkpoint_load remote = load_checkpoint(c), near = load_checkpoint(local);
        ASSERT_EQ(remote.tensors.size(), 3u);
        for (std::size_t i = 0; i < 3; ++i)
            EXPECT_EQ(0, std::memcmp(remote.tensors[i].value.data(), near.tensors[i].value.data(), near.tensors[i].value.nbytes()));
    }
    {
        process_env env({{"HOME", dir.path()}, {"AWS_EC2_METADATA_DISABLED", "true"}, {"AWS_ACCESS_KEY_ID", reader_id},
                         {"AWS_SECRET_ACCESS_KEY", "wrong"}, {"AWS_ENDPOINT_URL", server.endpoint()}});
        try {
            open_checkpoint("s3://signed/ck/");
            FAIL() << "a wrong secret opened the checkpoint";
        } catch (const remote_error& e) {
            EXPECT_EQ(e.status(), 403);
            EXPECT_EQ(e.url(), "s3://signed/ck/model.safetensors.index.json");
            EXPECT_EQ(e.credentials(), "environment");
            EXPECT_EQ(std::string(e.what()).find("wrong"), std::string::npos) << e.what();
        }
    }
    detail::forget_shared_aws_signers();
}

}  // namespace
}  // namespace ferry::test
