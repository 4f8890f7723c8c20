// Parsing a location once, and the one redaction rule (see location.hpp).
#include "backend/location.hpp"

#include <algorithm>
#include <array>
#include <cctype>

namespace ferry::detail {
namespace {

std::string lower(std::string_view s) {
    std::string out(s);
    for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return out;
}

// Query parameter names whose values are secrets or signatures.
bool secret_parameter(std::string_view name) {
    std::string n = lower(name);
    constexpr std::array<std::string_view, 10> fragments = {
        "signature", "credential", "token", "secret", "password", "key", "sig", "policy", "auth", "session"};
    for (std::string_view f : fragments)
        if (n.find(f) != std::string::npos) return true;
    return false;
}

}  // namespace

location::location(std::string text) : text_(std::move(text)) {
    std::string_view t = text_;
    end_ = query_ = t.size();
    auto sep = t.find("://");
    bool url = sep != std::string_view::npos && sep > 0;
    for (std::size_t i = 0; url && i < sep; ++i) {
        auto c = static_cast<unsigned char>(t[i]);
        url = std::isalnum(c) || c == '+' || c == '-' || c == '.';
    }
    if (!url) {  // a plain path: all of it is the path, '?' and '#' included
        authority_ = path_ = 0;
        return;
    }
    scheme_ = lower(t.substr(0, sep));
    authority_ = sep + 3;
    path_ = std::min(t.find_first_of("/?#", authority_), t.size());
    end_ = std::min(t.find('#', path_), t.size());
    query_ = std::min(t.find('?', path_), end_);
}

std::string_view location::authority() const noexcept {
    return std::string_view(text_).substr(authority_, path_ - authority_);
}

std::string_view location::host() const noexcept {
    std::string_view a = authority();
    if (auto at = a.rfind('@'); at != std::string_view::npos) a = a.substr(at + 1);
    // An IPv6 literal keeps its colons: the port comes after the ']'.
    auto colon = a.find(':', a.starts_with('[') ? a.find(']') : 0);
    return a.substr(0, colon);
}

std::string_view location::path() const noexcept {
    if (!is_url()) return text_;
    return std::string_view(text_).substr(path_, query_ - path_);
}

std::string_view location::query() const noexcept {
    if (query_ >= end_) return {};
    return std::string_view(text_).substr(query_ + 1, end_ - query_ - 1);
}

std::string_view location::rest() const noexcept {
    return is_url() ? std::string_view(text_).substr(authority_) : std::string_view(text_);
}

std::string location::origin() const {
    if (!is_url()) return {};
    std::string_view a = authority();
    if (auto at = a.rfind('@'); at != std::string_view::npos) a = a.substr(at + 1);
    return std::string(text_, 0, authority_) + std::string(a);
}

std::string location::shown() const {
    if (!is_url()) return text_;
    std::string out = origin();
    out += path();
    if (query_ >= end_) return out;
    std::string_view query = this->query();
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
