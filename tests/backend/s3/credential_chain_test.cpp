// Each link of the AWS credential chain, in order, with files in a temporary HOME and local
// container, instance-metadata and STS endpoints (credential_server.py on 127.0.0.1).
#include <gtest/gtest.h>

#include <fstream>

#include "backend/remote_servers.hpp"
#include "backend/s3/credential_chain.hpp"
#include "backend/s3/s3_location.hpp"
#include "ferry/error.hpp"

namespace ferry::test {
namespace {

using detail::aws_credentials;
using detail::resolve_aws_credentials;
using detail::s3_options;

struct fake_env {
    std::map<std::string, std::string> vars;
    detail::env_lookup lookup() const {
        return [this](const std::string& n) -> std::optional<std::string> {
            auto it = vars.find(n);
            if (it == vars.end()) return std::nullopt;
            return it->second;
        };
    }
};

class chain_test : public ::testing::Test {
protected:
    void SetUp() override {
        std::filesystem::create_directories(home_ / ".aws");
        // Never ask a real metadata service: every test that wants IMDS points it at 127.0.0.1.
        env_.vars = {{"HOME", home_.path()}, {"AWS_EC2_METADATA_DISABLED", "true"}};
    }
    aws_credentials resolve(const s3_options& o = {}) {
        return resolve_aws_credentials(o, env_.lookup(), "s3://bucket/key", &tried_);
    }
    void write(const std::string& name, const std::string& text) { std::ofstream(home_ / name) << text; }
    temp_dir home_;
    fake_env env_;
    std::vector<std::string> tried_;
};

TEST_F(chain_test, arguments_come_first) {
    env_.vars["AWS_ACCESS_KEY_ID"] = "AKIAENV";
    env_.vars["AWS_SECRET_ACCESS_KEY"] = "env-secret";
    s3_options o;
    o.access_key = "AKIAARG";
    o.secret_key = "arg-secret";
    auto c = resolve(o);
    EXPECT_EQ(c.access_key, "AKIAARG");
    EXPECT_EQ(c.source, "arguments");
}

TEST_F(chain_test, the_environment_with_a_session_token) {
    env_.vars["AWS_ACCESS_KEY_ID"] = "AKIAENV";
    env_.vars["AWS_SECRET_ACCESS_KEY"] = "env-secret";
    env_.vars["AWS_SESSION_TOKEN"] = "env-token";
    write(".aws/credentials", "[default]\naws_access_key_id = AKIAFILE\naws_secret_access_key = file-secret\n");
    auto c = resolve();
    EXPECT_EQ(c.access_key, "AKIAENV");
    EXPECT_EQ(c.session_token, "env-token");
    EXPECT_EQ(c.source, "environment");
}

TEST_F(chain_test, the_default_profile_from_the_credentials_file) {
    write(".aws/credentials", "# comment\n[other]\naws_access_key_id=AKIAOTHER\naws_secret_access_key=x\n"
                              "[default]\naws_access_key_id = AKIAFILE\naws_secret_access_key = file-secret\n");
    auto c = resolve();
    EXPECT_EQ(c.access_key, "AKIAFILE");
    EXPECT_EQ(c.secret_key, "file-secret");
    EXPECT_NE(c.source.find("profile default"), std::string::npos) << c.source;
}

TEST_F(chain_test, aws_profile_picks_a_profile_and_config_gives_region_and_endpoint) {
    env_.vars["AWS_PROFILE"] = "dev";
    write(".aws/credentials", "[dev]\naws_access_key_id = AKIADEV\naws_secret_access_key = dev-secret\n");
    write(".aws/config", "[default]\nregion = us-east-1\n[profile dev]\nregion = eu-west-3\n"
                         "endpoint_url = http://127.0.0.1:9/\n");
    auto c = resolve();
    EXPECT_EQ(c.access_key, "AKIADEV");
    EXPECT_NE(c.source.find("profile dev"), std::string::npos);
    EXPECT_EQ(detail::resolve_aws_region({}, env_.lookup()), "eu-west-3");
    auto l = detail::resolve_s3_location(detail::location("s3://bucket/a/b c.bin"), {}, env_.lookup(), settings{});
    EXPECT_EQ(l.endpoint, "http://127.0.0.1:9");
    EXPECT_EQ(l.endpoint_source, "profile dev");
    EXPECT_TRUE(l.path_style);
    EXPECT_EQ(l.object_url, "http://127.0.0.1:9/bucket/a/b%20c.bin");
    EXPECT_EQ(l.auth.sigv4, "aws:amz:eu-west-3:s3");
}

TEST_F(chain_test, keys_in_the_config_file_count_too) {
    write(".aws/config", "[profile cfg]\naws_access_key_id = AKIACFG\naws_secret_access_key = cfg-secret\n");
    s3_options o;
    o.profile = "cfg";
    auto c = resolve(o);
    EXPECT_EQ(c.access_key, "AKIACFG");
}

TEST_F(chain_test, a_named_profile_that_does_not_exist_is_an_error) {
    s3_options o;
    o.profile = "nope";
    EXPECT_THROW(resolve(o), remote_error);
}

TEST_F(chain_test, web_identity_asks_sts) {
    python_server sts({backend_test_dir() + "/s3/credential_server.py", "--web-token", "jwt-123"});
    write("token", "jwt-123\n");
    env_.vars["AWS_WEB_IDENTITY_TOKEN_FILE"] = home_ / "token";
    env_.vars["AWS_ROLE_ARN"] = "arn:aws:iam::123456789012:role/ferry";
    env_.vars["AWS_ENDPOINT_URL_STS"] = sts.url();
    auto c = resolve();
    EXPECT_EQ(c.access_key, "ASIASTSEXAMPLE");
    EXPECT_EQ(c.session_token, "asiasts-session");
    EXPECT_NE(c.source.find("web identity"), std::string::npos);
    // A token STS refuses is an error naming the link, never the token.
    write("token", "wrong-token\n");
    try {
        resolve();
        FAIL() << "accepted a bad token";
    } catch (const remote_error& e) {
        EXPECT_EQ(e.status(), 403);
        EXPECT_NE(e.credentials().find("web identity"), std::string::npos);
        EXPECT_EQ(std::string(e.what()).find("wrong-token"), std::string::npos) << e.what();
    }
}

TEST_F(chain_test, the_container_endpoint_with_its_authorization_token) {
    python_server endpoint({backend_test_dir() + "/s3/credential_server.py", "--auth", "Bearer abc"});
    env_.vars["AWS_CONTAINER_CREDENTIALS_FULL_URI"] = endpoint.url("/container/creds");
    write("auth", "Bearer abc");
    env_.vars["AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE"] = home_ / "auth";
    auto c = resolve();
    EXPECT_EQ(c.access_key, "ASIACONTAINEREXAMPLE");
    EXPECT_EQ(c.source, "container credentials endpoint");
    env_.vars.erase("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE");
    EXPECT_THROW(resolve(), remote_error);  // 401 without the token
}

TEST_F(chain_test, instance_metadata_v2) {
    python_server imds({backend_test_dir() + "/s3/credential_server.py"});
    env_.vars.erase("AWS_EC2_METADATA_DISABLED");
    env_.vars["AWS_EC2_METADATA_SERVICE_ENDPOINT"] = imds.url("/");
    auto c = resolve();
    EXPECT_EQ(c.access_key, "ASIAIMDSEXAMPLE");
    EXPECT_EQ(c.session_token, "asiaimds-session");
    EXPECT_NE(c.source.find("IMDSv2"), std::string::npos);
}

TEST_F(chain_test, a_role_profile_assumes_its_role_with_the_source_profile) {
    python_server sts({backend_test_dir() + "/s3/credential_server.py", "--base-key", "AKIABASE"});
    write(".aws/credentials", "[base]\naws_access_key_id = AKIABASE\naws_secret_access_key = base-secret\n");
    write(".aws/config", "[profile mid]\nrole_arn = arn:aws:iam::1:role/mid\nsource_profile = base\n"
                         "[profile dev]\nrole_arn = arn:aws:iam::1:role/dev\nsource_profile = mid\n"
                         "duration_seconds = 900\nexternal_id = x y\n");
    env_.vars["AWS_PROFILE"] = "dev";
    env_.vars["AWS_ENDPOINT_URL_STS"] = sts.url();
    auto c = resolve();
    EXPECT_EQ(c.access_key, "ASIAROLEEXAMPLE");
    EXPECT_EQ(c.session_token, "asiarole-session");
    EXPECT_TRUE(static_cast<bool>(c.refresh));
    // A chain of roles: dev assumed with mid's credentials, themselves assumed with base's keys.
    EXPECT_NE(c.source.find("profile dev: role arn:aws:iam::1:role/dev assumed with profile mid: role "
                            "arn:aws:iam::1:role/mid assumed with profile base"),
              std::string::npos)
        << c.source;
    EXPECT_EQ(c.source.find("base-secret"), std::string::npos);
    EXPECT_EQ(c.refresh().access_key, "ASIAROLEEXAMPLE");
}

TEST_F(chain_test, role_profiles_that_cannot_work_say_why) {
    write(".aws/config", "[profile orphan]\nrole_arn = arn:aws:iam::1:role/r\nsource_profile = gone\n"
                         "[profile a]\nrole_arn = arn:aws:iam::1:role/a\nsource_profile = b\n"
                         "[profile b]\nrole_arn = arn:aws:iam::1:role/b\nsource_profile = a\n"
                         "[profile mfa]\nrole_arn = arn:aws:iam::1:role/m\nsource_profile = mfa\n"
                         "mfa_serial = arn:aws:iam::1:mfa/u\naws_access_key_id = AKIA\naws_secret_access_key = s\n"
                         "[profile odd]\nrole_arn = arn:aws:iam::1:role/o\ncredential_source = Somewhere\n");
    for (auto [profile, words] : std::vector<std::pair<const char*, const char*>>{
             {"orphan", "source_profile gone, which is in neither"},
             {"a", "form a loop"},
             {"mfa", "MFA"},
             {"odd", "credential_source"}}) {
        SCOPED_TRACE(profile);
        s3_options o;
        o.profile = profile;
        try {
            resolve(o);
            FAIL() << "resolved";
        } catch (const remote_error& e) {
            EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
            EXPECT_NE(e.credentials().find("profile"), std::string::npos) << e.credentials();
        }
    }
}

TEST_F(chain_test, credential_source_environment_needs_both_keys) {
    python_server sts({backend_test_dir() + "/s3/credential_server.py", "--base-key", "AKIAENVBASE"});
    write(".aws/config", "[profile ci]\nrole_arn = arn:aws:iam::1:role/ci\ncredential_source = Environment\n");
    env_.vars["AWS_PROFILE"] = "ci";
    env_.vars["AWS_ENDPOINT_URL_STS"] = sts.url();
    // Full keys in the environment answer at link 2, before any profile; half of them fall
    // through to the profile, whose role then has no source.
    s3_options o;
    o.profile = "ci";
    env_.vars["AWS_ACCESS_KEY_ID"] = "AKIAENVBASE";
    env_.vars["AWS_SECRET_ACCESS_KEY"] = "";  // link 2 needs both
    try {
        resolve(o);
        FAIL() << "a role with half the environment's keys";
    } catch (const remote_error& e) {
        EXPECT_NE(std::string(e.what()).find("credential_source Environment"), std::string::npos) << e.what();
    }
}

TEST_F(chain_test, aws_times_parse_with_fractions_and_offsets) {
    using namespace std::chrono;
    auto t = detail::parse_aws_time("2026-12-01T10:00:00Z");
    ASSERT_TRUE(t);
    EXPECT_EQ(system_clock::to_time_t(*t), 1796119200);
    auto f = detail::parse_aws_time("2026-12-01T10:00:00.250Z");
    ASSERT_TRUE(f);
    EXPECT_EQ(duration_cast<milliseconds>(*f - *t).count(), 250);
    auto o = detail::parse_aws_time("2026-12-01T12:00:00+02:00");
    ASSERT_TRUE(o);
    EXPECT_EQ(*o, *t);
    EXPECT_FALSE(detail::parse_aws_time("tomorrow"));
    EXPECT_FALSE(detail::parse_aws_time("2026-12-01T10:00:00 junk"));
}

TEST_F(chain_test, no_credentials_is_an_error_listing_every_link) {
    try {
        resolve();
        FAIL() << "found credentials";
    } catch (const remote_error& e) {
        std::string w = e.what();
        EXPECT_EQ(e.credentials(), "none");
        for (const char* link : {"environment", "profile default", "web identity", "container", "instance metadata"})
            EXPECT_NE(w.find(link), std::string::npos) << link << " missing in " << w;
    }
}

TEST_F(chain_test, unsigned_requests_need_no_credentials) {
    env_.vars["AWS_NO_SIGN_REQUEST"] = "true";
    auto c = resolve();
    EXPECT_TRUE(c.anonymous());
}

TEST_F(chain_test, endpoints_and_addressing_styles) {
    env_.vars["AWS_ACCESS_KEY_ID"] = "AKIAENV";
    env_.vars["AWS_SECRET_ACCESS_KEY"] = "env-secret";
    env_.vars["AWS_REGION"] = "ap-south-1";
    auto l = detail::resolve_s3_location(detail::location("s3://my-bucket/k/x.bin"), {}, env_.lookup(), settings{});
    EXPECT_FALSE(l.path_style);
    EXPECT_EQ(l.object_url, "https://my-bucket.s3.ap-south-1.amazonaws.com/k/x.bin");
    auto dotted = detail::resolve_s3_location(detail::location("s3://my.bucket/x"), {}, env_.lookup(), settings{});
    EXPECT_EQ(dotted.object_url, "https://s3.ap-south-1.amazonaws.com/my.bucket/x");
    env_.vars["AWS_ENDPOINT_URL"] = "http://127.0.0.1:1";
    env_.vars["AWS_ENDPOINT_URL_S3"] = "http://127.0.0.1:2";
    auto custom = detail::resolve_s3_location(detail::location("s3://b/x"), {}, env_.lookup(), settings{});
    EXPECT_EQ(custom.object_url, "http://127.0.0.1:2/b/x");
    EXPECT_EQ(custom.endpoint_source, "AWS_ENDPOINT_URL_S3");
    settings s;
    s.s3_addressing = "virtual";
    auto virt = detail::resolve_s3_location(detail::location("s3://b/x"), {}, env_.lookup(), s);
    EXPECT_EQ(virt.object_url, "http://b.127.0.0.1:2/x");
    EXPECT_THROW(detail::resolve_s3_location(detail::location("s3:///x"), {}, env_.lookup(), s), usage_error);
}

}  // namespace
}  // namespace ferry::test
