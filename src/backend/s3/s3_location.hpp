// s3://bucket/key as HTTP: the endpoint (AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, the profile's
// endpoint_url, else https://s3.REGION.amazonaws.com), the region, the addressing style (path or
// virtual host), the object URL, and SigV4 signing by libcurl with credentials from the chain.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "backend/http/http_client.hpp"
#include "backend/location.hpp"
#include "backend/s3/credential_chain.hpp"
#include "backend/s3/credential_provider.hpp"
#include "ferry/settings.hpp"

namespace ferry::detail {

struct s3_location {
    std::string bucket;
    std::string key;
    std::string region;
    std::string endpoint;  ///< scheme://host[:port], no trailing slash
    std::string endpoint_source;  ///< "AWS_ENDPOINT_URL_S3", "profile dev", "default"...
    bool path_style = false;
    std::string object_url;  ///< the key's URL, encoded as SigV4 wants it
    std::string bucket_url;  ///< the bucket's URL (with a trailing '/')
    std::string location;    ///< "s3://bucket/key"
    http_auth auth;          ///< SigV4 (or nothing, for unsigned requests), as first resolved
    aws_credentials credentials;     ///< as first resolved (the signer has the current ones)
    std::vector<std::string> chain;  ///< what each link of the credential chain said
    std::shared_ptr<aws_signer> signer;  ///< signs every request, renewing temporary credentials
};

/// Splits "s3://bucket/key"; throws usage_error naming the location when it is not one.
std::pair<std::string, std::string> split_s3_url(const location& where);

/// Resolves everything needed to request the object. Throws remote_error when no credentials
/// are found, usage_error for a malformed location.
s3_location resolve_s3_location(const location& where, const s3_options& o, const env_lookup& env,
                                const settings& s);

}  // namespace ferry::detail
