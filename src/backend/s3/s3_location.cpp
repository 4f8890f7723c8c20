// Endpoint, region, addressing style and signing of an s3:// location.
#include "backend/s3/s3_location.hpp"

#include <cctype>

#include "backend/location.hpp"
#include "ferry/error.hpp"

namespace ferry::detail {
namespace {

// A bucket name that can be a DNS label under TLS wildcard certificates: no dots, lower case.
bool virtual_host_friendly(const std::string& bucket) {
    for (char c : bucket)
        if (!(std::islower(static_cast<unsigned char>(c)) || std::isdigit(static_cast<unsigned char>(c)) || c == '-'))
            return false;
    return !bucket.empty();
}

}  // namespace

std::pair<std::string, std::string> split_s3_url(const location& where) {
    if (where.scheme() != "s3") throw usage_error("not an s3:// URL: " + where.shown());
    std::string rest(where.rest());  // a key may hold a literal '?' or '#
    auto slash = rest.find('/');
    std::string bucket = rest.substr(0, slash);
    std::string key = slash == std::string::npos ? std::string() : rest.substr(slash + 1);
    if (bucket.empty() || bucket.find_first_of("@?#:") != std::string::npos)
        throw usage_error("not an s3://bucket/key URL (bad bucket name): " + where.shown());
    return {bucket, key};
}

s3_location resolve_s3_location(const location& where, const s3_options& o, const env_lookup& env,
                                const settings& s) {
    s3_location l;
    std::tie(l.bucket, l.key) = split_s3_url(where);
    l.location = "s3://" + l.bucket + "/" + l.key;
    l.region = resolve_aws_region(o, env);

    aws_profile profile = load_aws_profile(env, o.profile);
    std::string custom;
    if (!o.endpoint.empty()) custom = o.endpoint, l.endpoint_source = "arguments";
    else if (auto e = env("AWS_ENDPOINT_URL_S3"); e && !e->empty()) custom = *e, l.endpoint_source = "AWS_ENDPOINT_URL_S3";
    else if (auto e2 = env("AWS_ENDPOINT_URL"); e2 && !e2->empty()) custom = *e2, l.endpoint_source = "AWS_ENDPOINT_URL";
    else if (std::string p = profile.get("endpoint_url"); !p.empty()) custom = p, l.endpoint_source = "profile " + profile.name;
    while (!custom.empty() && custom.back() == '/') custom.pop_back();
    if (const location endpoint(custom); !custom.empty() && endpoint.scheme() != "http" && endpoint.scheme() != "https")
        throw usage_error("the S3 endpoint (from " + l.endpoint_source + ") is not an http(s) URL: " + endpoint.shown());

    std::string mode = s.s3_addressing;
    l.path_style = mode == "path" ||
                   (mode == "auto" && (!custom.empty() || !virtual_host_friendly(l.bucket)));
    std::string encoded_key = uri_encode(l.key, true);
    if (custom.empty()) {
        l.endpoint_source = "default";
        l.endpoint = "https://s3." + l.region + ".amazonaws.com";
    } else {
        l.endpoint = custom;
    }
    if (l.path_style) {
        l.bucket_url = l.endpoint + "/" + uri_encode(l.bucket, false) + "/";
    } else {
        const location endpoint(l.endpoint);
        const std::size_t host = l.endpoint.size() - endpoint.rest().size();  // after "scheme://"
        l.bucket_url = l.endpoint.substr(0, host) + l.bucket + "." + l.endpoint.substr(host) + "/";
    }
    l.object_url = l.bucket_url + encoded_key;

    l.signer = shared_aws_signer(o, env, l.location, s);
    l.credentials = l.signer->credentials();
    l.chain = l.signer->chain();
    l.auth = l.signer->current();
    return l;
}

}  // namespace ferry::detail
