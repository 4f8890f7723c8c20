// The AWS credential chain (see credential_chain.hpp).
#include "backend/s3/credential_chain.hpp"

#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "backend/http/http_client.hpp"
#include "backend/http/url.hpp"
#include "ferry/error.hpp"

namespace ferry::detail {
namespace {

bool truthy(const std::optional<std::string>& v) {
    if (!v) return false;
    std::string s = *v;
    for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return s == "true" || s == "1" || s == "yes";
}

std::string read_text(const std::string& path) {
    std::ifstream in(path);
    if (!in) return {};
    std::stringstream ss;
    ss << in.rdbuf();
    std::string s = ss.str();
    while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
    return s;
}

std::string xml_field(const std::string& body, const std::string& tag) {
    auto a = body.find("<" + tag + ">");
    if (a == std::string::npos) return {};
    a += tag.size() + 2;
    auto b = body.find("</" + tag + ">", a);
    return b == std::string::npos ? std::string() : body.substr(a, b - a);
}

// Metadata endpoints answer fast or not at all (169.254.x.x off a cloud is a black hole).
settings metadata_settings() {
    settings s;
    s.remote_connect_timeout_ms = 1000;
    s.remote_stall_timeout_ms = 2000;
    return s;
}

http_response fetch(http_client& c, const std::string& method, const std::string& url,
                    std::vector<std::string> headers, int attempts = 2) {
    http_request rq;
    rq.method = method;
    rq.url = url;
    rq.headers = std::move(headers);
    rq.follow_redirects = false;
    http_response r;
    for (int i = 0; i < attempts; ++i) {
        r = c.perform(rq, {});
        if (!(r.transport_retryable() || r.status_retryable()) || r.curl_code == 7 /* refused */) break;
        backoff_sleep(static_cast<std::size_t>(i), 50);
    }
    return r;
}

std::string failure(const http_response& r) {
    if (r.status) return "HTTP " + std::to_string(r.status);
    return r.curl_error.empty() ? "no answer" : r.curl_error;
}

// {AccessKeyId, SecretAccessKey, Token, Expiration}: what container and instance endpoints send.
bool from_json(const std::string& body, aws_credentials& c) {
    auto j = nlohmann::json::parse(body, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("AccessKeyId") || !j.contains("SecretAccessKey"))
        return false;
    c.access_key = j["AccessKeyId"].get<std::string>();
    c.secret_key = j["SecretAccessKey"].get<std::string>();
    if (j.contains("Token") && j["Token"].is_string()) c.session_token = j["Token"].get<std::string>();
    if (j.contains("Expiration") && j["Expiration"].is_string()) c.expiration = j["Expiration"].get<std::string>();
    return !c.access_key.empty() && !c.secret_key.empty();
}

}  // namespace

std::string resolve_aws_region(const s3_options& o, const env_lookup& env) {
    if (!o.region.empty()) return o.region;
    if (auto r = env("AWS_REGION"); r && !r->empty()) return *r;
    if (auto r = env("AWS_DEFAULT_REGION"); r && !r->empty()) return *r;
    std::string p = load_aws_profile(env, o.profile).get("region");
    return p.empty() ? "us-east-1" : p;
}

aws_credentials resolve_aws_credentials(const s3_options& o, const env_lookup& env, const std::string& location,
                                        std::vector<std::string>* tried_out) {
    std::vector<std::string> tried;
    auto done = [&](aws_credentials c, std::string source) {
        c.source = std::move(source);
        tried.push_back(c.source + ": answered");
        if (tried_out) *tried_out = tried;
        return c;
    };
    if (o.unsigned_requests || truthy(env("AWS_NO_SIGN_REQUEST"))) return done({}, "none (unsigned requests)");

    // 1. arguments
    if (!o.access_key.empty() || !o.secret_key.empty()) {
        if (o.access_key.empty() || o.secret_key.empty())
            throw remote_error(0, location, "an access key and a secret key must be given together", "arguments");
        return done({o.access_key, o.secret_key, o.session_token, {}, {}}, "arguments");
    }
    tried.push_back("arguments: none given");

    // 2. environment
    {
        auto id = env("AWS_ACCESS_KEY_ID"), secret = env("AWS_SECRET_ACCESS_KEY");
        if (id && secret && !id->empty() && !secret->empty())
            return done({*id, *secret, env("AWS_SESSION_TOKEN").value_or(""), {}, {}}, "environment");
        tried.push_back("environment: AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY not set");
    }

    // 3. profile files
    aws_profile profile = load_aws_profile(env, o.profile);
    {
        std::string id = profile.get("aws_access_key_id"), secret = profile.get("aws_secret_access_key");
        if (!id.empty() && !secret.empty()) {
            bool in_credentials = profile.credentials.count("aws_access_key_id") != 0;
            return done({id, secret, profile.get("aws_session_token"), {}, {}},
                        "profile " + profile.name + " (" +
                            (in_credentials ? profile.credentials_path : profile.config_path) + ")");
        }
        if (!o.profile.empty() && !profile.exists())
            throw remote_error(0, location,
                               "profile " + o.profile + " is in neither " + profile.credentials_path + " nor " +
                                   profile.config_path,
                               "profile " + o.profile);
        tried.push_back("profile " + profile.name + ": no keys in " + profile.credentials_path + " or " +
                        profile.config_path);
    }

    // 4. web identity
    {
        std::string token_file = env("AWS_WEB_IDENTITY_TOKEN_FILE").value_or(profile.get("web_identity_token_file"));
        std::string role = env("AWS_ROLE_ARN").value_or(profile.get("role_arn"));
        if (!token_file.empty() && !role.empty()) {
            std::string token = read_text(token_file);
            if (token.empty())
                throw remote_error(0, location, "the web identity token file is empty or unreadable: " + token_file,
                                   "web identity (" + role + ")");
            std::string session = env("AWS_ROLE_SESSION_NAME").value_or(profile.get("role_session_name"));
            if (session.empty()) session = "ferry";
            std::string endpoint = env("AWS_ENDPOINT_URL_STS").value_or(env("AWS_ENDPOINT_URL").value_or(""));
            if (endpoint.empty()) endpoint = "https://sts." + resolve_aws_region(o, env) + ".amazonaws.com";
            while (!endpoint.empty() && endpoint.back() == '/') endpoint.pop_back();
            std::string url = endpoint + "/?Action=AssumeRoleWithWebIdentity&Version=2011-06-15&RoleArn=" +
                              uri_encode(role, false) + "&RoleSessionName=" + uri_encode(session, false) +
                              "&WebIdentityToken=" + uri_encode(token, false);
            settings s;
            s.remote_connect_timeout_ms = 5000;
            http_client c(s);
            http_response r = fetch(c, "GET", url, {"Accept: application/xml"}, 3);
            aws_credentials cred;
            cred.access_key = xml_field(r.body, "AccessKeyId");
            cred.secret_key = xml_field(r.body, "SecretAccessKey");
            cred.session_token = xml_field(r.body, "SessionToken");
            cred.expiration = xml_field(r.body, "Expiration");
            if (r.status != 200 || cred.access_key.empty() || cred.secret_key.empty())
                throw remote_error(r.status, redact_url(endpoint), "AssumeRoleWithWebIdentity failed (" + failure(r) + ")",
                                   "web identity (" + role + ")");
            return done(cred, "web identity (" + role + ")");
        }
        tried.push_back("web identity: AWS_WEB_IDENTITY_TOKEN_FILE/AWS_ROLE_ARN not set");
    }

    // 5. container credentials endpoint
    {
        std::string url;
        if (auto rel = env("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI"); rel && !rel->empty())
            url = "http://169.254.170.2" + *rel;
        else if (auto full = env("AWS_CONTAINER_CREDENTIALS_FULL_URI"); full && !full->empty())
            url = *full;
        if (!url.empty()) {
            std::vector<std::string> headers;
            std::string auth = env("AWS_CONTAINER_AUTHORIZATION_TOKEN").value_or("");
            if (auto f = env("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE"); f && !f->empty()) auth = read_text(*f);
            if (!auth.empty()) headers.push_back("Authorization: " + auth);
            http_client c(metadata_settings());
            http_response r = fetch(c, "GET", url, headers, 3);
            aws_credentials cred;
            if (r.status != 200 || !from_json(r.body, cred))
                throw remote_error(r.status, redact_url(url),
                                   "the container credentials endpoint gave no credentials (" + failure(r) + ")",
                                   "container credentials endpoint");
            return done(cred, "container credentials endpoint");
        }
        tried.push_back("container credentials endpoint: AWS_CONTAINER_CREDENTIALS_*_URI not set");
    }

    // 6. IMDSv2
    if (truthy(env("AWS_EC2_METADATA_DISABLED"))) {
        tried.push_back("instance metadata: AWS_EC2_METADATA_DISABLED");
    } else {
        std::string base = env("AWS_EC2_METADATA_SERVICE_ENDPOINT").value_or("http://169.254.169.254");
        while (!base.empty() && base.back() == '/') base.pop_back();
        http_client c(metadata_settings());
        http_response t = fetch(c, "PUT", base + "/latest/api/token", {"X-aws-ec2-metadata-token-ttl-seconds: 21600"});
        if (t.status == 200 && !t.body.empty()) {
            std::string header = "X-aws-ec2-metadata-token: " + t.body;
            http_response roles = fetch(c, "GET", base + "/latest/meta-data/iam/security-credentials/", {header});
            std::string role = roles.body.substr(0, roles.body.find('\n'));
            if (roles.status == 200 && !role.empty()) {
                http_response r =
                    fetch(c, "GET", base + "/latest/meta-data/iam/security-credentials/" + role, {header});
                aws_credentials cred;
                if (r.status == 200 && from_json(r.body, cred)) return done(cred, "instance metadata (IMDSv2, role " + role + ")");
                tried.push_back("instance metadata: role " + role + " gave no credentials (" + failure(r) + ")");
            } else {
                tried.push_back("instance metadata: no instance role (" + failure(roles) + ")");
            }
        } else {
            tried.push_back("instance metadata: no token from " + base + " (" + failure(t) + ")");
        }
    }

    std::string list;
    for (const auto& t : tried) list += (list.empty() ? "" : "; ") + t;
    throw remote_error(0, location, "no AWS credentials found (tried " + list + ")", "none");
}

}  // namespace ferry::detail
