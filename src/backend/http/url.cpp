// URL redaction and encoding helpers shared by the HTTP and S3 sources.
#include "backend/http/url.hpp"

#include <array>
#include <cctype>

namespace ferry::detail {
namespace {

std::string lower(std::string_view s) {
    std::string out(s);
    for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return out;
}

// Query parameter names whose values are secrets or signatures. Matching on fragments is
// deliberately broad: an over-redacted harmless parameter costs nothing, a leaked one does.
bool secret_parameter(std::string_view name) {
    std::string n = lower(name);
    constexpr std::array<std::string_view, 10> fragments = {
        "signature", "credential", "token", "secret", "password", "key", "sig", "policy", "auth", "session"};
    for (std::string_view f : fragments)
        if (n.find(f) != std::string::npos) return true;
    return false;
}

}  // namespace

std::string url_scheme(std::string_view location) {
    auto colon = location.find("://");
    if (colon == std::string_view::npos || colon == 0) return {};
    for (char c : location.substr(0, colon))
        if (!std::isalnum(static_cast<unsigned char>(c)) && c != '+' && c != '-' && c != '.') return {};
    return lower(location.substr(0, colon));
}

std::string url_host(std::string_view location) {
    auto sep = location.find("://");
    if (sep == std::string_view::npos) return {};
    std::string_view authority = location.substr(sep + 3);
    authority = authority.substr(0, authority.find_first_of("/?#"));
    if (auto at = authority.rfind('@'); at != std::string_view::npos) authority = authority.substr(at + 1);
    // An IPv6 literal keeps its colons: the port comes after the ']'.
    auto colon = authority.find(':', authority.starts_with('[') ? authority.find(']') : 0);
    return std::string(authority.substr(0, colon));
}

std::string redact_url(std::string_view url) {
    auto sep = url.find("://");
    if (sep == std::string_view::npos) {
        // Not a URL: it may still hold a query string (a bare path with '?').
        auto q = url.find('?');
        return q == std::string_view::npos ? std::string(url) : std::string(url.substr(0, q)) + "?<redacted>";
    }
    std::string out(url.substr(0, sep + 3));
    std::string_view rest = url.substr(sep + 3);
    // The authority ends at the first '/', '?' or '#'; userinfo is what precedes its last '@'.
    auto end = rest.find_first_of("/?#");
    std::string_view authority = rest.substr(0, end);
    auto at = authority.rfind('@');
    if (at != std::string_view::npos) authority = authority.substr(at + 1);
    out += authority;
    if (end == std::string_view::npos) return out;
    rest = rest.substr(end);
    auto hash = rest.find('#');
    if (hash != std::string_view::npos) rest = rest.substr(0, hash);
    auto q = rest.find('?');
    out += rest.substr(0, q);
    if (q == std::string_view::npos) return out;
    std::string_view query = rest.substr(q + 1);
    out += '?';
    bool first = true;
    while (!query.empty()) {
        auto amp = query.find('&');
        std::string_view pair = query.substr(0, amp);
        query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
        if (pair.empty()) continue;
        auto eq = pair.find('=');
        std::string_view name = pair.substr(0, eq);
        if (!first) out += '&';
        first = false;
        out += name;
        if (eq != std::string_view::npos) out += secret_parameter(name) ? "=REDACTED" : std::string(pair.substr(eq));
    }
    return out;
}

std::string uri_encode(std::string_view s, bool keep_slash) {
    static constexpr char hex[] = "0123456789ABCDEF";
    std::string out;
    out.reserve(s.size());
    for (unsigned char c : s) {
        if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' || (keep_slash && c == '/')) {
            out += static_cast<char>(c);
        } else {
            out += '%';
            out += hex[c >> 4];
            out += hex[c & 15];
        }
    }
    return out;
}

}  // namespace ferry::detail
