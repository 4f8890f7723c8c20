// Temporary credentials renewed during a long read, for each link that hands them out (container
// endpoint, IMDSv2, web identity, assume-role): credential_server.py issues keys that live two
// seconds and serves an object only to requests signed with a live key, so a read that lasts
// longer than a key fails unless the reader renews in time. The four links read side by side,
// each from its own environment, against one server.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <fstream>
#include <thread>

#include "backend/http/http_client.hpp"
#include "backend/remote_servers.hpp"
#include "backend/s3/credential_provider.hpp"
#include "backend/s3/s3_source.hpp"
#include "ferry/error.hpp"
#include "ferry/file.hpp"

namespace ferry::test {
namespace {

using env_map = std::map<std::string, std::string>;

detail::env_lookup lookup(const env_map& vars) {
    return [vars](const std::string& n) -> std::optional<std::string> {
        auto it = vars.find(n);
        if (it == vars.end()) return std::nullopt;
        return it->second;
    };
}

nlohmann::json server_stats(const python_server& server) {
    detail::http_client c(settings{});
    detail::http_request rq;
    rq.url = server.url("/_stats");
    detail::http_response r = c.perform(rq, {});
    return nlohmann::json::parse(r.body);
}

class refresh_test : public ::testing::Test {
protected:
    void SetUp() override {
        detail::forget_shared_aws_signers();
        write_pattern_file(dir_ / "obj.bin", size_, 3);
        std::filesystem::create_directories(dir_ / "home/.aws");
        std::ofstream(dir_ / "token") << "jwt-1\n";
        std::ofstream(dir_ / "home/.aws/credentials") << "[base]\naws_access_key_id = AKIABASE\n"
                                                          "aws_secret_access_key = base-secret\n";
        std::ofstream(dir_ / "home/.aws/config") << "[profile dev]\nrole_arn = arn:aws:iam::123456789012:role/dev\n"
                                                     "source_profile = base\nrole_session_name = ferry-test\n";
    }
    void TearDown() override { detail::forget_shared_aws_signers(); }

    // One environment per link; each also points S3 at the server.
    std::map<std::string, env_map> links(const python_server& server) const {
        env_map common = {{"HOME", dir_ / "home"}, {"AWS_ENDPOINT_URL", server.url()}, {"AWS_EC2_METADATA_DISABLED", "true"}};
        auto with = [&](env_map extra) {
            env_map m = common;
            for (auto& [k, v] : extra) m[k] = v;
            return m;
        };
        env_map imds = with({{"AWS_EC2_METADATA_SERVICE_ENDPOINT", server.url("/")}});
        imds.erase("AWS_EC2_METADATA_DISABLED");
        return {
            {"CONTAINER", with({{"AWS_CONTAINER_CREDENTIALS_FULL_URI", server.url("/container/creds")}})},
            {"IMDS", imds},
            {"STS", with({{"AWS_WEB_IDENTITY_TOKEN_FILE", dir_ / "token"},
                          {"AWS_ROLE_ARN", "arn:aws:iam::123456789012:role/web"}})},
            {"ROLE", with({{"AWS_PROFILE", "dev"}})},
        };
    }

    // Reads the object in small ranges for `seconds`, checking every byte; returns the source
    // label and the renewals its signer made.
    std::pair<std::string, std::uint64_t> read_for(const env_map& env, double seconds) {
        settings s;
        s.remote_retries = 2;
        s.remote_retry_delay_ms = 5;
        auto src = detail::open_s3_object(detail::location("s3://bucket/obj.bin"), open_mode::read, s, {}, lookup(env));
        auto& s3 = dynamic_cast<detail::s3_source&>(*src);
        auto expect = pattern(size_, 0, 3);
        std::vector<std::uint8_t> got(chunk_);
        auto t0 = std::chrono::steady_clock::now();
        std::uint64_t off = 0;
        for (int i = 0; i < 100000; ++i) {  // bounded; the time ends it long before
            if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > seconds) break;
            src->read(reinterpret_cast<char*>(got.data()), chunk_, off, {});
            EXPECT_EQ(0, std::memcmp(got.data(), expect.data() + off, chunk_));
            off = (off + chunk_) % (size_ - chunk_);
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
        return {s3.where().signer->credentials().source, s3.where().signer->renewals()};
    }

    temp_dir dir_;
    static constexpr std::size_t size_ = 1 << 20;
    static constexpr std::size_t chunk_ = 64 << 10;
};

// Keys that live 2 s, a read of 4.5 s: renewed ahead of time, no request ever refused.
TEST_F(refresh_test, each_link_renews_before_expiry) {
    python_server server({backend_test_dir() + "/s3/credential_server.py", "--lifetime", "2", "--object",
                          dir_ / "obj.bin", "--web-token", "jwt-1", "--base-key", "AKIABASE"});
    auto envs = links(server);
    std::map<std::string, std::pair<std::string, std::uint64_t>> result;
    std::map<std::string, std::string> failure;
    std::mutex m;
    std::vector<std::thread> readers;
    for (auto& [kind, env] : envs)
        readers.emplace_back([&, kind = kind, env = env] {
            try {
                auto r = read_for(env, 4.5);
                std::lock_guard lock(m);
                result[kind] = r;
            } catch (const std::exception& e) {
                std::lock_guard lock(m);
                failure[kind] = e.what();
            }
        });
    for (auto& t : readers) t.join();
    EXPECT_TRUE(failure.empty()) << failure.begin()->first << ": " << failure.begin()->second;
    auto st = server_stats(server);
    EXPECT_EQ(st["refused"].get<int>(), 0) << st.dump();
    for (const auto& [kind, r] : result) {
        SCOPED_TRACE(kind);
        EXPECT_GE(st["issued"][kind].get<int>(), 2) << st.dump();
        EXPECT_GE(r.second, 1u);
    }
    EXPECT_NE(result["ROLE"].first.find("role arn:aws:iam::123456789012:role/dev assumed with profile base"),
              std::string::npos)
        << result["ROLE"].first;
    EXPECT_NE(result["STS"].first.find("web identity"), std::string::npos);
    EXPECT_NE(result["IMDS"].first.find("IMDSv2"), std::string::npos);
    EXPECT_EQ(result["CONTAINER"].first, "container credentials endpoint");
}

// The server drops keys after 1 s although their Expiration says 60 s (a clock ahead of ours):
// the reader hears ExpiredToken, renews at once and goes on.
TEST_F(refresh_test, an_expired_answer_renews_at_once) {
    python_server server({backend_test_dir() + "/s3/credential_server.py", "--lifetime", "60", "--enforce", "1",
                          "--object", dir_ / "obj.bin", "--web-token", "jwt-1", "--base-key", "AKIABASE"});
    auto envs = links(server);
    std::map<std::string, std::string> failure;
    std::mutex m;
    std::vector<std::thread> readers;
    for (const char* kind : {"CONTAINER", "ROLE"})
        readers.emplace_back([&, kind, env = envs[kind]] {
            try {
                read_for(env, 2.5);
            } catch (const std::exception& e) {
                std::lock_guard lock(m);
                failure[kind] = e.what();
            }
        });
    for (auto& t : readers) t.join();
    EXPECT_TRUE(failure.empty()) << failure.begin()->first << ": " << failure.begin()->second;
    auto st = server_stats(server);
    EXPECT_GE(st["refused"].get<int>(), 2) << st.dump();  // the check is real
    EXPECT_GE(st["issued"]["CONTAINER"].get<int>(), 3) << st.dump();
    EXPECT_GE(st["issued"]["ROLE"].get<int>(), 3) << st.dump();
}

// Static keys never renew; a refused request with them is an error naming the link.
TEST_F(refresh_test, static_keys_are_not_renewed) {
    python_server server({backend_test_dir() + "/s3/credential_server.py", "--lifetime", "2", "--object",
                          dir_ / "obj.bin"});
    env_map env = {{"HOME", dir_ / "home"}, {"AWS_ENDPOINT_URL", server.url()}, {"AWS_EC2_METADATA_DISABLED", "true"},
                   {"AWS_ACCESS_KEY_ID", "AKIASTATIC"}, {"AWS_SECRET_ACCESS_KEY", "static-secret"}};
    settings s;
    s.remote_retries = 1;
    s.remote_retry_delay_ms = 1;
    try {
        detail::open_s3_object(detail::location("s3://bucket/obj.bin"), open_mode::read, s, {}, lookup(env));
        FAIL() << "an unknown key was served";
    } catch (const remote_error& e) {
        EXPECT_EQ(e.status(), 400);
        EXPECT_EQ(e.credentials(), "environment");
        EXPECT_NE(std::string(e.what()).find("ExpiredToken"), std::string::npos) << e.what();
        EXPECT_EQ(std::string(e.what()).find("static-secret"), std::string::npos) << e.what();
    }
}

// One signer for every object of one chain: a checkpoint's shards ask STS once.
TEST_F(refresh_test, objects_of_one_chain_share_their_credentials) {
    python_server server({backend_test_dir() + "/s3/credential_server.py", "--lifetime", "600", "--object",
                          dir_ / "obj.bin", "--base-key", "AKIABASE"});
    auto env = links(server)["ROLE"];
    settings s;
    for (int i = 0; i < 5; ++i) detail::open_s3_object(detail::location("s3://bucket/obj.bin"), open_mode::read, s, {}, lookup(env));
    EXPECT_EQ(server_stats(server)["issued"]["ROLE"].get<int>(), 1);
}

}  // namespace
}  // namespace ferry::test
