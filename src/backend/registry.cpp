// The table of sources. A new source is one folder under backend/ and one line here.
#include "backend/registry.hpp"

#include <cctype>
#include <mutex>

#include "backend/alternatives.hpp"
#include "backend/http/http_source.hpp"
#include "backend/posix/posix_source.hpp"
#include "backend/s3/s3_source.hpp"
#include "os/fork_safe_mutex.hpp"

namespace ferry::detail {
namespace {

// The sources a location can name, one line per URI scheme.
std::vector<scheme_entry> built_in() {
    return {
        {"file", "posix", open_local_file, {}},
        {"http", "http", open_http_source, {}},
        {"https", "http", open_http_source, {}},
        {"s3", "s3", open_s3_source, {}},
    };
}

struct table {
    fork_safe_mutex& mutex;
    std::vector<scheme_entry> schemes = built_in();
};

fork_safe_mutex table_mutex;  // never left taken in a forked child
// Made on first use, which the line below makes happen at load (no fork can catch it half
// made), and never destroyed: files may be opened from static destructors.
table& schemes() {
    static table* t = new table{table_mutex};
    return *t;
}
[[maybe_unused]] table& made_at_load = schemes();

}  // namespace

void register_scheme(scheme_entry entry) {
    table& t = schemes();
    std::lock_guard lock(t.mutex);
    for (auto& e : t.schemes)
        if (e.scheme == entry.scheme) {
            e = std::move(entry);
            return;
        }
    t.schemes.push_back(std::move(entry));
}

std::string redact_location(std::string_view location) {
    std::string s(location);
    auto q = s.find('?');
    if (q != std::string::npos) s = s.substr(0, q) + "?<redacted>";
    auto scheme_end = s.find("://");
    if (scheme_end == std::string::npos) return s;
    auto host = scheme_end + 3;
    auto slash = s.find('/', host);
    auto at = s.rfind('@', slash == std::string::npos ? s.size() : slash);
    if (at != std::string::npos && at >= host) s = s.substr(0, host) + "<redacted>@" + s.substr(at + 1);
    return s;
}

std::string scheme_of(std::string_view location) {
    auto at = location.find("://");
    if (at == std::string_view::npos || at == 0) return "file";
    for (char c : location.substr(0, at))
        if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '+' || c == '-' || c == '.')) return "file";
    std::string s(location.substr(0, at));
    for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return s;
}

std::unique_ptr<source> open_source(const std::string& location, open_mode mode, const settings& s) {
    std::string scheme = scheme_of(location);
    scheme_entry entry;
    {
        table& t = schemes();
        std::lock_guard lock(t.mutex);
        for (const auto& e : t.schemes)
            if (e.scheme == scheme) entry = e;
    }
    if (!entry.open) {
        std::string known;
        for (const auto& k : registered_schemes()) known += (known.empty() ? "" : ", ") + k;
        throw usage_error("no source is registered for scheme \"" + scheme + "\" (known: " + known + "): " +
                          redact_location(location));
    }
    if (entry.unavailable) {
        std::string no = entry.unavailable(s);
        if (!no.empty()) throw usage_error(entry.kind + " source unavailable: " + no + ": " + redact_location(location));
    }
    return entry.open(location, mode, s);
}

std::string source_unavailable(std::string_view kind, const settings& s) {
    // The kinds no location names: the local file's alternatives (backend/alternatives.cpp).
    if (const local_alternative* a = find_alternative(kind)) {
        auto no = a->probe ? a->probe(s) : std::nullopt;
        return no ? no->text : std::string();
    }
    source_availability check;
    {
        table& t = schemes();
        std::lock_guard lock(t.mutex);
        for (const auto& e : t.schemes)
            if (e.kind == kind && e.unavailable) check = e.unavailable;
    }
    return check ? check(s) : std::string();
}

std::vector<std::string> registered_schemes() {
    table& t = schemes();
    std::lock_guard lock(t.mutex);
    std::vector<std::string> v;
    for (const auto& e : t.schemes) v.push_back(e.scheme);
    return v;
}

}  // namespace ferry::detail
