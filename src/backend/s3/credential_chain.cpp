// The AWS credential chain (see credential_chain.hpp). Each link that fetches temporary
// credentials is a function of what it read from the environment and the files, so that its
// answer carries a `refresh` that runs the same fetch again.
#include "backend/s3/credential_chain.hpp"

#include <cstdio>
#include <ctime>
#include <fstream>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "backend/http/http_client.hpp"
#include "backend/http/xml_field.hpp"
#include "backend/location.hpp"
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

// Metadata endpoints answer fast or not at all (169.254.x.x off a cloud is a black hole).
settings metadata_settings() {
    settings s;
    s.remote_connect_timeout_ms = 1000;
    s.remote_stall_timeout_ms = 2000;
    return s;
}

http_response fetch(http_client& c, const std::string& method, const std::string& url,
                    std::vector<std::string> headers, int attempts = 2, const http_auth& auth = {},
                    const std::string& body = {}) {
    http_request rq;
    rq.method = method;
    rq.url = url;
    rq.headers = std::move(headers);
    if (!body.empty()) {
        rq.body = body.data();
        rq.body_size = body.size();
    }
    rq.follow_redirects = false;
    http_response r;
    for (int i = 0; i < attempts; ++i) {
        r = c.perform(rq, auth);
        if (!(r.transport_retryable() || r.status_retryable()) || r.curl_code == 7 /* refused */) break;
        backoff_sleep(static_cast<std::size_t>(i), 50);
    }
    return r;
}

std::string failure(const http_response& r) {
    std::string s = r.status ? "HTTP " + std::to_string(r.status) : (r.curl_error.empty() ? "no answer" : r.curl_error);
    std::string code = xml_field(r.body, "Code"), message = xml_field(r.body, "Message");
    if (!code.empty()) s += ", " + code;
    if (!message.empty()) s += ": " + message;
    return s;
}

// {AccessKeyId, SecretAccessKey, Token, Expiration}: what container and instance endpoints send.
bool from_json(const std::string& body, aws_credentials& c) {
    auto j = nlohmann::json::parse(body, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("AccessKeyId") || !j.contains("SecretAccessKey") ||
        !j["AccessKeyId"].is_string() || !j["SecretAccessKey"].is_string())
        return false;
    c.access_key = j["AccessKeyId"].get<std::string>();
    c.secret_key = j["SecretAccessKey"].get<std::string>();
    if (j.contains("Token") && j["Token"].is_string()) c.session_token = j["Token"].get<std::string>();
    if (j.contains("Expiration") && j["Expiration"].is_string()) c.expiration = j["Expiration"].get<std::string>();
    return !c.access_key.empty() && !c.secret_key.empty();
}

std::string trim_slashes(std::string s) {
    while (!s.empty() && s.back() == '/') s.pop_back();
    return s;
}

// Where STS is asked: AWS_ENDPOINT_URL_STS, AWS_ENDPOINT_URL, the profile's endpoint_url (which
// the AWS tools apply to every service), else the regional endpoint.
std::string sts_endpoint(const env_lookup& env, const aws_profile& profile, const std::string& region) {
    for (const char* name : {"AWS_ENDPOINT_URL_STS", "AWS_ENDPOINT_URL"})
        if (auto e = env(name); e && !e->empty()) return trim_slashes(*e);
    if (std::string p = profile.get("endpoint_url"); !p.empty()) return trim_slashes(p);
    return "https://sts." + region + ".amazonaws.com";
}

// The credentials in an STS answer (AssumeRole, AssumeRoleWithWebIdentity), or a remote_error
// naming the endpoint and the link.
aws_credentials sts_credentials(const http_response& r, const std::string& endpoint, const std::string& action,
                                const std::string& label) {
    aws_credentials cred;
    cred.access_key = xml_field(r.body, "AccessKeyId");
    cred.secret_key = xml_field(r.body, "SecretAccessKey");
    cred.session_token = xml_field(r.body, "SessionToken");
    cred.expiration = xml_field(r.body, "Expiration");
    if (r.status != 200 || cred.access_key.empty() || cred.secret_key.empty())
        throw remote_error(r.status, shown_location(endpoint), action + " failed (" + failure(r) + ")", label);
    cred.source = label;
    return cred;
}

// Link 4: a web identity token (Kubernetes service accounts, GitHub OIDC) exchanged for a role's
// credentials. The token file is read at each call: its issuer rotates it.
aws_credentials web_identity(const std::string& token_file, const std::string& role, const std::string& session,
                             const std::string& endpoint, const std::string& location) {
    const std::string label = "web identity (" + role + ")";
    std::string token = read_text(token_file);
    if (token.empty())
        throw remote_error(0, location, "the web identity token file is empty or unreadable: " + token_file, label);
    std::string url = endpoint + "/?Action=AssumeRoleWithWebIdentity&RoleArn=" + uri_encode(role, false) +
                      "&RoleSessionName=" + uri_encode(session, false) + "&Version=2011-06-15&WebIdentityToken=" +
                      uri_encode(token, false);
    settings s;
    s.remote_connect_timeout_ms = 5000;
    http_client c(s);
    http_response r = fetch(c, "GET", url, {"Accept: application/xml"}, 3);
    aws_credentials cred = sts_credentials(r, endpoint, "AssumeRoleWithWebIdentity", label);
    cred.refresh = [=] { return web_identity(token_file, role, session, endpoint, location); };
    return cred;
}

// Link 5: the container credentials endpoint (ECS, EKS pod identity). The authorization token
// file is read at each call, for the same reason.
aws_credentials container_endpoint(const std::string& url, const std::string& token, const std::string& token_file) {
    std::vector<std::string> headers;
    std::string auth = token_file.empty() ? token : read_text(token_file);
    if (!auth.empty()) headers.push_back("Authorization: " + auth);
    http_client c(metadata_settings());
    http_response r = fetch(c, "GET", url, headers, 3);
    aws_credentials cred;
    if (r.status != 200 || !from_json(r.body, cred))
        throw remote_error(r.status, shown_location(url),
                           "the container credentials endpoint gave no credentials (" + failure(r) + ")",
                           "container credentials endpoint");
    cred.source = "container credentials endpoint";
    cred.refresh = [=] { return container_endpoint(url, token, token_file); };
    return cred;
}

// Link 6: IMDSv2. nullopt (with the reason in `why`) when there is no instance role; a refresh
// that finds none any more is an error.
std::optional<aws_credentials> instance_metadata(const std::string& base, std::string& why) {
    http_client c(metadata_settings());
    http_response t = fetch(c, "PUT", base + "/latest/api/token", {"X-aws-ec2-metadata-token-ttl-seconds: 21600"});
    if (t.status != 200 || t.body.empty()) {
        why = "no token from " + base + " (" + failure(t) + ")";
        return std::nullopt;
    }
    std::string header = "X-aws-ec2-metadata-token: " + t.body;
    http_response roles = fetch(c, "GET", base + "/latest/meta-data/iam/security-credentials/", {header});
    std::string role = roles.body.substr(0, roles.body.find('\n'));
    if (roles.status != 200 || role.empty()) {
        why = "no instance role (" + failure(roles) + ")";
        return std::nullopt;
    }
    http_response r = fetch(c, "GET", base + "/latest/meta-data/iam/security-credentials/" + role, {header});
    aws_credentials cred;
    if (r.status != 200 || !from_json(r.body, cred)) {
        why = "role " + role + " gave no credentials (" + failure(r) + ")";
        return std::nullopt;
    }
    cred.source = "instance metadata (IMDSv2, role " + role + ")";
    cred.refresh = [base, location = cred.source] {
        std::string no;
        if (auto again = instance_metadata(base, no)) return *again;
        throw remote_error(0, shown_location(base), "instance metadata: " + no, location);
    };
    return cred;
}

struct chain_context {
    const s3_options& o;
    const env_lookup& env;
    const std::string& location;
};

std::optional<aws_credentials> profile_credentials(const chain_context& cx, const aws_profile& p, int depth,
                                                   std::set<std::string>& seen);

// The static keys of a profile, or nullopt.
std::optional<aws_credentials> profile_keys(const aws_profile& p) {
    std::string id = p.get("aws_access_key_id"), secret = p.get("aws_secret_access_key");
    if (id.empty() || secret.empty()) return std::nullopt;
    bool in_credentials = p.credentials.count("aws_access_key_id") != 0;
    aws_credentials c{id, secret, p.get("aws_session_token"), {}, {}, {}};
    c.source = "profile " + p.name + " (" + (in_credentials ? p.credentials_path : p.config_path) + ")";
    return c;
}

// A profile's role: role_arn assumed with the credentials of source_profile (or of its
// credential_source), through STS AssumeRole signed with those credentials.
aws_credentials assume_role(const chain_context& cx, const aws_profile& p, int depth, std::set<std::string>& seen) {
    const std::string role = p.get("role_arn");
    const std::string label_start = "profile " + p.name + ": role " + role;
    if (!p.get("mfa_serial").empty())
        throw remote_error(0, cx.location,
                           "profile " + p.name + " asks for MFA (mfa_serial), which needs a person at a prompt: "
                           "give temporary credentials from `aws sts get-session-token` instead",
                           label_start);
    aws_credentials base;
    std::string with;
    if (std::string src = p.get("source_profile"); !src.empty()) {
        if (src == p.name) {
            // The AWS tools' rule: a profile that is its own source uses its own keys.
            auto keys = profile_keys(p);
            if (!keys)
                throw remote_error(0, cx.location, "profile " + p.name + " is its own source_profile but has no keys",
                                   label_start);
            base = *keys;
        } else {
            aws_profile sp = load_aws_profile(cx.env, src);
            if (!sp.exists())
                throw remote_error(0, cx.location,
                                   "profile " + p.name + " names source_profile " + src + ", which is in neither " +
                                       sp.credentials_path + " nor " + sp.config_path,
                                   label_start);
            auto got = profile_credentials(cx, sp, depth + 1, seen);
            if (!got)
                throw remote_error(0, cx.location,
                                   "profile " + p.name + ": its source_profile " + src + " has no credentials",
                                   label_start);
            base = *got;
        }
        with = base.source;
    } else {
        std::string cs = p.get("credential_source");
        if (cs == "Environment") {
            auto id = cx.env("AWS_ACCESS_KEY_ID"), secret = cx.env("AWS_SECRET_ACCESS_KEY");
            if (!id || !secret || id->empty() || secret->empty())
                throw remote_error(0, cx.location,
                                   "profile " + p.name + ": credential_source Environment, but AWS_ACCESS_KEY_ID/"
                                   "AWS_SECRET_ACCESS_KEY are not set",
                                   label_start);
            base = {*id, *secret, cx.env("AWS_SESSION_TOKEN").value_or(""), {}, "environment", {}};
        } else if (cs == "EcsContainer") {
            std::string url;
            if (auto rel = cx.env("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI"); rel && !rel->empty())
                url = "http://169.254.170.2" + *rel;
            else url = cx.env("AWS_CONTAINER_CREDENTIALS_FULL_URI").value_or("");
            if (url.empty())
                throw remote_error(0, cx.location,
                                   "profile " + p.name + ": credential_source EcsContainer, but no container "
                                   "credentials endpoint is set",
                                   label_start);
            base = container_endpoint(url, cx.env("AWS_CONTAINER_AUTHORIZATION_TOKEN").value_or(""),
                                      cx.env("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE").value_or(""));
        } else if (cs == "Ec2InstanceMetadata") {
            std::string why;
            auto got = instance_metadata(trim_slashes(cx.env("AWS_EC2_METADATA_SERVICE_ENDPOINT").value_or("http://169.254.169.254")), why);
            if (!got)
                throw remote_error(0, cx.location, "profile " + p.name + ": credential_source Ec2InstanceMetadata: " + why,
                                   label_start);
            base = *got;
        } else {
            throw remote_error(0, cx.location,
                               "profile " + p.name + " names role_arn without source_profile or a known "
                               "credential_source (Environment, EcsContainer, Ec2InstanceMetadata): '" + cs + "'",
                               label_start);
        }
        with = base.source;
    }

    std::string region = p.get("region");
    if (region.empty()) region = resolve_aws_region(cx.o, cx.env);
    const std::string endpoint = sts_endpoint(cx.env, p, region);
    std::string session = p.get("role_session_name");
    if (session.empty()) session = "ferry-" + std::to_string(std::time(nullptr));
    // A form POST, as the AWS SDKs send it: the signature covers the body's hash.
    std::string form = "Action=AssumeRole";
    if (std::string d = p.get("duration_seconds"); !d.empty()) form += "&DurationSeconds=" + uri_encode(d, false);
    if (std::string x = p.get("external_id"); !x.empty()) form += "&ExternalId=" + uri_encode(x, false);
    form += "&RoleArn=" + uri_encode(role, false) + "&RoleSessionName=" + uri_encode(session, false) +
            "&Version=2011-06-15";
    http_auth signing;
    signing.sigv4 = "aws:amz:" + region + ":sts";
    signing.user_password = base.access_key + ":" + base.secret_key;
    signing.session_token = base.session_token;
    signing.label = with;
    settings s;
    s.remote_connect_timeout_ms = 5000;
    http_client c(s);
    http_response r = fetch(c, "POST", endpoint + "/",
                            {"Accept: application/xml", "Content-Type: application/x-www-form-urlencoded; charset=utf-8"},
                            3, signing, form);
    const std::string label = label_start + " assumed with " + with;
    aws_credentials cred = sts_credentials(r, endpoint, "AssumeRole", label);
    // Asked again from the files and the source's own link: a source that is itself temporary
    // is fetched anew too.
    cred.refresh = [o = cx.o, env = cx.env, location = cx.location, name = p.name] {
        chain_context again{o, env, location};
        std::set<std::string> seen_again;
        aws_profile p2 = load_aws_profile(env, name);
        return assume_role(again, p2, 0, seen_again);
    };
    return cred;
}

// Link 3 for one profile: a role to assume, else its keys; nullopt when it has neither (a
// profile that names a web identity token is left to link 4).
std::optional<aws_credentials> profile_credentials(const chain_context& cx, const aws_profile& p, int depth,
                                                   std::set<std::string>& seen) {
    if (depth > 8 || !seen.insert(p.name).second)
        throw remote_error(0, cx.location, "profile " + p.name + ": source_profile names form a loop",
                           "profile " + p.name);
    bool role = !p.get("role_arn").empty() && (!p.get("source_profile").empty() || !p.get("credential_source").empty());
    if (role) return assume_role(cx, p, depth, seen);
    return profile_keys(p);
}

}  // namespace

std::optional<std::chrono::system_clock::time_point> parse_aws_time(const std::string& text) {
    int y, mo, d, h, mi, s;
    int used = 0;
    if (std::sscanf(text.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d%n", &y, &mo, &d, &h, &mi, &s, &used) != 6) return std::nullopt;
    std::size_t i = static_cast<std::size_t>(used);
    std::chrono::microseconds fraction{0};
    if (i < text.size() && text[i] == '.') {
        long scale = 100000;
        for (++i; i < text.size() && std::isdigit(static_cast<unsigned char>(text[i])); ++i, scale /= 10)
            fraction += std::chrono::microseconds((text[i] - '0') * scale);
    }
    long offset = 0;
    if (i < text.size() && (text[i] == '+' || text[i] == '-')) {
        int oh = 0, om = 0;
        if (std::sscanf(text.c_str() + i + 1, "%2d:%2d", &oh, &om) != 2) return std::nullopt;
        offset = (text[i] == '+' ? 1 : -1) * (oh * 3600L + om * 60L);
    } else if (i < text.size() && text[i] != 'Z') {
        return std::nullopt;
    }
    std::tm tm{};
    tm.tm_year = y - 1900;
    tm.tm_mon = mo - 1;
    tm.tm_mday = d;
    tm.tm_hour = h;
    tm.tm_min = mi;
    tm.tm_sec = s;
    std::time_t t = ::timegm(&tm);
    if (t == static_cast<std::time_t>(-1)) return std::nullopt;
    return std::chrono::system_clock::from_time_t(t - offset) +
           std::chrono::duration_cast<std::chrono::system_clock::duration>(fraction);
}

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
    auto done = [&](aws_credentials c, std::string source = {}) {
        if (!source.empty()) c.source = std::move(source);
        tried.push_back(c.source + ": answered");
        if (tried_out) *tried_out = tried;
        return c;
    };
    if (o.unsigned_requests || truthy(env("AWS_NO_SIGN_REQUEST"))) return done({}, "none (unsigned requests)");
    chain_context cx{o, env, location};

    // 1. arguments
    if (!o.access_key.empty() || !o.secret_key.empty()) {
        if (o.access_key.empty() || o.secret_key.empty())
            throw remote_error(0, location, "an access key and a secret key must be given together", "arguments");
        return done({o.access_key, o.secret_key, o.session_token, {}, {}, {}}, "arguments");
    }
    tried.push_back("arguments: none given");

    // 2. environment
    {
        auto id = env("AWS_ACCESS_KEY_ID"), secret = env("AWS_SECRET_ACCESS_KEY");
        if (id && secret && !id->empty() && !secret->empty())
            return done({*id, *secret, env("AWS_SESSION_TOKEN").value_or(""), {}, {}, {}}, "environment");
        tried.push_back("environment: AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY not set");
    }

    // 3. profile files: a role to assume, or keys
    aws_profile profile = load_aws_profile(env, o.profile);
    {
        std::set<std::string> seen;
        if (auto c = profile_credentials(cx, profile, 0, seen)) return done(*c);
        if (!o.profile.empty() && !profile.exists())
            throw remote_error(0, location,
                               "profile " + o.profile + " is in neither " + profile.credentials_path + " nor " +
                                   profile.config_path,
                               "profile " + o.profile);
        tried.push_back("profile " + profile.name + ": no keys or role in " + profile.credentials_path + " or " +
                        profile.config_path);
    }

    // 4. web identity
    {
        std::string token_file = env("AWS_WEB_IDENTITY_TOKEN_FILE").value_or(profile.get("web_identity_token_file"));
        std::string role = env("AWS_ROLE_ARN").value_or(profile.get("role_arn"));
        if (!token_file.empty() && !role.empty()) {
            std::string session = env("AWS_ROLE_SESSION_NAME").value_or(profile.get("role_session_name"));
            if (session.empty()) session = "ferry";
            std::string endpoint = sts_endpoint(env, profile, resolve_aws_region(o, env));
            return done(web_identity(token_file, role, session, endpoint, location));
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
        if (!url.empty())
            return done(container_endpoint(url, env("AWS_CONTAINER_AUTHORIZATION_TOKEN").value_or(""),
                                           env("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE").value_or("")));
        tried.push_back("container credentials endpoint: AWS_CONTAINER_CREDENTIALS_*_URI not set");
    }

    // 6. IMDSv2
    if (truthy(env("AWS_EC2_METADATA_DISABLED"))) {
        tried.push_back("instance metadata: AWS_EC2_METADATA_DISABLED");
    } else {
        std::string base = trim_slashes(env("AWS_EC2_METADATA_SERVICE_ENDPOINT").value_or("http://169.254.169.254"));
        std::string why;
        if (auto c = instance_metadata(base, why)) return done(*c);
        tried.push_back("instance metadata: " + why);
    }

    std::string list;
    for (const auto& t : tried) list += (list.empty() ? "" : "; ") + t;
    throw remote_error(0, location, "no AWS credentials found (tried " + list + ")", "none");
}

}  // namespace ferry::detail
