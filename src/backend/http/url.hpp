// URLs as messages show them: the userinfo (user:password@) removed and the values of query
// parameters that carry credentials (presigned S3 URLs' X-Amz-Signature, X-Amz-Credential and
// X-Amz-Security-Token, Azure's sig, tokens, keys) replaced, so no message, log line, stat or
// doctor report ever holds a secret.
#pragma once

#include <string>
#include <string_view>

namespace ferry::detail {

/// The URL with credentials redacted (see above). Never throws on malformed input: what does
/// not parse is shortened to its scheme and host.
std::string redact_url(std::string_view url);

/// The scheme of `location` in lower case ("https", "s3"), or "" when it has none.
std::string url_scheme(std::string_view location);

/// The host of `location`, without userinfo or port: "" for "http://",
/// "http:///a.npy" or "http://:80/a", which name no host.
std::string url_host(std::string_view location);

/// Percent-encodes `s` as AWS canonical URIs want it: unreserved characters kept, '/' kept
/// when `keep_slash`, every other byte as %XX (upper-case hex).
std::string uri_encode(std::string_view s, bool keep_slash);

}  // namespace ferry::detail
