// A location: what a file, a checkpoint or a save names (a local path, or a URL such as
// https://host/a.safetensors?X-Amz-Signature=... or s3://bucket/key), parsed once into scheme,
// authority, path and query and then passed down as a value, so that no layer parses the
// string again, and every message shows it through the one shown().
//
// uri_encode() percent-encodes a part of one.
//
// shown() is the one redaction rule: a plain path is shown as given; a URL loses its userinfo
// (user:password@) and its fragment, and the value of each query parameter whose name carries a
// credential (X-Amz-Signature, X-Amz-Credential, X-Amz-Security-Token, Azure's sig, tokens, keys,
// passwords...) becomes REDACTED. Harmless parameters (a version, a part number) stay, so a
// message still tells two URLs apart; a parameter is matched on name fragments, deliberately
// broadly: an over-redacted harmless parameter costs nothing, a leaked one does.
#pragma once

#include <string>
#include <string_view>

namespace ferry::detail {

class location {
public:
    location() = default;
    /// Parses `text`; never throws. Text without "scheme://" (a scheme being letters, digits,
    /// '+', '-' and '.') is a plain path.
    explicit location(std::string text);

    /// The text as given (what a source opens).
    const std::string& text() const noexcept { return text_; }
    /// The scheme in lower case ("https", "s3", "file"), or "" for a plain path.
    const std::string& scheme() const noexcept { return scheme_; }
    /// The registry's name for the scheme: the scheme, or "file" for a plain path.
    std::string_view registry_scheme() const noexcept {
        return scheme_.empty() ? std::string_view("file") : std::string_view(scheme_);
    }
    /// The location names something by URL (it has a scheme), not a plain path.
    bool is_url() const noexcept { return !scheme_.empty(); }

    /// What follows "scheme://" up to the first '/', '?' or '#' (userinfo and port included).
    std::string_view authority() const noexcept;
    /// The authority without userinfo or port: "" for "http://", "http:///a.npy" or
    /// "http://:80/a", which name no host. An IPv6 literal keeps its brackets.
    std::string_view host() const noexcept;
    /// For a URL, from the end of the authority to the first '?' or '#'; for a plain path, the path.
    std::string_view path() const noexcept;
    /// Between '?' and '#' (without the '?'); "" when there is none, and for a plain path.
    std::string_view query() const noexcept;
    /// Everything after "scheme://", as given: an S3 key may hold a literal '?' or '#'.
    std::string_view rest() const noexcept;
    /// "scheme://host[:port]" as given, without userinfo (a connection's key, an endpoint in a
    /// report); "" for a plain path.
    std::string origin() const;

    /// The location fit for a message, log line, stat or report (see above).
    std::string shown() const;

private:
    std::string text_;
    std::string scheme_;
    std::size_t authority_ = 0, path_ = 0, query_ = 0, end_ = 0;  // offsets into text_
};

/// Percent-encodes `s` as URLs and AWS canonical URIs want it: unreserved characters kept, '/'
/// kept when `keep_slash`, every other byte as %XX (upper-case hex).
std::string uri_encode(std::string_view s, bool keep_slash);

/// `text` as a message shows it: location(text).shown(), for text that travels no further.
inline std::string shown_location(std::string text) { return location(std::move(text)).shown(); }

}  // namespace ferry::detail
