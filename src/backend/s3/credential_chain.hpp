// AWS credentials by the standard chain, in the documented order, first answer wins:
//   1. explicit arguments (s3_options)
//   2. the environment: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN
//   3. the profile (AWS_PROFILE or "default") in ~/.aws/credentials and ~/.aws/config: its keys,
//      or, when it names a role_arn with a source_profile (or a credential_source), the role
//      assumed by STS AssumeRole with the source's credentials (source profiles may chain)
//   4. web identity: AWS_WEB_IDENTITY_TOKEN_FILE + AWS_ROLE_ARN (or the profile's
//      web_identity_token_file + role_arn), exchanged by STS AssumeRoleWithWebIdentity
//   5. the container credentials endpoint: AWS_CONTAINER_CREDENTIALS_RELATIVE_URI (on
//      169.254.170.2) or AWS_CONTAINER_CREDENTIALS_FULL_URI, with AWS_CONTAINER_AUTHORIZATION_TOKEN
//      or AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE
//   6. instance metadata, IMDSv2 (a token PUT, then GETs), at AWS_EC2_METADATA_SERVICE_ENDPOINT
//      or 169.254.169.254; skipped when AWS_EC2_METADATA_DISABLED=true
// STS is asked at AWS_ENDPOINT_URL_STS, AWS_ENDPOINT_URL, the profile's endpoint_url, else
// https://sts.REGION.amazonaws.com.
//
// The result says which link answered (`source`), which messages, logs and the doctor show;
// the secret and the token are never shown. Links that hand out temporary credentials (4, 5, 6
// and assume-role) also give a way to ask again (`refresh`), which the signer
// (credential_provider.hpp) calls before the credentials expire.
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "backend/s3/aws_config.hpp"

namespace ferry::detail {

struct aws_credentials {
    std::string access_key;
    std::string secret_key;
    std::string session_token;
    std::string expiration;  ///< ISO 8601, when the link says (temporary credentials)
    /// Which link answered: "arguments", "environment", "profile dev (/home/u/.aws/credentials)",
    /// "profile dev: role arn:... assumed with profile base (...)", "web identity (arn:...)",
    /// "container credentials endpoint", "instance metadata (IMDSv2, role r)", or
    /// "none (unsigned requests)".
    std::string source;
    /// Asks the same link again (temporary credentials); empty for keys that never expire.
    /// Throws remote_error like the chain.
    std::function<aws_credentials()> refresh;
    bool anonymous() const { return access_key.empty(); }
};

/// Explicit settings for one S3 location; empty fields defer to the chain.
struct s3_options {
    std::string access_key, secret_key, session_token;
    std::string profile;
    std::string region;
    std::string endpoint;  ///< "http://127.0.0.1:9000" for S3-compatible stores
    bool unsigned_requests = false;  ///< public buckets: no credentials at all
};

/// Walks the chain. `tried` receives one line per link consulted and why it passed.
/// Throws remote_error (status 0, credentials "none") naming every link tried when none answers.
aws_credentials resolve_aws_credentials(const s3_options& o, const env_lookup& env, const std::string& location,
                                        std::vector<std::string>* tried = nullptr);

/// The region: arguments, AWS_REGION, AWS_DEFAULT_REGION, the profile's region, else us-east-1.
std::string resolve_aws_region(const s3_options& o, const env_lookup& env);

/// An ISO 8601 UTC time as AWS writes it ("2026-12-01T10:00:00Z", with optional fractional
/// seconds and a "+HH:MM" offset); nullopt when it does not parse.
std::optional<std::chrono::system_clock::time_point> parse_aws_time(const std::string& text);

}  // namespace ferry::detail
